-- sem_acquire.lua takes a token and records its holder. Unless the live
-- holders already reach the limit, or waiters are in line and it is not the
-- caller's turn (the line's rule, in semaphore_scripts.go; the grant takes
-- the caller out of the line), it pops the first free token (a junk or
-- duplicate token left by drift is dropped: ZADD NX refuses a slot that is
-- held), rebuilds a lost free list from cfg and the holder set, and when no
-- token is free reclaims the tokens whose lease expired (so that a crashed
-- holder's slot comes back): it takes the lowest and frees the others, up
-- to the limit. Tokens missing from a list that still exists are drift:
-- nobody is admitted on them until PutSemaphore repairs the list. The
-- fencing counter, when missing, restarts at TIME in µs. The common case is
-- eight commands: HMGET, TIME, ZCARD, ZCARD, LPOP, ZADD, INCR, HSET, and
-- does not run the library. The ZCARD guard is what keeps the live holders
-- within the limit when tokens are in surplus (drift, a list rebuilt below
-- a lowered limit); the token list alone would not.
--
--   ARGV[1] owner  ARGV[2] host  ARGV[3] pid  ARGV[4] lease µs
--
-- Returns {slot, fencing, expiry µs}, {-1} when the semaphore is absent,
-- {-2, live, limit} when full, {-3, live, limit, tokens} when tokens are
-- missing (drift), {-4, ahead, free} when it is not the caller's turn,
-- {-6} when the semaphore is keyed (its instances hold the slots), {-7}
-- when it is a one-slot semaphore (sem_fast_acquire.lua's).
--#include lib/sem_keys.lua
--#include lib/sem_consts.lua
local c = redis.call('HMGET', K_CFG, 'limit', 'keyed', 'one')
if not c[1] then return {-1} end
if c[2] == '1' then return {-6} end
if c[3] then return {-7} end
local limit = tonumber(c[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local live = redis.call('ZCARD', K_EXP)
if live >= limit then
  live = redis.call('ZCOUNT', K_EXP, string.format('(%d', now), '+inf')
  if live >= limit then return {-2, live, limit} end
end
-- The line, when anybody waits.
local waiting
if redis.call('ZCARD', K_WEXP) > 0 then
  for _, o in ipairs(redis.call('ZRANGE', K_WEXP, '-inf', string.format('%d', now), 'BYSCORE')) do
    redis.call('ZREM', K_WEXP, o)
    redis.call('ZREM', K_WSEQ, o)
  end
  waiting = redis.call('ZSCORE', K_WSEQ, ARGV[1])
  local ahead
  if waiting then
    ahead = redis.call('ZCOUNT', K_WSEQ, '-inf', '(' .. waiting)
  else
    ahead = redis.call('ZCARD', K_WSEQ)
  end
  if ahead > 0 then
    local free = limit - redis.call('ZCOUNT', K_EXP, string.format('(%d', now), '+inf')
    if ahead >= free then return {-4, ahead, free} end
  end
end
local exp = now + tonumber(ARGV[4])
local sexp = string.format('%d', exp)
-- The first pop, written out: the common case.
local slot, exhausted
local tok = redis.call('LPOP', K_FREE)
if not tok then
  exhausted = true
elseif tok == SENTINEL then
  redis.call('RPUSH', K_FREE, SENTINEL)
  exhausted = true
elseif (tok == '0' or (#tok <= 9 and string.find(tok, '^[1-9]%d*$')))
    and redis.call('ZADD', K_EXP, 'NX', sexp, tok) == 1 then
  slot = tok
end
if not slot then
--#include lib/sem.lua
  -- take pops tokens until one is free to hold (recorded in exp at once).
  local function take()
    while true do
      local tok = redis.call('LPOP', K_FREE)
      if not tok then return nil end
      if tok == SENTINEL then
        redis.call('RPUSH', K_FREE, SENTINEL)
        return nil
      end
      if valid(tok) and redis.call('ZADD', K_EXP, 'NX', sexp, tok) == 1 then return tok end
    end
  end

  if not exhausted then slot = take() end
  if not slot and redis.call('EXISTS', K_FREE) == 0 then
    rebuild(limit)
    slot = take()
  end
  if not slot then
    local ex = redis.call('ZRANGE', K_EXP, '-inf', int(now), 'BYSCORE')
    if #ex > 0 then
      table.sort(ex, function(a, b) return tonumber(a) < tonumber(b) end)
      for _, e in ipairs(ex) do clear_holder(e) end
      slot = ex[1]
      redis.call('ZADD', K_EXP, sexp, slot)
      local keep = limit - live_count(now)
      for i = 2, math.min(#ex, keep + 1) do redis.call('LPUSH', K_FREE, ex[i]) end
    end
  end
  if not slot then return {-3, live, limit, token_count()} end
end

local fencing = redis.call('INCR', K_FENCE)
if fencing == 1 then
  -- The counter was missing: restart above any number it can have held.
  fencing = now + 1
  redis.call('SET', K_FENCE, string.format('%d', fencing))
elseif fencing < 0 then
  -- Armed (it never is here, but a counter is read the same everywhere).
  fencing = fencing + BIAS
end
redis.call('HSET', K_HOLD, slot,
  string.format('%d %d ', fencing, now) .. ARGV[3] .. ' ' .. #ARGV[1] .. ' ' .. ARGV[1] .. ARGV[2],
  'o:' .. ARGV[1], slot .. ' ' .. sexp)
if waiting then
  redis.call('ZREM', K_WEXP, ARGV[1])
  redis.call('ZREM', K_WSEQ, ARGV[1])
  redis.call('DEL', K_WSEQ .. ':' .. ARGV[1])
end
return {tonumber(slot), fencing, exp}
