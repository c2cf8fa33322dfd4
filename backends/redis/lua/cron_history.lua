-- cron_history.lua lists a task's records newest first, with their
-- output and, for running ones, their lease (read-only).
--
--   KEYS[1] the task's records, KEYS[2] its outputs, KEYS[3] its history,
--   KEYS[4] its running records
--   ARGV[1] limit (0: all)
--
-- Returns {record, output or "", lease µs or "", ...}.
local ids = redis.call('ZREVRANGE', KEYS[3], 0, tonumber(ARGV[1]) - 1)
local out = {}
for _, id in ipairs(ids) do
  local rec = redis.call('HGET', KEYS[1], id)
  if rec then
    out[#out + 1] = rec
    out[#out + 1] = redis.call('HGET', KEYS[2], id) or ''
    out[#out + 1] = redis.call('ZSCORE', KEYS[4], id) or ''
  end
end
return out
