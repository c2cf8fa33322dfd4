-- cron_set_next.lua sets a task's next_exec if it holds the given time or
-- none (SetNextExec): one compare and one write, so that two schedulers
-- arming one task agree on a single time.
--
--   KEYS[1] the schedule (zset: name -> next_exec µs)
--   KEYS[2] the definitions (hash: name -> def JSON)
--   ARGV[1] name, ARGV[2] the time it must hold, µs ("" for none)
--   ARGV[3] the new next_exec µs ("" for none)
--
-- Returns 1 when it was set, 0 when the task is absent or held another
-- time.
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 0 then return 0 end
local cur = redis.call('ZSCORE', KEYS[1], ARGV[1])
if ARGV[2] == '' then
  if cur then return 0 end
elseif not cur or tonumber(cur) ~= tonumber(ARGV[2]) then
  return 0
end
if ARGV[3] == '' then
  redis.call('ZREM', KEYS[1], ARGV[1])
else
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
end
return 1
