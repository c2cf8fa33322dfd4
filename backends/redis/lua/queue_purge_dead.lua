-- queue_purge_dead.lua deletes every dead job (PurgeDead).
--
-- KEYS: the fixed keys.
-- ARGV: none.
-- It returns the number deleted.
--#include lib/queue.lua
local ids = redis.call('LRANGE', K_DEAD, 0, -1)
if #ids == 0 then return 0 end
each_chunk('HDEL', K_JOBS, ids)
each_chunk('HDEL', K_PAYLOADS, ids)
redis.call('DEL', K_DEAD)
return #ids
