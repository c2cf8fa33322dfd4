-- sem_wait_check.lua is WaitSemaphore's first step: it tells whether
-- TryAcquire may succeed now for the owner (a free token, an expired lease
-- to reclaim, or a lost free list to rebuild, below the limit, and the
-- owner's turn in line). When not, it deletes the stale wake elements of
-- the list the owner will block on (its own when in line, else the shared
-- one), so that the following BLPOP blocks until a release pushes a new one
-- (a release between this script and the BLPOP leaves its element for it).
--
--   ARGV[1] owner
--
-- Returns {1} to try now (or the semaphore is absent), else {0, µs until
-- the next event or -1 when none, 1 when the owner is in line else 0}. The
-- events: the earliest live lease expires (TryAcquire reclaims it), or a
-- waiter ahead of the owner stops renewing and its record expires. A
-- one-slot semaphore's holder is flagged before the caller blocks on it.
--#include lib/sem_keys.lua
--#include lib/sem_consts.lua
--#include lib/sem.lua
local c = redis.call('HMGET', K_CFG, 'limit', 'one')
if not c[1] then return {1} end
local limit = tonumber(c[1])
local now = now_us()
prune_line(now)
local n, inline = ahead(ARGV[1])
local wait = -1
if c[2] then
  -- A one-slot semaphore: its slot is the lock. A holder this caller
  -- blocks on is flagged, so that its release wakes the line.
  local r, live, v = lock_get(now)
  if not live and v ~= '!' and limit >= 1 and n < 1 then return {1} end
  if live then
    flag_lock()
    wait = r.exp - now
  end
else
  local live = live_count(now)
  if live < limit and n < limit - live then
    if token_count() ~= 0 then return {1} end
    if redis.call('ZCOUNT', K_EXP, '-inf', int(now)) > 0 then return {1} end
  end
  local first = redis.call('ZRANGE', K_EXP, '(' .. int(now), '+inf', 'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES')
  if first[2] then wait = tonumber(first[2]) - now end
end
if inline then redis.call('DEL', wkey(ARGV[1])) else redis.call('DEL', K_WAKE) end
if n > 0 then
  local ws = redis.call('ZRANGE', K_WEXP, '(' .. int(now), '+inf', 'BYSCORE', 'LIMIT', 0, 2, 'WITHSCORES')
  for i = 1, #ws, 2 do
    if ws[i] ~= ARGV[1] then
      local d = tonumber(ws[i + 1]) - now
      if wait < 0 or d < wait then wait = d end
      break
    end
  end
end
if inline then return {0, wait, 1} end
return {0, wait, 0}
