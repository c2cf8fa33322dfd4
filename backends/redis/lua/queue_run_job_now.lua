-- queue_run_job_now.lua makes one delayed job available now (RunJobNow):
-- out of the delayed set into its partition's ready set (% P), where its
-- id and its priority keep its place (ready_score), with available_at
-- now and its attempts and last_error kept (a keyed job stays in kready,
-- in its key's order), and a wake element is pushed, as queue_requeue_dead_job.lua does.
--
-- KEYS: the fixed keys, then the ready sets of all partitions.
-- ARGV[1]: the job id.
-- It returns {1} when it moved the job, {0} when the queue is absent or
-- has no delayed job with that id, {-1, P} when it got too few ready
-- sets.
--#include lib/queue.lua
local m = redis.call('HMGET', K_META, 'partitions')
if not m[1] then return {0} end
local P = tonumber(m[1])
if NLISTS < P then return {-1, P} end
local id = ARGV[1]
local rec = redis.call('HGET', K_JOBS, id)
if not rec or redis.call('ZREM', K_DELAYED, id) == 0 then return {0} end
local j = decode(rec)
j.avail, j.part = now_us(), j.part % P
redis.call('HSET', K_JOBS, id, encode(j))
redis.call('ZADD', ready_key(j.part), ready_score(id, j.prio), id)
wake(1)
return {1}
