package redis

import goredis "github.com/redis/go-redis/v9"

// The semaphore scripts. Every one takes the same KEYS, the keys of one
// semaphore in the order of semKeyNames (keys.semaphore), all under the
// hash tag {sem:<name>}:
//
//	KEYS[1] cfg      hash: limit, lease, mode, wake, max_waiting, max_hold
//	                 (durations in ns); the source of truth for the limit
//	KEYS[2] free     list: free tokens (slot numbers "0", "1", ...), then
//	                 the sentinel "#" at the tail
//	KEYS[3] exp      sorted set: held slot -> lease expiry (µs, Redis TIME)
//	KEYS[4] holders  hash: held slot -> holder record (semLuaLib), and
//	                 "o:<owner>" -> "<slot> <expiry µs>" (the owner index;
//	                 one hash, so that one HSET writes both and one HDEL
//	                 removes both)
//	KEYS[5] fencing  string: the fencing counter
//	KEYS[6] wake     list: wake elements for blocked callers of
//	                 WaitSemaphore that are not in line (BLPOP)
//	KEYS[7] wseq     sorted set: waiter owner -> ticket (the line, FIFO)
//	KEYS[8] wexp     sorted set: waiter owner -> expiry (µs)
//
// Each waiter in line also has a wake list of its own, KEYS[7] .. ":" ..
// owner (wkey; the owner follows the hash tag, so it stays in the
// semaphore's slot): a release pushes to the list of the waiter whose turn
// it makes, so the wake-up reaches that waiter and no other.
//
// The line: a slot is granted only while fewer live waiters are ahead of
// the caller than slots are free (limit minus live holders). A caller not
// in line (a newcomer, a no-wait caller) has every live waiter ahead of it.
// Expired waiter records are pruned by every script that reads the line,
// so a crashed waiter holds its place for at most its waiter lease.
//
// A slot is a token in free, or a holder record (exp + holders + owners),
// never both and never in the client's hands alone: a token leaves free
// only in the script that writes its holder record. The sentinel tells a
// list that lost tokens (drift: repaired by PutSemaphore) from a list that
// is gone altogether (a key deleted, a partial flush): acquire rebuilds a
// lost list from cfg and the holder set at once.

// semLuaKeys opens every semaphore script: the keys by name, and how long
// a waiter's own wake list outlives its last push (a waiter that died
// before it read it).
const semLuaKeys = `
local K_CFG, K_FREE, K_EXP, K_HOLD, K_FENCE, K_WAKE, K_WSEQ, K_WEXP =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local SENTINEL = '#'
local WAKE_TTL_MS = 300000
`

// semLuaLib is the library of the semaphore scripts: the helpers of the
// rare paths (repair, rebuild, reclaim, lost keys) and of the admin
// scripts.
//
// A holder record is "<fencing> <acquired µs> <pid> <len(owner)> <owner><host>":
// the owner's length lets any bytes appear in owner and host.
//
// Lua creates a closure for each local function every time a script runs
// through its definition (measured: about 2 µs per script for this
// library), so the hot scripts (acquire, release) run it only on their
// rare paths: their common case is written out before it.
const semLuaLib = `

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
`

// semScript is a semaphore script: the keys, the library and a body.
func semScript(body string) *goredis.Script { return goredis.NewScript(semLuaKeys + semLuaLib + body) }

// semHotScript is a script whose common case (fast) runs before the
// library is defined; slow follows the library and sees every local of
// fast.
func semHotScript(fast, slow string) *goredis.Script {
	return goredis.NewScript(semLuaKeys + fast + semLuaLib + slow)
}

// Number of keys (a prefix of keys.semaphore) the hot scripts take: all of
// them, since both follow the line.
const (
	semAcquireKeys = 8
	semReleaseKeys = 8
)

// semPutScript creates or updates the config and repairs the slots to
// max(limit, live holders), inside one script so that no token is in
// flight while it counts; it wakes the waiters whose turn the free slots
// make. A keyed semaphore keeps no token (slots left from before it was
// keyed retire on release); the first waiters of each of its live
// instances are woken instead, so that a higher limit reaches them at once.
//
//	KEYS[9]    the index of the instances (keyed semaphores)
//	ARGV[1]    the instances' key prefix (instObserveLua)
//	ARGV[2..8] limit, lease ns, mode, wake, max_waiting, max_hold ns,
//	           keyed ("1" or "0")
//
// Returns the number of free tokens.
var semPutScript = semScript(instObserveLua + `
redis.call('HSET', K_CFG, 'limit', ARGV[2], 'lease', ARGV[3], 'mode', ARGV[4],
  'wake', ARGV[5], 'max_waiting', ARGV[6], 'max_hold', ARGV[7], 'keyed', ARGV[8])
local limit = tonumber(ARGV[2])
local now = now_us()
if ARGV[8] == '1' then
  local n = repair(0, now, true)
  for _, i in ipairs(instances(now)) do
    if limit > 0 then inst_wake(i, limit) end
  end
  return n
end
local n = repair(limit, now, true)
prune_line(now)
wake_line(0, math.min(n, limit - live_count(now)), math.max(limit, 1))
return n
`)

