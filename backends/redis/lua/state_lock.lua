-- state_lock.lua takes or renews the apply lock: it sets the lock to owner
-- with a lease of ttl milliseconds when it is absent (never taken, released
-- or expired: Redis drops an expired key by its own clock) or already
-- owner's. SET NX PX cannot tell a renewal from a take, so this is a script.
--
--   KEYS[1] the apply lock (string: the owner)
--   ARGV[1] owner
--   ARGV[2] ttl in milliseconds
--
-- Returns {1} when owner holds the lock, or {0, holder, remaining ms}.
local cur = redis.call('GET', KEYS[1])
if cur == false or cur == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {1}
end
return {0, cur, redis.call('PTTL', KEYS[1])}
