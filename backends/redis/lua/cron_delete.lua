-- cron_delete.lua removes a task: its schedule entry, definition, history
-- limit and fencing counter (a task created again starts its counter at
-- the server's TIME, above any number handed out before). Its occurrences
-- keep their records and finish.
--
--   KEYS[1] the schedule, KEYS[2] the definitions, KEYS[3] the history
--   limits, KEYS[4] the fencing counters (hash: name -> last number),
--   KEYS[5] the operators' pauses (hash: name -> pause JSON)
--   ARGV[1] name
--
-- Returns 1.
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
redis.call('HDEL', KEYS[5], ARGV[1])
return 1