// semDeleteScript deletes every key of a semaphore without live holders;
// with live holders it sets the limit to 0 and removes the free tokens and
// the expired holders, so that the live ones retire on release. The live
// holders of a keyed semaphore's instances count as its holders: while
// they remain, the instances read the limit 0 and admit nobody; once none
// remains, every instance's keys go with the semaphore's (their waiters
// find the semaphore absent at their next look).
//
//	KEYS[9] the index of the instances  ARGV[1] their key prefix
//
// Returns the number of live holders (0: deleted).
var semDeleteScript = semScript(instObserveLua + `
if redis.call('EXISTS', K_CFG) == 0 and redis.call('EXISTS', K_EXP) == 0 and redis.call('EXISTS', K_INST) == 0 then
  return 0
end
local now = now_us()
local live = live_count(now)
local inst = instances(now)
for _, i in ipairs(inst) do live = live + inst_live(i, now) end
if live == 0 then
  -- Waiters in line learn at once that the semaphore is gone.
  prune_line(now)
  wake_line(0, redis.call('ZCARD', K_WSEQ), 1)
  for _, i in ipairs(inst) do inst_delete(i) end
  redis.call('DEL', K_CFG, K_FREE, K_EXP, K_HOLD, K_FENCE, K_WAKE, K_WSEQ, K_WEXP, K_INST)
  return 0
end
redis.call('HSET', K_CFG, 'limit', '0')
for _, e in ipairs(redis.call('ZRANGE', K_EXP, '-inf', int(now), 'BYSCORE')) do clear_holder(e) end
redis.call('DEL', K_FREE)
redis.call('RPUSH', K_FREE, SENTINEL)
return live
`)

// semAcquireScript takes a token and records its holder. Unless the live
// holders already reach the limit, or waiters are in line and it is not
// the caller's turn (the line's rule, above; the grant takes the caller
// out of the line), it pops the first free token (a junk or
// duplicate token left by drift is dropped: ZADD NX refuses a slot that is
// held), rebuilds a lost free list from cfg and the holder set, and when no
// token is free reclaims the tokens whose lease expired (seed 000's
// remedy): it takes the lowest and frees the others, up to the limit.
// Tokens missing from a list that still exists are drift: nobody is
// admitted on them until PutSemaphore repairs the list. The fencing
// counter, when missing, restarts at TIME in µs. The common case is seven
// commands: HGET, TIME, ZCARD, ZCARD, LPOP, ZADD, INCR, HSET, and does not
// run the library. The ZCARD guard is what keeps the live holders within the
// limit when tokens are in surplus (drift, a list rebuilt below a lowered
// limit); the token list alone would not.
//
//	ARGV[1] owner  ARGV[2] host  ARGV[3] pid  ARGV[4] lease µs
//
// Returns {slot, fencing, expiry µs}, {-1} when the semaphore is absent,
// {-2, live, limit} when full, {-3, live, limit, tokens} when tokens are
// missing (drift), {-4, ahead, free} when it is not the caller's turn,
// {-6} when the semaphore is keyed (its instances hold the slots).
var semAcquireScript = semHotScript(`
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
`, `
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
`)

// semExtendScript renews owner's lease to now + lease, only while it is
// live.
//
//	ARGV[1] owner  ARGV[2] lease µs
//
// Returns the new expiry in µs, or -1 when owner holds nothing live.
var semExtendScript = semScript(`
local slot, score = owned(ARGV[1])
if not slot then return -1 end
local now = now_us()
if score <= now then return -1 end
local exp = int(now + tonumber(ARGV[2]))
redis.call('ZADD', K_EXP, 'XX', exp, slot)
redis.call('HSET', K_HOLD, 'o:' .. ARGV[1], slot .. ' ' .. exp)
return tonumber(exp)
`)

