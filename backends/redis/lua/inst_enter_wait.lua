-- inst_enter_wait.lua queues ARGV[2] behind every live waiter of the
-- instance (creating it), or renews its record, keeping its place.
--
--   ARGV[3] lease µs
--
-- Returns {1} entered, {0} renewed, {-1} absent, {-5} not keyed, {-2,
-- waiting, max_waiting}.
--#include lib/inst.lua
--#include lib/waiter_info.lua
local limit, maxw = sem()
if limit < 0 then
  if limit == -1 then return {-1} end
  return {-5}
end
local now = now_us()
prune(now)
local exp = int(now + tonumber(ARGV[3]))
if redis.call('ZSCORE', K_WEXP, ARGV[2]) then
  redis.call('ZADD', K_WEXP, exp, ARGV[2])
  winfo_put(K_WSEQ, K_WEXP, ARGV[2], ARGV[4], ARGV[5], now, tonumber(exp), false)
  settle(now)
  return {0}
end
local n = redis.call('ZCARD', K_WEXP)
if maxw >= 0 and n >= maxw then
  settle(now)
  return {-2, n, maxw}
end
local last = redis.call('ZRANGE', K_WSEQ, -1, -1, 'WITHSCORES')
local seq = 1
if last[2] then seq = tonumber(last[2]) + 1 end
redis.call('ZADD', K_WSEQ, int(seq), ARGV[2])
redis.call('ZADD', K_WEXP, exp, ARGV[2])
winfo_put(K_WSEQ, K_WEXP, ARGV[2], ARGV[4], ARGV[5], now, tonumber(exp), true)
settle(now)
return {1}
