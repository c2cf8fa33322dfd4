-- sem_extend.lua renews owner's lease to now + lease, only while it is
-- live: a one-slot semaphore's in the lock (its key TTL too), any other's
-- in exp and the owner index.
--
--   ARGV[1] owner  ARGV[2] lease µs  ARGV[3] the lock's TTL (lease ms +
--   GRACE_MS)
--
-- Returns the new expiry in µs, or -1 when owner holds nothing live.
--#include lib/sem_keys.lua
--#include lib/sem_consts.lua
--#include lib/sem.lua
local now = now_us()
local r = redis.call('EXISTS', K_LOCK) == 1 and lock_get(now)
if r and r.owner == ARGV[1] then
  if r.exp <= now then return -1 end
  local exp = now + tonumber(ARGV[2])
  redis.call('SET', K_LOCK, lock_record(r.flag, r.owner, r.fencing, r.since, exp, r.pid, r.host), 'PX', ARGV[3])
  return exp
end
local slot, score = owned(ARGV[1])
if not slot then return -1 end
if score <= now then return -1 end
local exp = int(now + tonumber(ARGV[2]))
redis.call('ZADD', K_EXP, 'XX', exp, slot)
redis.call('HSET', K_HOLD, 'o:' .. ARGV[1], slot .. ' ' .. exp)
return tonumber(exp)