// semReleaseScript removes owner's holder record and gives its token back
// to free while the slots (tokens + holder records) stay within the limit;
// otherwise the slot retires (a lowered limit: slots are max(limit, live
// holders), and tokens + records < max(limit, live) holds only when it is
// below the limit), and any surplus beyond that is trimmed. A release
// whose record is gone (reclaimed and given to another owner, deleted)
// changes nothing, so a stale release cannot push a duplicate token. A
// token given back, or a lost free list that acquire will rebuild, wakes
// the waiter whose turn it makes: with nobody in line, one caller blocked
// on the shared list; otherwise the waiter at position free - 1 of the
// line, on its own list (those before it were entitled already). The owner index entry ("<slot> <expiry µs>") must match the
// slot's lease: a slot's expiry identifies its grant (a later grant of the
// slot starts after the earlier lease ended; extend moves both), so a stale
// entry never releases someone else's slot. The common case (the token
// goes back) is nine commands: HGET, ZSCORE, TIME, HDEL, ZREM, HGET, ZCARD,
// LPUSH, ZCARD, RPUSH, and does not run the library.
//
//	ARGV[1] owner
//
// Returns {1} when the lease was live, {0} when it had expired (the record
// is cleared all the same), {-1} when owner held nothing.
var semReleaseScript = semHotScript(`
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
if kept and redis.call('ZCARD', K_WEXP) == 0 then
  -- Nobody in line: wake one caller on the shared list; trimmed now and
  -- then rather than on every push.
  if redis.call('RPUSH', K_WAKE, '1') > bound + 16 then redis.call('LTRIM', K_WAKE, -bound, -1) end
  return {code}
end
`, `
if kept or len == 1 then
  if len == 1 then
    -- The list was lost: leave it to acquire to rebuild from the holders.
    redis.call('DEL', K_FREE)
  end
  prune_line(now)
  wake_line(math.max(limit - live_count(now) - 1, 0), 1, bound)
else
  redis.call('LPOP', K_FREE) -- retire the slot
  if len - 2 + records > limit then repair(limit, now, false) end
end
return {code}
`)

// semObserveScript reads one semaphore, and the live instances of a keyed
// one, against one instant. It drops the index entries of instances that
// expired (instObserveLua).
//
//	KEYS[9] the index of the instances  ARGV[1] their key prefix
//
// Returns {0} when absent, else {1, limit, lease ns, mode, wake,
// max_waiting, max_hold ns, slots, expired, waiters, keyed, n, then slot,
// expiry µs, holder record for each of the n live holders, then for each
// live instance: key, waiters, m, and slot, expiry µs, holder record for
// each of its m live holders}.
var semObserveScript = semScript(instObserveLua + `
local cfg = redis.call('HMGET', K_CFG, 'limit', 'lease', 'mode', 'wake', 'max_waiting', 'max_hold', 'keyed')
if not cfg[1] then return {0} end
local now = now_us()
local ntok = math.max(token_count(), 0)
local held = redis.call('ZRANGE', K_EXP, 0, -1, 'WITHSCORES')
local out = {1, cfg[1], cfg[2] or '0', cfg[3] or '', cfg[4] or '', cfg[5] or '-1', cfg[6] or '0',
  ntok + #held / 2, 0, redis.call('ZCOUNT', K_WEXP, '(' .. int(now), '+inf'), cfg[7] or '0', 0}
for i = 1, #held, 2 do
  if tonumber(held[i + 1]) > now then
    out[#out + 1] = tonumber(held[i])
    out[#out + 1] = tonumber(held[i + 1])
    out[#out + 1] = redis.call('HGET', K_HOLD, held[i]) or ''
    out[12] = out[12] + 1
  else
    out[9] = out[9] + 1
  end
end
if redis.call('EXISTS', K_INST) == 1 then
  for _, i in ipairs(instances(now)) do
    local hs = redis.call('ZRANGE', i[2], '(' .. int(now), '+inf', 'BYSCORE', 'WITHSCORES')
    out[#out + 1] = i[1]
    out[#out + 1] = redis.call('ZCOUNT', i[5], '(' .. int(now), '+inf')
    out[#out + 1] = #hs / 2
    for j = 1, #hs, 2 do
      out[#out + 1] = tonumber(hs[j])
      out[#out + 1] = tonumber(hs[j + 1])
      out[#out + 1] = redis.call('HGET', i[3], hs[j]) or ''
    end
  end
end
return out
`)

