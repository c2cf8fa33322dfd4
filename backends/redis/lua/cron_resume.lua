-- cron_resume.lua removes an operator's pause.
--
--   KEYS[1] the definitions, KEYS[2] the pauses
--   ARGV[1] name
--
-- Returns {0} when the task is absent, else {1, the removed pause JSON or
-- ""}.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return {0} end
local cur = redis.call('HGET', KEYS[2], ARGV[1])
if not cur then return {1, ''} end
redis.call('HDEL', KEYS[2], ARGV[1])
return {1, cur}
