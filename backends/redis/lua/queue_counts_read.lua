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
if #ms == 0 then return out end
-- One HMGET for every minute's two fields.
local fields = {}
for _, m in ipairs(ms) do
  fields[#fields + 1] = m .. ':p'
  fields[#fields + 1] = m .. ':f'
end
local v = redis.call('HMGET', KEYS[1], unpack(fields))
for i, m in ipairs(ms) do
  out[#out + 1] = tonumber(m)
  out[#out + 1] = tonumber(v[2 * i - 1] or '0')
  out[#out + 1] = tonumber(v[2 * i] or '0')
end
return out
