-- queue_extend.lua renews a lease (ExtendJob).
--
-- KEYS: the fixed keys.
-- ARGV: id, owner.
-- When owner holds the job and its deadline has not passed, the deadline
-- becomes now + visibility; it returns the new deadline µs, or 0 when the
-- lease is lost (another owner, none, expired, or the queue is gone).
--#include lib/queue.lua
local vis = redis.call('HGET', K_META, 'vis')
if not vis then return 0 end
local id, owner = ARGV[1], ARGV[2]
local rec = redis.call('HGET', K_JOBS, id)
if not rec then return 0 end
local j = decode(rec)
if j.owner == '' or j.owner ~= owner then return 0 end
local now = now_us()
local exp = redis.call('ZSCORE', K_INFLIGHT, id)
if not exp or tonumber(exp) <= now then return 0 end
local deadline = now + tonumber(vis)
redis.call('ZADD', K_INFLIGHT, 'XX', deadline, id)
return deadline
