-- cron_reap.lua marks a running occurrence whose lease expired as lost
-- and trims the task's history; like FinishOccurrence, with the result the
-- host could not give.
--
--   KEYS as for every occurrence script (see cronKeys in cron_runtime.go)
--   ARGV[1] task, ARGV[2] id
--
-- Returns 1 when reaped, 0 when it was not running with an expired lease.
--#include lib/cron_now.lua
--#include lib/cron_trim.lua
--#include lib/cron_task_keys.lua
local old = redis.call('HGET', KEYS[7], ARGV[2])
if not old then return 0 end
local rec = cjson.decode(old)
if rec.status ~= 'running' then return 0 end
local exp = tonumber(redis.call('ZSCORE', KEYS[11], ARGV[2]) or '0')
if exp > now then return 0 end
rec.status = 'lost'
rec.exit_code = '0'
rec.error = 'run lease expired: host lost'
rec.finished = nows
rec.expires = string.format('%d', exp)
local text = cjson.encode(rec)
redis.call('HSET', KEYS[7], ARGV[2], text)
redis.call('ZREM', KEYS[11], ARGV[2])
redis.call('ZREM', KEYS[4], old)
redis.call('ZADD', KEYS[10], rec.fencing, ARGV[2])
redis.call('ZADD', KEYS[5], now, text)
trim(task, ARGV[1])
return 1
