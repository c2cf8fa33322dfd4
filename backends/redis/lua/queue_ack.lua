-- queue_ack.lua deletes finished jobs (Ack, a batch of one queue).
--
-- KEYS: the fixed keys.
-- ARGV: id, owner, id, owner, ... (one pair per ack).
-- It returns one number per pair: 1 when the job was deleted, 0 when the
-- owner does not hold it (any more): it is gone, back in the queue, dead,
-- or in flight for another owner. The second ack of one job in a batch
-- gets 0. A deleted job with a key whose key has jobs waiting pushes a wake
-- element: the next of them may start now.
--#include lib/queue.lua
local n = #ARGV / 2
local ids = {}
for i = 1, n do ids[i] = ARGV[2 * i - 1] end
local recs = redis.call('HMGET', K_JOBS, unpack(ids))
local res, del, seen = {}, {}, {}
local nwake = 0
for i = 1, n do
  res[i] = 0
  local id = ids[i]
  if recs[i] and not seen[id] then
    local _, _, _, _, owner, key = cmsgpack.unpack(recs[i])
    if owner ~= '' and owner == ARGV[2 * i] then
      res[i] = 1
      seen[id] = true
      del[#del + 1] = id
      if key ~= '' then
        redis.call('ZREM', K_KRUNNING, kmember(key, id))
        if oldest_keyed(K_KREADY, key) then nwake = nwake + 1 end
      end
    end
  end
end
if #del > 0 then
  redis.call('ZREM', K_INFLIGHT, unpack(del))
  redis.call('HDEL', K_JOBS, unpack(del))
  redis.call('HDEL', K_PAYLOADS, unpack(del))
end
wake(nwake)
return res
