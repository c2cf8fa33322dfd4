-- cron_running.lua lists a task's records whose lease is live
-- (read-only).
--
--   KEYS[1] the task's records, KEYS[2] the task's running records
--
-- Returns {record, expiry µs, ...}.
--#include lib/cron_now.lua
local run = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. nows, '+inf', 'WITHSCORES')
local out = {}
for i = 1, #run, 2 do
  local rec = redis.call('HGET', KEYS[1], run[i])
  if rec then
    out[#out + 1] = rec
    out[#out + 1] = run[i + 1]
  end
end
return out
