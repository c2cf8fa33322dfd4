-- rate_observe.lua reads a rate limit (ObserveRateLimits).
--
-- KEYS: the limit's config hash, its own record and its keys sorted set.
-- Replies {} when the limit is absent, else {count, per µs, burst,
-- keyed, now µs, the own record's TAT (0: none), keys not idle}.
local cfg = redis.call('HMGET', KEYS[1], 'count', 'per', 'burst', 'keyed')
if not cfg[1] then return {} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat = redis.call('GET', KEYS[2]) or '0'
local busy = redis.call('ZCOUNT', KEYS[3], '(' .. string.format('%d', now), '+inf')
return {cfg[1], cfg[2], cfg[3], cfg[4], string.format('%d', now), tat, busy}
