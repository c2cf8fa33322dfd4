-- hosts_prune.lua deletes the records last seen before TIME minus a
-- duration, from both keys.
--
--   KEYS[1] the records, KEYS[2] last seen
--   ARGV[1] the duration in µs
--
-- Returns how many records it deleted.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. string.format('%d', now - tonumber(ARGV[1])))
local i = 1
while i <= #old do
  local j = math.min(i + 499, #old)
  redis.call('HDEL', KEYS[1], unpack(old, i, j))
  redis.call('ZREM', KEYS[2], unpack(old, i, j))
  i = j + 1
end
return #old
