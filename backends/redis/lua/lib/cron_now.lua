-- lib/cron_now.lua sets now (a number) and nows (its text) to the server's
-- TIME in microseconds.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local nows = string.format('%d', now)
