-- queue_purge_dead_job.lua deletes one dead job (PurgeDeadJob).
--
-- KEYS: the fixed keys.
-- ARGV[1]: the job id.
-- It returns {1} when it deleted the job, {0} when the job is not in the
-- queue's dead list.
--#include lib/queue.lua
local id = ARGV[1]
if redis.call('LREM', K_DEAD, 1, id) == 0 then return {0} end
redis.call('HDEL', K_JOBS, id)
redis.call('HDEL', K_PAYLOADS, id)
return {1}
