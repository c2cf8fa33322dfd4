-- sem_fast_release.lua releases a one-slot semaphore's holder: PTTL and
-- GETDEL of the lock, the lease live while the TTL still exceeds
-- GRACE_MS (+ 2 ms: the TTL counts whole milliseconds from the SET,
-- the record's expiry µs from TIME before it, so the TTL ends up to 2 ms
-- later). A record that is not owner's is put back as it was. A flagged
-- record (somebody may be blocked on this release) wakes the waiter whose
-- turn the free slot makes, the head of the line, or a caller blocked on
-- the shared list when nobody is in line (the rare path).
--
--   KEYS[1] lock  ARGV[1] "<len(owner)> <owner>"
--
-- Returns 1 when the lease was live, 0 when it had expired (the record is
-- cleared all the same), -7 when owner holds no lock (it may hold a slot
-- of the token list: sem_release.lua).
local K_LOCK = KEYS[1]
local pt = redis.call('PTTL', K_LOCK)
if pt <= 0 then return -7 end
local v = redis.call('GETDEL', K_LOCK)
if string.sub(v, 2, #ARGV[1] + 1) ~= ARGV[1] then
  redis.call('SET', K_LOCK, v, 'PX', pt)
  return -7
end
local code = 0
if pt > 3600000 + 2 then code = 1 end
if string.byte(v) == 48 then return code end
local K_FENCE = string.sub(K_LOCK, 1, -5) .. 'fencing'
--#include lib/sem_derived_keys.lua
--#include lib/sem_consts.lua
--#include lib/sem.lua
local now = now_us()
prune_line(now)
wake_line(0, 1, 1)
refresh_arm()
return code
