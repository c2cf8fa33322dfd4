-- queue_counts_add.lua adds what workers did with a queue's jobs to the
-- minute of the server's clock that holds now (AddQueueCounts).
--
-- KEYS: the queue's counts hash (fields "<minute>:p" processed and
-- "<minute>:f" failed, minute in Unix seconds) and its minutes sorted set
-- (member and score: the minute).
-- ARGV: processed, failed, retention in seconds.
-- Minutes older than the retention are deleted here, and both keys expire
-- a retention after their last write, so a queue nobody works leaves
-- nothing behind. It returns the minute.
local t = redis.call('TIME')
local sec = tonumber(t[1])
local minute = sec - sec % 60
local keep = tonumber(ARGV[3])
local m = string.format('%d', minute)
if tonumber(ARGV[1]) > 0 then redis.call('HINCRBY', KEYS[1], m .. ':p', ARGV[1]) end
if tonumber(ARGV[2]) > 0 then redis.call('HINCRBY', KEYS[1], m .. ':f', ARGV[2]) end
redis.call('ZADD', KEYS[2], minute, m)
local cutoff = '(' .. string.format('%d', sec - keep)
local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', cutoff, 'LIMIT', 0, 1000)
for _, o in ipairs(old) do redis.call('HDEL', KEYS[1], o .. ':p', o .. ':f') end
if #old > 0 then redis.call('ZREM', KEYS[2], unpack(old)) end
redis.call('EXPIRE', KEYS[1], keep)
redis.call('EXPIRE', KEYS[2], keep)
return minute
