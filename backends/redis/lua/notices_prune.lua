-- notices_prune.lua deletes the records older than TIME minus a duration.
--
--   KEYS[1] the notices
--   ARGV[1] the duration in µs
--
-- Returns how many records it deleted.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
return redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%d', now - tonumber(ARGV[1])))
