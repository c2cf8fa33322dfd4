-- rate_observe.lua reads a rate limit (ObserveRateLimits).
--
-- KEYS: the limit's hash (see rate_take.lua).
-- Replies {} when the limit is absent, else {count, per µs, burst,
-- keyed, now µs, the unkeyed TAT (0: none), keys not idle}. It counts the
-- keys' fields with one pass of HSCAN over the hash.
local cfg = redis.call('HMGET', KEYS[1], 'count', 'per', 'burst', 'keyed', 'tat')
if not cfg[1] then return {} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local busy = 0
if cfg[4] == '1' then
  local c = '0'
  repeat
    local r = redis.call('HSCAN', KEYS[1], c, 'MATCH', 'k:*', 'COUNT', 1000)
    c = r[1]
    for i = 2, #r[2], 2 do
      if tonumber(r[2][i]) > now then busy = busy + 1 end
    end
  until c == '0'
end
return {cfg[1], cfg[2], cfg[3], cfg[4], string.format('%d', now), cfg[5] or '0', busy}
