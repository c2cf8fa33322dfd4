-- inst_leave_wait.lua removes ARGV[2]'s waiter record and wake list, wakes
-- the waiter whose turn that makes, and removes the instance when idle.
--#include lib/inst.lua
local was = redis.call('ZREM', K_WEXP, ARGV[2])
redis.call('ZREM', K_WSEQ, ARGV[2])
redis.call('DEL', wkey(ARGV[2]))
local now = now_us()
prune(now)
if was == 1 then
  local free = tonumber(redis.call('HGET', K_CFG, 'limit') or '0') - redis.call('ZCARD', K_EXP)
  if free > 0 then wake_line(free - 1, 1) end
end
settle(now)
return 0
