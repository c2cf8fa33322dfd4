-- inst_acquire.lua takes a slot of the instance, creating it: unless the
-- semaphore is absent or not keyed, the instance's live holders reach the
-- limit, or waiters are in line and it is not the caller's turn, it gives
-- the caller the lowest slot number the instance does not use, bumps the
-- semaphore's fencing counter (restarting it at TIME in µs when missing)
-- and takes the caller out of the line.
--
--   ARGV[2] owner  ARGV[3] host  ARGV[4] pid  ARGV[5] lease µs
--
-- Returns {slot, fencing, expiry µs}, {-1} absent, {-5} not keyed, {-2,
-- live, limit} full, {-4, ahead, free} not the caller's turn.
--#include lib/inst.lua
local limit = sem()
if limit < 0 then
  if limit == -1 then return {-1} end
  return {-5}
end
local now = now_us()
prune(now)
local live = redis.call('ZCARD', K_EXP)
if live >= limit then
  settle(now)
  return {-2, live, limit}
end
local n, seq = ahead(ARGV[2])
if n >= limit - live then
  settle(now)
  return {-4, n, limit - live}
end
local used = {}
for _, s in ipairs(redis.call('ZRANGE', K_EXP, 0, -1)) do used[tonumber(s)] = true end
local slot = 0
while used[slot] do slot = slot + 1 end
slot = tostring(slot)
local exp = int(now + tonumber(ARGV[5]))
local fencing = redis.call('INCR', K_FENCE)
if fencing == 1 then
  fencing = now + 1
  redis.call('SET', K_FENCE, int(fencing))
end
redis.call('ZADD', K_EXP, exp, slot)
redis.call('HSET', K_HOLD, slot,
  string.format('%d %d ', fencing, now) .. ARGV[4] .. ' ' .. #ARGV[2] .. ' ' .. ARGV[2] .. ARGV[3],
  'o:' .. ARGV[2], slot .. ' ' .. exp)
if seq then
  redis.call('ZREM', K_WEXP, ARGV[2])
  redis.call('ZREM', K_WSEQ, ARGV[2])
  redis.call('DEL', wkey(ARGV[2]))
end
settle(now)
return {tonumber(slot), fencing, tonumber(exp)}
