-- inst_release.lua removes ARGV[2]'s holder record and wakes the waiter
-- whose turn the freed slot makes (the one at position free - 1 of the
-- line: those before it were entitled already); the instance is gone when
-- that leaves it idle. Returns {1} when the lease was live, {0} when it had
-- expired (cleared all the same), {-1} when ARGV[2] held nothing.
--#include lib/inst.lua
--#include lib/inst_owned.lua
local now = now_us()
if not slot then
  settle(now)
  return {-1}
end
local code = 0
if score > now then code = 1 end
redis.call('HDEL', K_HOLD, slot, oi)
redis.call('ZREM', K_EXP, slot)
prune(now)
local free = tonumber(redis.call('HGET', K_CFG, 'limit') or '0') - redis.call('ZCARD', K_EXP)
if free > 0 then wake_line(free - 1, 1) end
settle(now)
return {code}
