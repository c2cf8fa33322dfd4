
local K_CFG, K_FREE, K_EXP, K_HOLD, K_FENCE, K_WAKE, K_WSEQ, K_WEXP =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local SENTINEL = '#'
local WAKE_TTL_MS = 300000

local c = redis.call('HMGET', K_CFG, 'limit', 'keyed')
if not c[1] then return {-1} end
if c[2] == '1' then return {-6} end
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


local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- int formats an integer-valued number without an exponent.
local function int(n) return string.format('%d', n) end

-- valid is true for a canonical slot number.
local function valid(tok)
  return tok == '0' or (#tok <= 9 and string.match(tok, '^[1-9]%d*$') ~= nil)
end

local function holder_owner(d)
  local n, rest = string.match(d, '^%-?%d+ %-?%d+ %-?%d+ (%d+) (.*)$')
  if not n then return nil end
  return string.sub(rest, 1, tonumber(n))
end

-- owned returns owner's slot and lease expiry while its index entry
-- ("<slot> <expiry µs>") matches the slot's lease, else nil (and drops the
-- stale entry). A slot's expiry identifies its grant: a later grant of the
-- slot starts after the earlier lease ended, and extend moves both.
local function owned(owner)
  local v = redis.call('HGET', K_HOLD, 'o:' .. owner)
  if not v then return nil end
  local slot, e = string.match(v, '^(%d+) (%d+)$')
  local score = slot and redis.call('ZSCORE', K_EXP, slot)
  if not score or tonumber(score) ~= tonumber(e) then
    redis.call('HDEL', K_HOLD, 'o:' .. owner)
    return nil
  end
  return slot, tonumber(score)
end

-- clear_holder removes every record of a held slot.
local function clear_holder(slot)
  local d = redis.call('HGET', K_HOLD, slot)
  if d then
    local o = holder_owner(d)
    if o then redis.call('HDEL', K_HOLD, slot, 'o:' .. o) else redis.call('HDEL', K_HOLD, slot) end
  end
  redis.call('ZREM', K_EXP, slot)
end

local function live_count(now)
  return redis.call('ZCOUNT', K_EXP, '(' .. int(now), '+inf')
end

-- token_count is the number of tokens in free (the sentinel excluded), -1
-- when the list is gone.
local function token_count()
  local n = redis.call('LLEN', K_FREE)
  if n == 0 then return -1 end
  if redis.call('LINDEX', K_FREE, -1) == SENTINEL then n = n - 1 end
  return n
end

-- push appends values to a list in chunks (unpack has a stack limit).
local function push(key, vals)
  for i = 1, #vals, 1000 do
    redis.call('RPUSH', key, unpack(vals, i, math.min(i + 999, #vals)))
  end
end

-- wake lets up to n blocked waiters go (one BLPOP each); the list keeps at
-- most bound + 16 elements, so wake-ups nobody consumed cannot pile up.
local function wake(n, bound)
  if n <= 0 then return end
  bound = math.max(bound, 1)
  local v = {}
  for i = 1, math.min(n, bound) do v[i] = '1' end
  local len = 0
  for i = 1, #v, 1000 do
    len = redis.call('RPUSH', K_WAKE, unpack(v, i, math.min(i + 999, #v)))
  end
  -- Trimmed now and then rather than on every push: one command less.
  if len > bound + 16 then redis.call('LTRIM', K_WAKE, -bound, -1) end
end

-- wkey is the wake list of one waiter in line.
local function wkey(owner) return K_WSEQ .. ':' .. owner end

-- prune_line drops the waiter records whose lease expired: a crashed
-- waiter's place in line frees itself.
local function prune_line(now)
  for _, o in ipairs(redis.call('ZRANGE', K_WEXP, '-inf', int(now), 'BYSCORE')) do
    redis.call('ZREM', K_WEXP, o)
    redis.call('ZREM', K_WSEQ, o)
  end
end

-- ahead counts the live waiters ahead of owner in line, every one when
-- owner is not in line, and tells whether it is (run prune_line first).
local function ahead(owner)
  local seq = redis.call('ZSCORE', K_WSEQ, owner)
  if seq then return redis.call('ZCOUNT', K_WSEQ, '-inf', '(' .. seq), true end
  return redis.call('ZCARD', K_WSEQ), false
end

-- wake_line wakes the waiters at positions from .. from + n - 1 of the line
-- (0 is the head; run prune_line first), each on its own list, which keeps
-- at most one element; positions past the end of the line wake callers
-- blocked on the shared list, who are not in line.
local function wake_line(from, n, bound)
  if n <= 0 then return end
  local line = redis.call('ZRANGE', K_WSEQ, from, from + n - 1)
  for _, o in ipairs(line) do
    local k = wkey(o)
    if redis.call('RPUSH', k, '1') > 1 then redis.call('LTRIM', k, -1, -1) end
    redis.call('PEXPIRE', k, WAKE_TTL_MS)
  end
  wake(n - #line, bound)
end

-- rebuild recreates a lost free list from cfg and the holder set: every
-- slot below the limit that no holder record names.
local function rebuild(limit)
  local v = {}
  for i = 0, limit - 1 do
    if not redis.call('ZSCORE', K_EXP, tostring(i)) then v[#v + 1] = tostring(i) end
  end
  v[#v + 1] = SENTINEL
  push(K_FREE, v)
end

-- repair makes the slots (free tokens and holder records) max(limit, live
-- holders): it drops the highest free slots (tokens, expired holders) while
-- above and, when grow, adds the lowest unused numbers while below. It
-- rewrites free without junk or duplicate tokens. Returns the free tokens.
local function repair(limit, now, grow)
  local seen, tokens, expired, live = {}, {}, {}, 0
  local held = redis.call('ZRANGE', K_EXP, 0, -1, 'WITHSCORES')
  for i = 1, #held, 2 do
    seen[held[i]] = true
    if tonumber(held[i + 1]) > now then live = live + 1 else expired[#expired + 1] = held[i] end
  end
  for _, tok in ipairs(redis.call('LRANGE', K_FREE, 0, -1)) do
    if valid(tok) and not seen[tok] then
      seen[tok] = true
      tokens[#tokens + 1] = tok
    end
  end
  local want = math.max(limit, live)
  local n = live + #expired + #tokens
  if n > want then
    local pool = {}
    for _, t in ipairs(tokens) do pool[#pool + 1] = {tonumber(t), t, false} end
    for _, e in ipairs(expired) do pool[#pool + 1] = {tonumber(e), e, true} end
    table.sort(pool, function(a, b) return a[1] > b[1] end)
    local drop = {}
    for i = 1, math.min(n - want, #pool) do
      if pool[i][3] then clear_holder(pool[i][2]) else drop[pool[i][2]] = true end
    end
    local keep = {}
    for _, t in ipairs(tokens) do if not drop[t] then keep[#keep + 1] = t end end
    tokens = keep
  elseif n < want and grow then
    local i = 0
    while n < want do
      local s = tostring(i)
      if not seen[s] then
        tokens[#tokens + 1] = s
        n = n + 1
      end
      i = i + 1
    end
  end
  table.sort(tokens, function(a, b) return tonumber(a) < tonumber(b) end)
  redis.call('DEL', K_FREE)
  local v = {}
  for i, t in ipairs(tokens) do v[i] = t end
  v[#v + 1] = SENTINEL
  push(K_FREE, v)
  return #tokens
end

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
