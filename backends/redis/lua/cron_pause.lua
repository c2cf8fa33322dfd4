-- cron_pause.lua records an operator's pause at the server's TIME unless
-- the task is already paused: the first pause is kept.
--
--   KEYS[1] the definitions, KEYS[2] the pauses
--   ARGV[1] name, ARGV[2] host, ARGV[3] reason
--
-- Returns {0} when the task is absent, else {1, pause JSON, 1 when this
-- call wrote it or 0 when an earlier pause is kept}.
--#include lib/cron_now.lua
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return {0} end
local cur = redis.call('HGET', KEYS[2], ARGV[1])
if cur then return {1, cur, 0} end
local rec = cjson.encode({host = ARGV[2], at = nows, reason = ARGV[3]})
redis.call('HSET', KEYS[2], ARGV[1], rec)
return {1, rec, 1}
