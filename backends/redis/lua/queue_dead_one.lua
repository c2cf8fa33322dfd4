-- queue_dead_one.lua reads one dead job (DeadJob). It writes nothing.
--
-- KEYS: the fixed keys. ARGV: the job id, cut. It returns the fields of
-- lib/queue_partial.lua's partial (queuePartialFields) and then the job's
-- attempt errors (the JSON array queue_retry.lua keeps, '' for none), or
-- {} when the job is not in the queue's dead list.
--#include lib/queue.lua
--#include lib/queue_partial.lua
local id, cut = ARGV[1], tonumber(ARGV[2])
local out = {}
local rec = redis.call('HGET', K_JOBS, id)
if not rec or not redis.call('LPOS', K_DEAD, id) then return out end
partial(out, id, rec, cut)
out[#out + 1] = decode(rec).hist or ''
return out
