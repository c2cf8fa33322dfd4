-- queue_job_errors.lua reads one job's attempt errors (the queue
-- browser's JobByID and DeadJob read them after the job). It writes
-- nothing.
--
-- KEYS: the fixed keys. ARGV: the job id.
-- It returns {1, errors} (errors: the JSON array queue_retry.lua keeps, ''
-- for none), or {0} when the job is gone.
--#include lib/queue.lua
local rec = redis.call('HGET', K_JOBS, ARGV[1])
if not rec then return {0} end
return {1, decode(rec).hist or ''}
