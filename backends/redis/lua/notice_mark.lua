-- notice_mark.lua records a notified event at the server's TIME unless it
-- is recorded, and returns the time of its first record.
--
--   KEYS[1] the notices: a sorted set of NoticeKey -> µs of TIME
--   ARGV[1] the NoticeKey
--
-- Returns the record's time in µs, as a string.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZADD', KEYS[1], 'NX', now, ARGV[1])
return redis.call('ZSCORE', KEYS[1], ARGV[1])
