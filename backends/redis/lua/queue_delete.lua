-- queue_delete.lua removes a queue (DeleteQueue).
--
-- KEYS: the fixed keys, then the ready sets of partitions 0..n-1, n at
-- least the stored span.
-- ARGV: force ('1' or '0').
-- It returns {1} after deleting every key of the queue; {-2, jobs} when the
-- queue holds jobs (the jobs hash) and force is not set; {-1, n} when it
-- got too few ready sets. An absent queue's leftover keys are deleted too.
--#include lib/queue.lua
local m = redis.call('HMGET', K_META, 'span', 'partitions')
local need = span_of({span = m[1], partitions = m[2]})
if NLISTS < need then return {-1, need} end
local jobs = redis.call('HLEN', K_JOBS)
if jobs > 0 and ARGV[1] ~= '1' then return {-2, jobs} end
redis.call('DEL', unpack(KEYS))
return {1}
