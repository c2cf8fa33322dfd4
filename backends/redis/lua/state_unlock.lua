-- state_unlock.lua deletes the apply lock only while owner holds it, so a
-- stale unlock never frees another owner's lock.
--
--   KEYS[1] the apply lock
--   ARGV[1] owner
--
-- Returns 1 when it deleted the lock, 0 otherwise.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