// semWaitCheckScript is WaitSemaphore's first step: it tells whether
// TryAcquire may succeed now for the owner (a free token, an expired lease
// to reclaim, or a lost free list to rebuild, below the limit, and the
// owner's turn in line). When not, it deletes the stale wake elements of
// the list the owner will block on (its own when in line, else the shared
// one), so that the following BLPOP blocks until a release pushes a new one
// (a release between this script and the BLPOP leaves its element for it).
//
//	ARGV[1] owner
//
// Returns {1} to try now (or the semaphore is absent), else {0, µs until
// the next event or -1 when none, 1 when the owner is in line else 0}. The
// events: the earliest live lease expires (TryAcquire reclaims it), or a
// waiter ahead of the owner stops renewing and its record expires.
var semWaitCheckScript = semScript(`
local limit = redis.call('HGET', K_CFG, 'limit')
if not limit then return {1} end
limit = tonumber(limit)
local now = now_us()
prune_line(now)
local n, inline = ahead(ARGV[1])
local live = live_count(now)
if live < limit and n < limit - live then
  if token_count() ~= 0 then return {1} end
  if redis.call('ZCOUNT', K_EXP, '-inf', int(now)) > 0 then return {1} end
end
if inline then redis.call('DEL', wkey(ARGV[1])) else redis.call('DEL', K_WAKE) end
local wait = -1
local first = redis.call('ZRANGE', K_EXP, '(' .. int(now), '+inf', 'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES')
if first[2] then wait = tonumber(first[2]) - now end
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
`)

// semWakeScript gives back a wake element that a cancelled waiter took,
// and deletes its interrupt list.
//
//	KEYS[9] the waiter's interrupt list
//	ARGV[1]  "1" to give the wake element back
var semWakeScript = semScript(`
redis.call('DEL', KEYS[9])
if ARGV[1] == '1' then
  wake(1, math.max(tonumber(redis.call('HGET', K_CFG, 'limit') or '1'), 1))
end
return 0
`)

// semEnterWaitScript registers owner as a waiter, behind every live one,
// after pruning expired waiter records; a waiter already registered renews
// its lease and keeps its ticket.
//
//	ARGV[1] owner  ARGV[2] lease µs
//
// Returns {1} entered, {0} renewed, {-1} absent, {-2, waiting, max_waiting},
// {-6} keyed (its instances have the lines).
var semEnterWaitScript = semScript(`
local c = redis.call('HMGET', K_CFG, 'limit', 'keyed')
if not c[1] then return {-1} end
if c[2] == '1' then return {-6} end
local now = now_us()
for _, o in ipairs(redis.call('ZRANGE', K_WEXP, '-inf', int(now), 'BYSCORE')) do
  redis.call('ZREM', K_WEXP, o)
  redis.call('ZREM', K_WSEQ, o)
end
local exp = int(now + tonumber(ARGV[2]))
if redis.call('ZSCORE', K_WEXP, ARGV[1]) then
  redis.call('ZADD', K_WEXP, exp, ARGV[1])
  return {0}
end
local maxw = tonumber(redis.call('HGET', K_CFG, 'max_waiting') or '-1')
local n = redis.call('ZCARD', K_WEXP)
if maxw >= 0 and n >= maxw then return {-2, n, maxw} end
local last = redis.call('ZRANGE', K_WSEQ, -1, -1, 'WITHSCORES')
local seq = 1
if last[2] then seq = tonumber(last[2]) + 1 end
redis.call('ZADD', K_WSEQ, int(seq), ARGV[1])
redis.call('ZADD', K_WEXP, exp, ARGV[1])
return {1}
`)

// semLeaveWaitScript removes owner's waiter record and wake list. A waiter
// that leaves the line (it gave up) may make it the turn of the waiter at
// position free - 1, which it wakes.
//
//	ARGV[1] owner
var semLeaveWaitScript = semScript(`
local was = redis.call('ZREM', K_WEXP, ARGV[1])
redis.call('ZREM', K_WSEQ, ARGV[1])
redis.call('DEL', wkey(ARGV[1]))
if was == 1 then
  local limit = tonumber(redis.call('HGET', K_CFG, 'limit') or '0')
  local now = now_us()
  prune_line(now)
  local free = limit - live_count(now)
  if free > 0 then wake_line(free - 1, 1, math.max(limit, 1)) end
end
return 0
`)

// semFirstWaiterScript returns the live waiter with the lowest ticket, ""
// when nobody waits.
var semFirstWaiterScript = semScript(`
local now = now_us()
for _, o in ipairs(redis.call('ZRANGE', K_WSEQ, 0, -1)) do
  local e = redis.call('ZSCORE', K_WEXP, o)
  if e and tonumber(e) > now then return o end
end
return ''
`)
