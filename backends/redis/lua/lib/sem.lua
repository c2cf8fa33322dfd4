-- lib/sem.lua is the library of the semaphore scripts: the helpers of the
-- rare paths (repair, rebuild, reclaim, lost keys) and of the admin
-- scripts.
--
-- A holder record is "<fencing> <acquired µs> <pid> <len(owner)>
-- <owner><host>": the owner's length lets any bytes appear in owner and
-- host.
--
-- Lua creates a closure for each local function every time a script runs
-- through its definition (measured: about 2 µs per script for this
-- library), so the hot scripts (acquire, release) run it only on their
-- rare paths: their common case is written out before it.

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

-- lock_parse reads a one-slot record: {flag, owner, fencing, since,
-- exp, pid, host}, or nil (the drift record "!", junk).
local function lock_parse(v)
  local n = string.match(v, '^.(%d+) ')
  if not n then return nil end
  local o = 3 + #n
  local owner = string.sub(v, o, o + tonumber(n) - 1)
  local f, since, exp, pid, host = string.match(string.sub(v, o + tonumber(n)),
    '^ (%-?%d+) (%d+) (%d+) (%-?%d+) (.*)$')
  if not f then return nil end
  return {flag = string.sub(v, 1, 1), owner = owner, fencing = tonumber(f),
    since = tonumber(since), exp = tonumber(exp), pid = pid, host = host}
end

-- lock_record builds a one-slot record.
local function lock_record(flag, owner, fencing, since, exp, pid, host)
  return string.format('%s%d %s %d %d %d %s %s', flag, #owner, owner, fencing, since, exp, pid, host)
end

-- lock_get returns the lock's record (nil when free or drift) and whether
-- its lease is live; v is the raw value ("!" for drift).
local function lock_get(now)
  local v = redis.call('GET', K_LOCK)
  local r = v and lock_parse(v)
  return r, (r and r.exp > now) or false, v
end

-- one_slot is cfg's mode marker: "1" for a one-slot semaphore, else nil.
local function one_slot() return redis.call('HGET', K_CFG, 'one') end

-- live_count counts the live holders: the lock's of a one-slot semaphore,
-- else the records in exp.
local function live_count(now)
  if one_slot() then
    local _, live = lock_get(now)
    if live then return 1 end
    return 0
  end
  return redis.call('ZCOUNT', K_EXP, '(' .. int(now), '+inf')
end

-- fence_of is the fencing number an (armed or not) counter stands for.
local function fence_of(c)
  if c < 0 then return c + BIAS end
  return c
end

-- refresh_arm arms the fast acquire (a negative counter) exactly when a
-- one-slot semaphore of limit 1, not keyed, has nobody in line; any
-- script that changes one of these calls it last. A missing counter stays
-- missing (the next acquire restarts it).
local function refresh_arm()
  local c = redis.call('HMGET', K_CFG, 'limit', 'keyed', 'one')
  local armed = c[1] == '1' and c[2] ~= '1' and c[3] == '1' and redis.call('ZCARD', K_WEXP) == 0
  local v = tonumber(redis.call('GET', K_FENCE) or '')
  if not v then return end
  if armed and v > 0 then
    redis.call('SET', K_FENCE, int(v - BIAS))
  elseif not armed and v < 0 then
    redis.call('SET', K_FENCE, int(v + BIAS))
  end
end

-- flag_lock marks the lock's holder as one somebody waits for, so that its
-- release wakes the line.
local function flag_lock()
  if redis.call('EXISTS', K_LOCK) == 1 and redis.call('GETRANGE', K_LOCK, 0, 0) ~= '!' then
    redis.call('SETRANGE', K_LOCK, 0, '1')
  end
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

-- to_general ends the one-slot mode: the lock's holder (live or expired)
-- becomes slot 0 in exp and holders, and the sentinel goes. The caller
-- then repairs the tokens.
local function to_general()
  if not one_slot() then return end
  redis.call('ZREM', K_EXP, '0')
  redis.call('HDEL', K_HOLD, '0')
  local v = redis.call('GET', K_LOCK)
  local r = v and lock_parse(v)
  if r then
    local e = int(r.exp)
    redis.call('ZADD', K_EXP, e, '0')
    redis.call('HSET', K_HOLD, '0', string.format('%d %d ', r.fencing, r.since) .. r.pid .. ' ' .. #r.owner .. ' ' .. r.owner .. r.host,
      'o:' .. r.owner, '0 ' .. e)
  end
  redis.call('DEL', K_LOCK)
  redis.call('HDEL', K_CFG, 'one')
end

-- to_one_slot starts the one-slot mode on a semaphore without live holder
-- records (the caller checked limit 1 and not keyed): expired records go
-- (as a reclaim would take them), the tokens go, the sentinel comes.
local function to_one_slot()
  for _, e in ipairs(redis.call('ZRANGE', K_EXP, 0, -1)) do clear_holder(e) end
  redis.call('DEL', K_FREE, K_LOCK)
  redis.call('ZADD', K_EXP, LOCK_SENT_EXP, '0')
  redis.call('HSET', K_HOLD, '0', LOCK_SENT_REC)
  redis.call('HSET', K_CFG, 'one', '1')
end
