-- cron_observe.lua reads many tasks at one instant (read-only).
--
--   KEYS[1] the schedule, KEYS[2] the definitions, KEYS[3] the operators'
--   pauses
--   KEYS[3+i] task i's running set (zset: id -> run lease expiry µs)
--   ARGV[i] task i's name
--
-- Returns, for each task, {def or "", next_exec µs or "", running, pause
-- JSON or ""}: def is "" when the task is absent, running counts unexpired
-- run leases.
local t = redis.call('TIME')
local now = string.format('%d', tonumber(t[1]) * 1000000 + tonumber(t[2]))
local out = {}
for i, name in ipairs(ARGV) do
  local def = redis.call('HGET', KEYS[2], name)
  if def then
    out[#out + 1] = def
    out[#out + 1] = redis.call('ZSCORE', KEYS[1], name) or ''
    out[#out + 1] = redis.call('ZCOUNT', KEYS[3 + i], '(' .. now, '+inf')
    out[#out + 1] = redis.call('HGET', KEYS[3], name) or ''
  else
    out[#out + 1] = ''
    out[#out + 1] = ''
    out[#out + 1] = 0
    out[#out + 1] = ''
  end
end
return out
