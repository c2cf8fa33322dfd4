-- queue_return.lua puts a claimed job back (ReturnJob).
--
-- KEYS: the fixed keys, then the ready sets of all partitions.
-- ARGV: id, owner.
-- When owner holds the job it clears the owner, takes back the attempt
-- the claim counted, and puts the job back in its partition's ready set
-- (% P), where its id and its priority keep its place (ready_score), and
-- a keyed job back from krunning to kready; last_error and available_at
-- are kept, and a wake element is pushed. It returns {1}, {3} (the owner does not hold it, or the queue is
-- gone), or {-1, P}.
--#include lib/queue.lua
local m = redis.call('HMGET', K_META, 'partitions')
if not m[1] then return {3} end
local P = tonumber(m[1])
if NLISTS ~= P then return {-1, P} end
local id, owner = ARGV[1], ARGV[2]
local rec = redis.call('HGET', K_JOBS, id)
if not rec then return {3} end
local j = decode(rec)
if j.owner == '' or j.owner ~= owner then return {3} end
redis.call('ZREM', K_INFLIGHT, id)
j.owner = ''
if j.attempt > 0 then j.attempt = j.attempt - 1 end
j.part = j.part % P
redis.call('ZADD', ready_key(j.part), ready_score(id, j.prio), id)
if j.key ~= '' then
  local km = kmember(j.key, id)
  redis.call('ZREM', K_KRUNNING, km)
  redis.call('ZADD', K_KREADY, 0, km)
end
redis.call('HSET', K_JOBS, id, encode(j))
wake(1)
return {1}
