-- queue_counts_read.lua reads a queue's minutes that began within a span
-- before the server's now (ReadQueueCounts). It writes nothing.
--
-- KEYS: the queue's counts hash and minutes sorted set
-- (queue_counts_add.lua). ARGV: the span in seconds.
-- It returns {now µs, then minute, processed, failed per minute}, oldest
-- first.
local t = redis.call('TIME')
local sec = tonumber(t[1])
local out = {sec * 1000000 + tonumber(t[2])}
local from = sec - tonumber(ARGV[1])
from = from - from % 60
local ms = redis.call('ZRANGEBYSCORE', KEYS[2], from, '+inf')
for _, m in ipairs(ms) do
  local v = redis.call('HMGET', KEYS[1], m .. ':p', m .. ':f')
  out[#out + 1] = tonumber(m)
  out[#out + 1] = tonumber(v[1] or '0')
  out[#out + 1] = tonumber(v[2] or '0')
end
return out
