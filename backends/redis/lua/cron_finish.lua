-- cron_finish.lua records the results of runs still running under their
-- owners (expired or not, as long as nobody reaped them), moves each from
-- the running sets to the finished one (and to the pending retries when it
-- failed), and trims its task's history.
--
--   KEYS[1] to KEYS[6] as for every occurrence script (see cronKeys in
--   cron_runtime.go), then
--   for finish j (from 0) the task's records, outputs, history, finished
--   and running records at KEYS[7+5j] to KEYS[11+5j]
--   ARGV, 7 per finish, finish j's at ARGV[1+7j] on: [1] task, [2] id,
--   [3] owner, [4] status, [5] exit code, [6] error, [7] output
--
-- Returns one number per finish: 1 when recorded, 0 when its owner does
-- not hold the run.
--#include lib/cron_now.lua
--#include lib/cron_trim.lua
--#include lib/cron_final.lua
local function finish(k, a)
  local old = redis.call('HGET', k.occ, a[2])
  if not old then return 0 end
  local rec = cjson.decode(old)
  if rec.status ~= 'running' or rec.owner ~= a[3] then return 0 end
  local exp = tonumber(redis.call('ZSCORE', k.run, a[2]) or nows)
  rec.status = a[4]
  rec.exit_code = a[5]
  if a[6] ~= '' then rec.error = a[6] end
  rec.finished = nows
  rec.expires = string.format('%d', exp)
  local text = cjson.encode(rec)
  redis.call('HSET', k.occ, a[2], text)
  if a[7] ~= '' then redis.call('HSET', k.out, a[2], a[7]) end
  redis.call('ZREM', k.run, a[2])
  redis.call('ZREM', KEYS[4], old)
  redis.call('ZADD', k.done, rec.fencing, a[2])
  if failed(a[4]) then redis.call('ZADD', KEYS[5], now, text) end
  trim(k, a[1])
  return 1
end

local out = {}
for j = 0, #ARGV / 7 - 1 do
  local b = 6 + 5 * j
  local k = {occ = KEYS[b + 1], out = KEYS[b + 2], hist = KEYS[b + 3], done = KEYS[b + 4], run = KEYS[b + 5]}
  out[j + 1] = finish(k, {unpack(ARGV, 1 + 7 * j, 7 + 7 * j)})
end
return out
