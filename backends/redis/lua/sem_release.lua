-- sem_release.lua removes owner's holder record and gives its token back to
-- free while the slots (tokens + holder records) stay within the limit;
-- otherwise the slot retires (a lowered limit: slots are max(limit, live
-- holders), and tokens + records < max(limit, live) holds only when it is
-- below the limit), and any surplus beyond that is trimmed. A release whose
-- record is gone (reclaimed and given to another owner, deleted) changes
-- nothing, so a stale release cannot push a duplicate token. A token given
-- back, or a lost free list that acquire will rebuild, wakes the waiter
-- whose turn it makes: with nobody in line, one caller blocked on the
-- shared list; otherwise the waiter at position free - 1 of the line, on
-- its own list (those before it were entitled already). The owner index
-- entry ("<slot> <expiry µs>") must match the slot's lease: a slot's expiry
-- identifies its grant (a later grant of the slot starts after the earlier
-- lease ended; extend moves both), so a stale entry never releases someone
-- else's slot. The common case (the token goes back) is ten commands: HGET,
-- ZSCORE, TIME, HDEL, ZREM, HMGET, ZCARD, LPUSH, ZCARD, RPUSH, and does not
-- run the library. The last holder of a semaphore of limit 1 to leave makes
-- it a one-slot semaphore. A one-slot semaphore's holder is
-- sem_fast_release.lua's.
--
--   ARGV[1] owner
--
-- Returns {1} when the lease was live, {0} when it had expired (the record
-- is cleared all the same), {-1} when owner held nothing here.
--#include lib/sem_keys.lua
--#include lib/sem_consts.lua
local oi = 'o:' .. ARGV[1]
local v = redis.call('HGET', K_HOLD, oi)
if not v then return {-1} end
local slot, e = string.match(v, '^(%d+) (%d+)$')
local score = slot and redis.call('ZSCORE', K_EXP, slot)
if not score or tonumber(score) ~= tonumber(e) then
  redis.call('HDEL', K_HOLD, oi) -- stale
  return {-1}
end
score = tonumber(score)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local code = 0
if score > now then code = 1 end
redis.call('HDEL', K_HOLD, slot, oi)
redis.call('ZREM', K_EXP, slot)
local c = redis.call('HMGET', K_CFG, 'limit', 'keyed')
local limit = tonumber(c[1] or '0')
-- A keyed semaphore's own slots (left from before it was keyed) retire.
if c[2] == '1' then limit = 0 end
local bound = math.max(limit, 1)
local records = redis.call('ZCARD', K_EXP)
local len = redis.call('LPUSH', K_FREE, slot)
-- The sentinel is not a slot: len - 1 tokens.
local kept = len > 1 and len - 1 + records <= limit
-- The last holder of a semaphore of limit 1 leaves: it becomes a one-slot
-- semaphore (the rare path).
local single = limit == 1 and records == 0
if kept and not single and redis.call('ZCARD', K_WEXP) == 0 then
  -- Nobody in line: wake one caller on the shared list; trimmed now and
  -- then rather than on every push.
  if redis.call('RPUSH', K_WAKE, '1') > bound + 16 then redis.call('LTRIM', K_WAKE, -bound, -1) end
  return {code}
end
--#include lib/sem.lua
if kept or len == 1 then
  if len == 1 then
    -- The list was lost: leave it to acquire to rebuild from the holders.
    redis.call('DEL', K_FREE)
  end
  prune_line(now)
  wake_line(math.max(limit - live_count(now) - 1, 0), 1, bound)
  if single then
    to_one_slot()
    refresh_arm()
  end
else
  redis.call('LPOP', K_FREE) -- retire the slot
  if len - 2 + records > limit then repair(limit, now, false) end
end
return {code}
