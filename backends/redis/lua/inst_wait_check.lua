-- inst_wait_check.lua is WaitSemaphore's first step for an instance: {1}
-- when TryAcquire may succeed for ARGV[2] now (or the semaphore is
-- absent), else {0, µs until the next event or -1 when none, 1 when
-- ARGV[2] is in line else 0}, having emptied ARGV[2]'s wake list so that
-- the BLPOP that follows waits for a new push. The events: the earliest
-- live lease expires, or the record of a waiter ahead expires.
--#include lib/inst.lua
local limit = redis.call('HGET', K_CFG, 'limit')
if not limit then return {1} end
limit = tonumber(limit)
local now = now_us()
prune(now)
local n, seq = ahead(ARGV[2])
local live = redis.call('ZCARD', K_EXP)
if live < limit and n < limit - live then
  settle(now)
  return {1}
end
if seq then redis.call('DEL', wkey(ARGV[2])) end
local wait = -1
local first = redis.call('ZRANGE', K_EXP, 0, 0, 'WITHSCORES')
if first[2] then wait = tonumber(first[2]) - now end
if n > 0 then
  local ws = redis.call('ZRANGE', K_WEXP, 0, 1, 'WITHSCORES')
  for i = 1, #ws, 2 do
    if ws[i] ~= ARGV[2] then
      local d = tonumber(ws[i + 1]) - now
      if wait < 0 or d < wait then wait = d end
      break
    end
  end
end
settle(now)
if seq then return {0, wait, 1} end
return {0, wait, 0}
