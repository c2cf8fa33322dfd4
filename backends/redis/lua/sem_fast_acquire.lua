-- sem_fast_acquire.lua is the acquire of a one-slot semaphore. Armed (a
-- negative fencing counter: see semaphore_scripts.go) and with the slot free,
-- it is three commands: INCR, TIME, SET NX; it reads no config and no
-- line, which the counter's sign vouches for. Otherwise its rare path
-- reads the config and the line: it restarts a missing counter at TIME in
-- µs (and leaves none behind an absent semaphore, whose re-creation must
-- restart it), takes the slot of an expired holder, follows the line's
-- rule (the grant takes the caller out of the line, and is flagged when
-- others remain in it), and sends a semaphore that is not a one-slot one
-- to sem_acquire.lua. Every fencing number taken stays taken, granted or
-- not: numbers only need to grow.
--
--   KEYS[1] fencing  KEYS[2] lock
--   ARGV[1] "<len(owner)> <owner>"  ARGV[2] "<pid> <host>"
--   ARGV[3] the lock's TTL: lease ms + GRACE_MS  ARGV[4] lease µs
--
-- Returns the holder record when granted (the caller reads the fencing
-- number and the expiry from it), else {-1} absent, {-2, live, limit}
-- full, {-3, live, limit, tokens} the slot deleted (drift), {-4, ahead,
-- free} not the caller's turn, {-6} keyed, {-7} not a one-slot semaphore.
local K_FENCE, K_LOCK = KEYS[1], KEYS[2]
local c = redis.call('INCR', K_FENCE)
if c < 0 then
  local t = redis.call('TIME')
  local now = t[1] * 1000000 + t[2]
  local rec = string.format('0%s %d %d %d %s', ARGV[1], c + 4503599627370496, now, now + ARGV[4], ARGV[2])
  if redis.call('SET', K_LOCK, rec, 'NX', 'PX', ARGV[3]) then return rec end
end
--#include lib/sem_derived_keys.lua
--#include lib/sem_consts.lua
--#include lib/sem.lua
local now = now_us()
local owner = string.match(ARGV[1], '^%d+ (.*)$')
local cfg = redis.call('HMGET', K_CFG, 'limit', 'keyed', 'one')
if not cfg[1] then
  if c == 1 then redis.call('DEL', K_FENCE) end
  return {-1}
end
local restarted = c == 1
if restarted then
  -- The counter was missing: restart above any number it can have held.
  c = now + 1
  redis.call('SET', K_FENCE, int(c))
end
local limit = tonumber(cfg[1])
if cfg[2] == '1' or not cfg[3] or limit ~= 1 then
  -- Not, or no longer (an older binary's put), a one-slot semaphore.
  if cfg[3] then
    to_general()
    if cfg[2] == '1' then repair(0, now, true) else repair(limit, now, true) end
  end
  refresh_arm()
  if cfg[2] == '1' then return {-6} end
  return {-7}
end
local _, live, v = lock_get(now)
if live or v == '!' then
  if restarted then refresh_arm() end
  if live then return {-2, 1, 1} end
  return {-3, 0, 1, 0}
end
prune_line(now)
local n, inline = ahead(owner)
if n >= 1 then
  if restarted then refresh_arm() end
  return {-4, n, 1}
end
if inline then
  redis.call('ZREM', K_WEXP, owner)
  redis.call('ZREM', K_WSEQ, owner)
  redis.call('DEL', wkey(owner))
end
local flag = '0'
if redis.call('ZCARD', K_WEXP) > 0 then flag = '1' end
local rec = string.format('%s%s %d %d %d %s', flag, ARGV[1], fence_of(c), now, now + tonumber(ARGV[4]), ARGV[2])
redis.call('SET', K_LOCK, rec, 'PX', ARGV[3])
refresh_arm()
return rec
