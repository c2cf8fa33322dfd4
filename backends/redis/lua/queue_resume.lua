-- queue_resume.lua removes an operator's pause of a queue (the meta
-- hash's field pause, see queue_pause.lua).
--
-- KEYS: the fixed keys (no ready sets).
-- ARGV: none.
-- It returns {0} when the queue is absent, else {1, the removed pause
-- JSON or ""}.
--#include lib/queue.lua
local m = redis.call('HMGET', K_META, 'partitions', 'pause')
if not m[1] then return {0} end
if not m[2] then return {1, ''} end
redis.call('HDEL', K_META, 'pause')
return {1, m[2]}
