-- sem_enter_wait.lua registers owner as a waiter, behind every live one,
-- after pruning expired waiter records; a waiter already registered renews
-- its lease and keeps its ticket.
--
--   ARGV[1] owner  ARGV[2] lease µs  ARGV[3] host  ARGV[4] pid
--
-- Returns {1} entered, {0} renewed, {-1} absent, {-2, waiting, max_waiting},
-- {-6} keyed (its instances have the lines). Entering disarms the fast
-- acquire and flags a one-slot semaphore's holder. Host and pid go to the
-- line's winfo (waiters_list.go).
--#include lib/sem_keys.lua
--#include lib/sem_consts.lua
--#include lib/sem.lua
--#include lib/waiter_info.lua
local c = redis.call('HMGET', K_CFG, 'limit', 'keyed')
if not c[1] then return {-1} end
if c[2] == '1' then return {-6} end
local now = now_us()
for _, o in ipairs(redis.call('ZRANGE', K_WEXP, '-inf', int(now), 'BYSCORE')) do
  redis.call('ZREM', K_WEXP, o)
  redis.call('ZREM', K_WSEQ, o)
end
local exp = int(now + tonumber(ARGV[2]))
if redis.call('ZSCORE', K_WEXP, ARGV[1]) then
  redis.call('ZADD', K_WEXP, exp, ARGV[1])
  winfo_put(K_WSEQ, K_WEXP, ARGV[1], ARGV[3], ARGV[4], now, tonumber(exp), false)
  return {0}
end
local maxw = tonumber(redis.call('HGET', K_CFG, 'max_waiting') or '-1')
local n = redis.call('ZCARD', K_WEXP)
if maxw >= 0 and n >= maxw then return {-2, n, maxw} end
local last = redis.call('ZRANGE', K_WSEQ, -1, -1, 'WITHSCORES')
local seq = 1
if last[2] then seq = tonumber(last[2]) + 1 end
redis.call('ZADD', K_WSEQ, int(seq), ARGV[1])
redis.call('ZADD', K_WEXP, exp, ARGV[1])
winfo_put(K_WSEQ, K_WEXP, ARGV[1], ARGV[3], ARGV[4], now, tonumber(exp), true)
-- Somebody waits now: the fast acquire must read the line, and the
-- holder's release must wake it.
refresh_arm()
flag_lock()
return {1}
