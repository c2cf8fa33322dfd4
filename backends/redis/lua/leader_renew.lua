-- leader_renew.lua extends the lease for exactly one holder and term, and
-- only while it is live: a holder whose term ended (even if the same
-- holder string took the lease again under a new term) is refused.
--
--   KEYS[1] the lease
--   ARGV[1] holder, ARGV[2] term, ARGV[3] lease in µs
--
-- Returns the new exp in µs, or 0 when the term is not live.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local cur = redis.call('HMGET', KEYS[1], 'holder', 'term', 'exp')
if cur[1] ~= ARGV[1] or cur[2] ~= ARGV[2] or (tonumber(cur[3]) or 0) <= now then
  return 0
end
local exp = now + tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 'exp', string.format('%d', exp))
redis.call('PEXPIREAT', KEYS[1], string.format('%d', math.floor(exp / 1000) + 1))
return exp
