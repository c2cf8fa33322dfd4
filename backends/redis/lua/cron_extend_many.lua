-- cron_extend_many.lua renews a batch of run leases, each only for its
-- owner, only while the run is running and its lease unexpired.
--
--   KEYS[1] the leases, then for extension j (from 0) the task's records
--   and running records at KEYS[2+2j] and KEYS[3+2j]
--   ARGV, 3 per extension, extension j's at ARGV[1+3j] on: [1] id,
--   [2] owner, [3] lease µs
--
-- Returns one number per extension: the new expiry in µs, or 0 when its
-- owner does not hold the run.
--#include lib/cron_now.lua
local out = {}
for j = 0, #ARGV / 3 - 1 do
  local occ, run = KEYS[2 + 2 * j], KEYS[3 + 2 * j]
  local id, owner, lease = ARGV[1 + 3 * j], ARGV[2 + 3 * j], ARGV[3 + 3 * j]
  local res = 0
  local text = redis.call('HGET', occ, id)
  if text then
    local rec = cjson.decode(text)
    local exp = tonumber(redis.call('ZSCORE', run, id) or '0')
    if rec.status == 'running' and rec.owner == owner and exp > now then
      res = now + tonumber(lease)
      redis.call('ZADD', run, res, id)
      redis.call('ZADD', KEYS[1], res, text)
    end
  end
  out[j + 1] = res
end
return out
