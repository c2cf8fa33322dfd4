-- queue_put.lua creates or updates a queue (PutQueue).
--
-- KEYS: the fixed keys, then the ready sets of partitions 0..n-1 where n is
-- at least the stored span and the new partition count.
-- ARGV: config JSON, partitions, visibility µs, max_attempts, retry_backoff
-- µs, unique, max_payload.
-- It moves the jobs of ready sets at or above the new partition count into
-- set p % partitions (a union: each keeps its score, so its priority and
-- its place in claim order; records are not rewritten), sets the span to
-- the partition count, pushes wake elements when it moved jobs, and returns
-- {1, moved}; {-1, n} when it got too few ready sets.
--#include lib/queue.lua
local m = redis.call('HMGET', K_META, 'span', 'partitions', 'cursor')
local P = tonumber(ARGV[2])
local need = math.max(span_of({span = m[1], partitions = m[2]}), P)
if NLISTS < need then return {-1, need} end
local moved = 0
for p = P, NLISTS - 1 do
  local n = redis.call('ZCARD', ready_key(p))
  if n > 0 then
    local dst = ready_key(p % P)
    redis.call('ZUNIONSTORE', dst, 2, dst, ready_key(p))
    redis.call('DEL', ready_key(p))
    moved = moved + n
  end
end
local cursor = tonumber(m[3] or '0') or 0
if cursor >= P then cursor = 0 end
redis.call('HSET', K_META, 'config', ARGV[1], 'partitions', P, 'span', P, 'vis', ARGV[3],
  'max_attempts', ARGV[4], 'backoff', ARGV[5], 'unique', ARGV[6], 'max_payload', ARGV[7], 'cursor', cursor)
wake(moved)
return {1, moved}
