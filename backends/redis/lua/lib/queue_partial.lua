-- lib/queue_partial.lua defines partial(out, id, rec, cut), what the dead
-- job readers return for one job (queuePartialJob): a job's fields
-- (lib/queue.lua) with the last error and the payload cut at
-- ARGV's cut, then the payload's whole length. Redis has no range read of
-- a hash field, so the script reads the payload and cuts it on the server:
-- the whole payload never crosses the network.
local function partial(out, id, rec, cut)
  local j = decode(rec)
  local size = redis.call('HSTRLEN', K_PAYLOADS, id)
  local pay = ''
  if cut > 0 and size > 0 then pay = string.sub(redis.call('HGET', K_PAYLOADS, id) or '', 1, cut) end
  local n = #out
  out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5], out[n + 6], out[n + 7], out[n + 8] =
    tonumber(id), j.part, j.attempt, j.enq, j.avail, j.key, string.sub(j.err or '', 1, cut), j.prio
  out[n + 9], out[n + 10] = pay, size
end
