-- queue_observe.lua reads one queue (ObserveQueues). It writes nothing.
--
-- KEYS: the fixed keys, then the ready sets of partitions 0..n-1, n at
-- least the stored span.
-- ARGV: none.
-- It returns {1, config JSON, partitions, ready, in flight, dead, delayed,
-- oldest ready enqueued_at µs or -1, stranded, the first delayed job's
-- available_at µs or -1, the operator's pause JSON (meta's field pause,
-- see queue_pause.lua) or ""}; {0} when absent; {-1, n}
-- when it got too few ready sets. Ready counts the ready sets and the
-- delayed set (a delayed job is ready, not yet available); delayed counts
-- the delayed jobs not yet due; in flight includes expired leases no claim
-- has swept yet, as the SQL stores count them. The oldest ready job of a
-- set is the lowest id of its runs of one priority (lib/queue_bands.lua),
-- not its first in claim order.
--#include lib/queue.lua
--#include lib/queue_bands.lua
local m = redis.call('HMGET', K_META, 'span', 'partitions', 'config', 'pause')
if not m[2] then return {0} end
local need = span_of({span = m[1], partitions = m[2]})
if NLISTS < need then return {-1, need} end
local P = tonumber(m[2])
local now = now_us()
local ready, stranded, oldest = 0, 0, nil
for p = 0, need - 1 do
  local n = redis.call('ZCARD', ready_key(p))
  ready = ready + n
  if p >= P then stranded = stranded + n end
  if n > 0 then
    local first
    for _, r in ipairs(ready_bands(ready_key(p))) do
      local id = r.first + r.prio * PRIO_STEP
      if not first or id < first then first = id end
    end
    local rec = first and redis.call('HGET', K_JOBS, fmt(first))
    if rec then
      local j = decode(rec)
      if not oldest or j.enq < oldest then oldest = j.enq end
    end
  end
end
local ndelayed = redis.call('ZCARD', K_DELAYED)
local future = redis.call('ZCOUNT', K_DELAYED, '(' .. now, '+inf')
local due = redis.call('ZRANGEBYSCORE', K_DELAYED, '-inf', now, 'LIMIT', 0, 100)
if #due > 0 then
  local recs = redis.call('HMGET', K_JOBS, unpack(due))
  for i = 1, #due do
    if recs[i] then
      local j = decode(recs[i])
      if not oldest or j.enq < oldest then oldest = j.enq end
    end
  end
end
local first = redis.call('ZRANGEBYSCORE', K_DELAYED, '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
return {1, m[3], P, ready + ndelayed, redis.call('ZCARD', K_INFLIGHT), redis.call('LLEN', K_DEAD),
  future, oldest or -1, stranded, first[2] and tonumber(first[2]) or -1, m[4] or ''}
