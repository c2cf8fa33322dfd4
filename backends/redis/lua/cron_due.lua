-- cron_due.lua lists due tasks that are not paused and the earliest
-- future next_exec at one instant (read-only). Paused tasks keep their
-- next_exec in the schedule and are skipped a page at a time, so that
-- they never take the place of a due task within the limit; the earliest
-- future next_exec may be a paused task's (one wake-up for nothing).
--
--   KEYS[1] the schedule, KEYS[2] the definitions, KEYS[3] the operators'
--   pauses
--   ARGV[1] limit (0: all)
--
-- Returns {{name, def, next_exec µs, ...}, earliest future next_exec µs or
-- ""}.
--#include lib/cron_now.lua
--#include lib/cron_paused.lua
local limit = tonumber(ARGV[1])
local page = 100
if limit > 0 then page = limit end
local out = {}
local n, off = 0, 0
while limit == 0 or n < limit do
  local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', nows, 'WITHSCORES', 'LIMIT', off, page)
  if #due == 0 then break end
  off = off + #due / 2
  for i = 1, #due, 2 do
    local def = redis.call('HGET', KEYS[2], due[i])
    if def and redis.call('HEXISTS', KEYS[3], due[i]) == 0 and not defPaused(def) then
      out[#out + 1] = due[i]
      out[#out + 1] = def
      out[#out + 1] = due[i + 1]
      n = n + 1
      if n == limit then break end
    end
  end
end
local later = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. nows, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
return {out, later[2] or ''}
