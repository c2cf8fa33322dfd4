-- queue_requeue_dead.lua makes every dead job ready again (RequeueDead).
--
-- KEYS: the fixed keys, then the ready sets of all partitions.
-- ARGV: none.
-- Each dead job gets its attempts reset and available_at now, and goes
-- back to its partition's ready set (% P), where its id and its priority
-- keep its place (ready_score); last_error is kept as the record of why
-- it died. Wake elements are pushed. It returns {1, n}, {0} or {-1, P}.
--#include lib/queue.lua
local m = redis.call('HMGET', K_META, 'partitions')
if not m[1] then return {0} end
local P = tonumber(m[1])
if NLISTS ~= P then return {-1, P} end
local ids = redis.call('LRANGE', K_DEAD, 0, -1)
local now = now_us()
local n = 0
for i = 1, #ids, 500 do
  local part = {unpack(ids, i, math.min(i + 499, #ids))}
  local recs = redis.call('HMGET', K_JOBS, unpack(part))
  for k, id in ipairs(part) do
    if recs[k] then
      local j = decode(recs[k])
      j.attempt, j.avail, j.owner, j.part = 0, now, '', j.part % P
      redis.call('HSET', K_JOBS, id, encode(j))
      redis.call('ZADD', ready_key(j.part), ready_score(id, j.prio), id)
      if j.key ~= '' then redis.call('ZADD', K_KREADY, 0, kmember(j.key, id)) end
      n = n + 1
    end
  end
end
redis.call('DEL', K_DEAD)
wake(n)
return {1, n}
