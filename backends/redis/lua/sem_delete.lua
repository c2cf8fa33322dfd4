-- sem_delete.lua deletes every key of a semaphore without live holders;
-- with live holders it sets the limit to 0 and removes the free tokens and
-- the expired holders, so that the live ones retire on release (a
-- one-slot semaphore's holder first moves to the token list's records).
-- The live holders of a keyed semaphore's instances count as its holders:
-- while they remain, the instances read the limit 0 and admit nobody; once
-- none remains, every instance's keys go with the semaphore's (their
-- waiters find the semaphore absent at their next look).
--
--   KEYS[10] the index of the instances  ARGV[1] their key prefix
--
-- Returns the number of live holders (0: deleted).
--#include lib/sem_keys.lua
--#include lib/sem_consts.lua
--#include lib/sem.lua
--#include lib/inst_observe.lua
if redis.call('EXISTS', K_CFG, K_EXP, K_INST, K_LOCK) == 0 then
  return 0
end
local now = now_us()
local live = live_count(now)
local inst = instances(now)
for _, i in ipairs(inst) do live = live + inst_live(i, now) end
if live == 0 then
  -- Waiters in line learn at once that the semaphore is gone.
  prune_line(now)
  wake_line(0, redis.call('ZCARD', K_WSEQ), 1)
  for _, i in ipairs(inst) do inst_delete(i) end
  redis.call('DEL', K_CFG, K_FREE, K_EXP, K_HOLD, K_FENCE, K_WAKE, K_WSEQ, K_WEXP, K_INST, K_LOCK)
  return 0
end
to_general()
redis.call('HSET', K_CFG, 'limit', '0')
for _, e in ipairs(redis.call('ZRANGE', K_EXP, '-inf', int(now), 'BYSCORE')) do clear_holder(e) end
redis.call('DEL', K_FREE)
redis.call('RPUSH', K_FREE, SENTINEL)
refresh_arm()
return live
