-- sem_put.lua creates or updates the config and repairs the slots to
-- max(limit, live holders), inside one script so that no token is in
-- flight while it counts; it wakes the waiters whose turn the free slots
-- make. A semaphore of limit 1, not keyed and without live holder records
-- becomes (or stays) a one-slot semaphore, its slot repaired; any other
-- leaves that mode first. A keyed semaphore keeps no token (slots left
-- from before it was keyed retire on release); the first waiters of each
-- of its live instances are woken instead, so that a higher limit reaches
-- them at once.
--
--   KEYS[10]   the index of the instances (keyed semaphores)
--   ARGV[1]    the instances' key prefix (lib/inst_observe.lua)
--   ARGV[2..8] limit, lease ns, mode, wake, max_waiting, max_hold ns,
--              keyed ("1" or "0")
--
-- Returns the number of free slots.
--#include lib/sem_keys.lua
--#include lib/sem_consts.lua
--#include lib/sem.lua
--#include lib/inst_observe.lua
redis.call('HSET', K_CFG, 'limit', ARGV[2], 'lease', ARGV[3], 'mode', ARGV[4],
  'wake', ARGV[5], 'max_waiting', ARGV[6], 'max_hold', ARGV[7], 'keyed', ARGV[8])
local limit = tonumber(ARGV[2])
local now = now_us()
if ARGV[8] == '1' then
  to_general()
  local n = repair(0, now, true)
  for _, i in ipairs(instances(now)) do
    if limit > 0 then inst_wake(i, limit) end
  end
  refresh_arm()
  return n
end
if limit == 1 and (one_slot() or live_count(now) == 0) then
  if not one_slot() then to_one_slot() end
  -- Repair: a slot deleted behind coordd's back comes back, tokens and a
  -- sentinel an older binary's repair changed are set right.
  if redis.call('GET', K_LOCK) == '!' then redis.call('DEL', K_LOCK) end
  redis.call('DEL', K_FREE)
  redis.call('ZADD', K_EXP, LOCK_SENT_EXP, '0')
  redis.call('HSET', K_HOLD, '0', LOCK_SENT_REC)
  local free = 1 - live_count(now)
  prune_line(now)
  wake_line(0, free, 1)
  refresh_arm()
  return free
end
to_general()
local n = repair(limit, now, true)
prune_line(now)
wake_line(0, math.min(n, limit - live_count(now)), math.max(limit, 1))
refresh_arm()
return n
