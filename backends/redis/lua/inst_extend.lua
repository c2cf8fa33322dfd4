-- inst_extend.lua renews ARGV[2]'s lease to now + ARGV[3] µs while it is
-- live. Returns the new expiry in µs, -1 when it holds nothing live.
--#include lib/inst.lua
--#include lib/inst_owned.lua
local now = now_us()
if not slot or score <= now then return -1 end
local exp = int(now + tonumber(ARGV[3]))
redis.call('ZADD', K_EXP, 'XX', exp, slot)
redis.call('HSET', K_HOLD, oi, slot .. ' ' .. exp)
settle(now)
return tonumber(exp)
