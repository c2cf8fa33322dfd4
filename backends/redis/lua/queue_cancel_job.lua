-- queue_cancel_job.lua deletes one ready or delayed job (CancelJob), as
-- an ack deletes a finished one: its record, its payload and its entry in
-- kready go, so that the next job of its key may be claimed and a unique
-- key pushed again; a wake element is pushed when its key has jobs
-- waiting. An in-flight or dead job is left alone.
--
-- KEYS: the fixed keys, then the ready sets of partitions 0..n-1, n at
-- least the stored span.
-- ARGV[1]: the job id.
-- It returns {1} when it deleted the job, {0} when the queue is absent or
-- has no ready or delayed job with that id, {-1, n} when it got too few
-- ready sets.
--#include lib/queue.lua
--#include lib/queue_ready_set.lua
local m = redis.call('HMGET', K_META, 'span', 'partitions')
if not m[2] then return {0} end
local S = span_of({span = m[1], partitions = m[2]})
if NLISTS < S then return {-1, S} end
local id = ARGV[1]
local rec = redis.call('HGET', K_JOBS, id)
if not rec then return {0} end
local j = decode(rec)
if redis.call('ZREM', K_DELAYED, id) == 0 then
  local p = ready_set_of(id, j.part)
  if not p then return {0} end
  redis.call('ZREM', ready_key(p), id)
end
redis.call('HDEL', K_JOBS, id)
redis.call('HDEL', K_PAYLOADS, id)
if j.key ~= '' then
  redis.call('ZREM', K_KREADY, kmember(j.key, id))
  if oldest_keyed(K_KREADY, j.key) then wake(1) end
end
return {1}
