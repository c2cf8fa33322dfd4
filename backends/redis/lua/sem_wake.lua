-- sem_wake.lua gives back a wake element that a cancelled waiter took,
-- and deletes its interrupt list.
--
--   KEYS[10] the waiter's interrupt list
--   ARGV[1]  "1" to give the wake element back
--#include lib/sem_keys.lua
--#include lib/sem_consts.lua
--#include lib/sem.lua
redis.call('DEL', KEYS[10])
if ARGV[1] == '1' then
  wake(1, math.max(tonumber(redis.call('HGET', K_CFG, 'limit') or '1'), 1))
end
return 0
