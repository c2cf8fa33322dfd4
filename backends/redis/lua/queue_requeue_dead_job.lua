-- queue_requeue_dead_job.lua makes one dead job ready again
-- (RequeueDeadJob), as queue_requeue_dead.lua does to each dead job.
--
-- KEYS: the fixed keys, then the ready sets of all partitions.
-- ARGV[1]: the job id.
-- It returns {1} when it requeued the job, {0} when the queue is absent
-- or the job is not in its dead list, {-1, P} when it got too few ready
-- sets.
--#include lib/queue.lua
local m = redis.call('HMGET', K_META, 'partitions')
if not m[1] then return {0} end
local P = tonumber(m[1])
if NLISTS ~= P then return {-1, P} end
local id = ARGV[1]
local rec = redis.call('HGET', K_JOBS, id)
if not rec or redis.call('LREM', K_DEAD, 1, id) == 0 then return {0} end
local j = decode(rec)
j.attempt, j.avail, j.owner, j.part = 0, now_us(), '', j.part % P
redis.call('HSET', K_JOBS, id, encode(j))
redis.call('ZADD', ready_key(j.part), ready_score(id, j.prio), id)
if j.key ~= '' then redis.call('ZADD', K_KREADY, 0, kmember(j.key, id)) end
wake(1)
return {1}
