-- queue_pause.lua records an operator's pause of a queue at the server's
-- TIME unless the queue is already paused: the first pause is kept. The
-- pause is the meta hash's field pause, which queue_put.lua leaves alone
-- and queue_delete.lua deletes with the hash.
--
-- KEYS: the fixed keys (no ready sets).
-- ARGV: host, reason.
-- It returns {0} when the queue is absent, else {1, pause JSON, 1 when
-- this call wrote it or 0 when an earlier pause is kept}. The JSON is
-- {"host", "at" (µs, as a string), "reason"}, as a cron task's pause.
--#include lib/queue.lua
local m = redis.call('HMGET', K_META, 'partitions', 'pause')
if not m[1] then return {0} end
if m[2] then return {1, m[2], 0} end
local rec = cjson.encode({host = ARGV[1], at = string.format('%d', now_us()), reason = ARGV[2]})
redis.call('HSET', K_META, 'pause', rec)
return {1, rec, 1}
