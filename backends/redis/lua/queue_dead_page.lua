-- queue_dead_page.lua lists a page of dead jobs (DeadPage). It writes
-- nothing.
--
-- KEYS: the fixed keys. ARGV: offset, limit, cut. It returns the fields of
-- lib/queue_partial.lua's partial (queuePartialFields) for each, in the
-- dead list's order (Dead's).
--#include lib/queue.lua
--#include lib/queue_partial.lua
local off, lim, cut = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local out = {}
if lim <= 0 then return out end
for _, id in ipairs(redis.call('LRANGE', K_DEAD, off, off + lim - 1)) do
  local rec = redis.call('HGET', K_JOBS, id)
  if rec then partial(out, id, rec, cut) end
end
return out
