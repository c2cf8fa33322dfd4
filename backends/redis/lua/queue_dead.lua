-- queue_dead.lua lists dead jobs (Dead). It writes nothing.
--
-- KEYS: the fixed keys.
-- ARGV: the most to list (<= 0: all).
-- It returns a job's fields (lib/queue.lua) for each, in the dead list's
-- order: the order in which they died, oldest first.
--#include lib/queue.lua
local limit = tonumber(ARGV[1])
local ids = redis.call('LRANGE', K_DEAD, 0, limit > 0 and limit - 1 or -1)
local out = {}
if #ids == 0 then return out end
for i = 1, #ids, 500 do
  local part = {unpack(ids, i, math.min(i + 499, #ids))}
  local recs = redis.call('HMGET', K_JOBS, unpack(part))
  local pays = redis.call('HMGET', K_PAYLOADS, unpack(part))
  for k, id in ipairs(part) do
    if recs[k] then
      local j = decode(recs[k])
      local n = #out
      out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5], out[n + 6], out[n + 7], out[n + 8], out[n + 9] =
        tonumber(id), j.part, j.attempt, j.enq, j.avail, j.key, j.err, j.prio, pays[k] or ''
    end
  end
end
return out
