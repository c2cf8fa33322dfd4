-- sem_leave_wait.lua removes owner's waiter record and wake list. A waiter
-- that leaves the line (it gave up) may make it the turn of the waiter at
-- position free - 1, which it wakes; the last to leave re-arms the fast
-- acquire.
--
--   ARGV[1] owner
--#include lib/sem_keys.lua
--#include lib/sem_consts.lua
--#include lib/sem.lua
local was = redis.call('ZREM', K_WEXP, ARGV[1])
redis.call('ZREM', K_WSEQ, ARGV[1])
redis.call('DEL', wkey(ARGV[1]))
if was == 1 then
  local limit = tonumber(redis.call('HGET', K_CFG, 'limit') or '0')
  local now = now_us()
  prune_line(now)
  local free = limit - live_count(now)
  if free > 0 then wake_line(free - 1, 1, math.max(limit, 1)) end
  refresh_arm()
end
return 0
