-- cron_put.lua stores a task's definition and history limit. A new task
-- gets next_exec as given; an existing one keeps its next_exec unless
-- resetNext, so a definition-only change never moves or repeats a run.
--
--   KEYS[1] the schedule (zset: name -> next_exec µs)
--   KEYS[2] the definitions (hash: name -> def JSON)
--   KEYS[3] the history limits (hash: name -> limit)
--   ARGV[1] name, ARGV[2] def, ARGV[3] next_exec µs ("" for none)
--   ARGV[4] resetNext ("1" or "0"), ARGV[5] history limit
--
-- Returns 1.
local new = redis.call('HEXISTS', KEYS[2], ARGV[1]) == 0
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[5])
if new or ARGV[4] == '1' then
  if ARGV[3] == '' then
    redis.call('ZREM', KEYS[1], ARGV[1])
  else
    redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
  end
end
return 1
