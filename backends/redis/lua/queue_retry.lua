-- queue_retry.lua returns a failed job to the queue or the dead list
-- (Retry).
--
-- KEYS: the fixed keys, then the ready sets of all partitions.
-- ARGV: id, owner, reason, the owner's worker, how many attempt errors a
-- job keeps.
-- When owner holds the job (ErrLost otherwise) it records the reason,
-- adds it to the job's attempt errors (attempt, at_us as a decimal string,
-- worker, error: backends.AppendAttemptError's layout, the newest kept)
-- and clears the owner; with max_attempts > 0 used up the job goes to the dead
-- list, otherwise it is ready again at now + retry_backoff: in the delayed
-- set with a backoff, in its ready set (its id and its priority keep its
-- place, ready_score) without, and a wake element is pushed (also when a
-- job with a key dies and its key has jobs waiting). It returns {1} (ready), {2} (dead), {3}
-- (the owner does not hold it, or the queue is gone), or {-1, P}.
--#include lib/queue.lua
local m = redis.call('HMGET', K_META, 'partitions', 'max_attempts', 'backoff')
if not m[1] then return {3} end
local P = tonumber(m[1])
if NLISTS ~= P then return {-1, P} end
local id, owner = ARGV[1], ARGV[2]
local rec = redis.call('HGET', K_JOBS, id)
if not rec then return {3} end
local j = decode(rec)
if j.owner == '' or j.owner ~= owner then return {3} end
redis.call('ZREM', K_INFLIGHT, id)
local now = now_us()
local hist = {}
if j.hist and j.hist ~= '' then
  local ok, h = pcall(cjson.decode, j.hist)
  if ok and type(h) == 'table' then hist = h end
end
hist[#hist + 1] = {attempt = j.attempt, at_us = string.format('%d', now), worker = ARGV[4], error = ARGV[3]}
while #hist > tonumber(ARGV[5]) do table.remove(hist, 1) end
j.owner, j.err, j.hist = '', ARGV[3], cjson.encode(hist)
local maxatt, backoff = tonumber(m[2]), tonumber(m[3])
if j.key ~= '' then redis.call('ZREM', K_KRUNNING, kmember(j.key, id)) end
if maxatt > 0 and j.attempt >= maxatt then
  j.avail = now -- a dead job's available_at is its time of death
  redis.call('RPUSH', K_DEAD, id)
  redis.call('HSET', K_JOBS, id, encode(j))
  if j.key ~= '' and oldest_keyed(K_KREADY, j.key) then wake(1) end
  return {2}
end
j.avail = now + backoff
j.part = j.part % P
if backoff > 0 then
  redis.call('ZADD', K_DELAYED, j.avail, id)
else
  redis.call('ZADD', ready_key(j.part), ready_score(id, j.prio), id)
end
if j.key ~= '' then redis.call('ZADD', K_KREADY, 0, kmember(j.key, id)) end
redis.call('HSET', K_JOBS, id, encode(j))
wake(1)
return {1}
