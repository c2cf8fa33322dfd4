-- queue_job_by_id.lua reads one job of a queue in whatever state it is (the
-- queue browser: JobByID). It writes nothing.
--
-- KEYS: the fixed keys, then the ready sets of partitions 0..n-1, n at
-- least the stored span.
-- ARGV: the job id, cut.
-- It returns {1, state, then the fields of lib/queue_browse.lua's browse
-- (queueBrowseFields), then the job's attempt errors (the JSON array
-- queue_retry.lua keeps, '' for none)}, state being ready, delayed, running or dead (a
-- ready job with the partition of the set that holds it, a running one
-- with its lease deadline); {0} when the queue holds no job with that id;
-- {-1, n} when it got too few ready sets.
--#include lib/queue.lua
--#include lib/queue_partial.lua
--#include lib/queue_ready_set.lua
--#include lib/queue_browse.lua
local id, cut = ARGV[1], tonumber(ARGV[2])
local rec = redis.call('HGET', K_JOBS, id)
if not rec then return {0} end
local out = {1}
local exp = redis.call('ZSCORE', K_INFLIGHT, id)
local part
if exp then
  out[2] = 'running'
elseif redis.call('ZSCORE', K_DELAYED, id) then
  out[2] = 'delayed'
elseif redis.call('LPOS', K_DEAD, id) then
  out[2] = 'dead'
else
  local m = redis.call('HMGET', K_META, 'span', 'partitions')
  local S = span_of({span = m[1], partitions = m[2]})
  if NLISTS < S then return {-1, S} end
  part = ready_set_of(id, decode(rec).part)
  if not part then return {0} end
  out[2] = 'ready'
end
browse(out, id, rec, cut, part, tonumber(exp or '0'))
out[#out + 1] = decode(rec).hist or ''
return out
