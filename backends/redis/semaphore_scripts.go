package redis

import goredis "github.com/redis/go-redis/v9"

// The semaphore scripts. Every one but the one-slot fast scripts (below)
// takes the same KEYS, the keys of one semaphore in the order of
// semKeyNames (keys.semaphore), all under the hash tag {sem:<name>}:
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
//	KEYS[9] lock     string: the holder record of a one-slot semaphore
//	                 (below)
//
// Beside the line, the hash winfo (waiters_list.go) records each waiter's
// host, pid and arrival for ListWaiters; only the enter scripts write it.
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
//
// # One-slot semaphores
//
// A semaphore of limit 1 that is not keyed keeps its slot in one key, lock,
// instead of free, exp and holders (cfg field "one" = "1" says so): the
// lock holds the holder record, "<flag><len(owner)> <owner> <fencing>
// <acquired µs> <expiry µs> <pid> <host>", set with SET NX and a key TTL of
// the lease plus semLockGraceMs, so that an expired lease leaves its record
// (an expired holder, as in exp) for that long. This is the common case
// made cheap: an acquire is INCR fencing, TIME and SET NX; a release is
// PTTL and GETDEL (the liveness of the lease read from the key's TTL, with
// 2 ms to spare for the TTL's whole milliseconds, so that a release never
// calls live a lease whose recorded expiry passed). Each is one script
// that takes only those keys: every KEYS entry costs the client and the
// server (measured in docs/benchmarks.md), and their rare paths build the
// others from the lock's name, which shares the hash tag.
//
// The fencing counter's sign arms the fast path: a negative counter c
// stands for the fencing number c + semFenceBias, and says that the fast
// acquire may grant without reading anything else: the semaphore exists,
// is a one-slot semaphore of limit 1, not keyed, and nobody is in line
// (wexp is empty). Every script that changes one of these re-arms or
// disarms (refresh_arm) in the same step; a positive counter (every other
// semaphore, a counter that went missing) sends the acquire to its full
// path. A missing counter still restarts at TIME in µs.
//
// The flag, the record's first byte, is "1" once somebody may be blocked
// on this holder's release (a waiter entered the line, a caller checked
// before blocking, or the grant left others in line): only then does the
// release run the wake-ups. A slot deleted behind coordd's back (drift) is
// the record "!", which no acquire takes until PutSemaphore repairs it.
//
// A semaphore enters this mode when PutSemaphore (or a release that leaves
// no holder) finds limit 1, not keyed, and no live holder record; it
// leaves it, the lock's holder moving into exp and holders as slot 0, when
// the limit or keyed changes (PutSemaphore, DeleteSemaphore). While in it,
// exp keeps a sentinel holder of slot 0 that never expires (semLockSentinelExp)
// so that a binary from before this mode, which knows only the token list,
// sees the slot held and never admits a second holder during a rolling
// upgrade.

// semLuaKeys opens every semaphore script: the keys by name, and how long
// a waiter's own wake list outlives its last push (a waiter that died
// before it read it).
const semLuaKeys = `
local K_CFG, K_FREE, K_EXP, K_HOLD, K_FENCE, K_WAKE, K_WSEQ, K_WEXP, K_LOCK =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
` + semLuaConsts

// semLuaDerivedKeys opens the rare paths of the one-slot fast scripts,
// which take only the lock (and the fencing counter): the other keys are
// built from the lock's name ("<prefix>{sem:<name>}:lock"), in the same
// hash slot.
const semLuaDerivedKeys = `
local B = string.sub(K_LOCK, 1, -5)
local K_CFG, K_FREE, K_EXP, K_HOLD, K_WAKE, K_WSEQ, K_WEXP =
  B .. 'cfg', B .. 'free', B .. 'exp', B .. 'holders', B .. 'wake', B .. 'wseq', B .. 'wexp'
` + semLuaConsts

// semLuaConsts are the constants every semaphore script shares.
const semLuaConsts = `
local SENTINEL = '#'
local WAKE_TTL_MS = 300000
local BIAS = ` + semFenceBias + `
local GRACE_MS = ` + semLockGraceMs + `
local LOCK_SENT_EXP = '` + semLockSentinelExp + `'
local LOCK_SENT_REC = '` + semLockSentinelRec + `'
`

// The one-slot mode's constants (see the file comment).
const (
	// semFenceBias is 2^52: an armed counter c stands for c + 2^52, so it
	// stays negative (fencing numbers start at TIME in µs, 2^52 µs is the
	// year 2112) and exact in Lua's doubles.
	semFenceBias = "4503599627370496"
	// semLockGraceMs is how long a lock outlives its lease, keeping the
	// record of an expired holder (ms).
	semLockGraceMs = "3600000"
	// semLockSentinelExp and semLockSentinelRec are slot 0 in exp and
	// holders while the lock holds the slot: a holder that never expires,
	// for binaries from before the lock.
	semLockSentinelExp = "9000000000000000"
	semLockSentinelRec = "0 0 0 8 (inline)"
)

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
`

// semScript is a semaphore script: the keys, the library and a body.
func semScript(body string) *goredis.Script { return goredis.NewScript(semLuaKeys + semLuaLib + body) }

// semHotScript is a script whose common case (fast) runs before the
// library is defined; slow follows the library and sees every local of
// fast.
func semHotScript(fast, slow string) *goredis.Script {
	return goredis.NewScript(semLuaKeys + fast + semLuaLib + slow)
}

// semPutScript creates or updates the config and repairs the slots to
// max(limit, live holders), inside one script so that no token is in
// flight while it counts; it wakes the waiters whose turn the free slots
// make. A semaphore of limit 1, not keyed and without live holder records
// becomes (or stays) a one-slot semaphore, its slot repaired; any other
// leaves that mode first. A keyed semaphore keeps no token (slots left
// from before it was keyed retire on release); the first waiters of each
// of its live instances are woken instead, so that a higher limit reaches
// them at once.
//
//	KEYS[10]   the index of the instances (keyed semaphores)
//	ARGV[1]    the instances' key prefix (instObserveLua)
//	ARGV[2..8] limit, lease ns, mode, wake, max_waiting, max_hold ns,
//	           keyed ("1" or "0")
//
// Returns the number of free slots.
var semPutScript = semScript(instObserveLua + `
redis.call('HSET', K_CFG, 'limit', ARGV[2], 'lease', ARGV[3], 'mode', ARGV[4],
  'wake', ARGV[5], 'max_waiting', ARGV[6], 'max_hold', ARGV[7], 'keyed', ARGV[8])
local limit = tonumber(ARGV[2])
local now = now_us()
if ARGV[8] == '1' then
  to_general()
  local n = repair(0, now, true)
  for _, i in ipairs(instances(now)) do
    if limit > 0 then inst_wake(i, limit) end
  end
  refresh_arm()
  return n
end
if limit == 1 and (one_slot() or live_count(now) == 0) then
  if not one_slot() then to_one_slot() end
  -- Repair: a slot deleted behind coordd's back comes back, tokens and a
  -- sentinel an older binary's repair changed are set right.
  if redis.call('GET', K_LOCK) == '!' then redis.call('DEL', K_LOCK) end
  redis.call('DEL', K_FREE)
  redis.call('ZADD', K_EXP, LOCK_SENT_EXP, '0')
  redis.call('HSET', K_HOLD, '0', LOCK_SENT_REC)
  local free = 1 - live_count(now)
  prune_line(now)
  wake_line(0, free, 1)
  refresh_arm()
  return free
end
to_general()
local n = repair(limit, now, true)
prune_line(now)
wake_line(0, math.min(n, limit - live_count(now)), math.max(limit, 1))
refresh_arm()
return n
`)

// semDeleteScript deletes every key of a semaphore without live holders;
// with live holders it sets the limit to 0 and removes the free tokens and
// the expired holders, so that the live ones retire on release (a
// one-slot semaphore's holder first moves to the token list's records).
// The live holders of a keyed semaphore's instances count as its holders:
// while they remain, the instances read the limit 0 and admit nobody; once
// none remains, every instance's keys go with the semaphore's (their
// waiters find the semaphore absent at their next look).
//
//	KEYS[10] the index of the instances  ARGV[1] their key prefix
//
// Returns the number of live holders (0: deleted).
var semDeleteScript = semScript(instObserveLua + `
if redis.call('EXISTS', K_CFG, K_EXP, K_INST, K_LOCK) == 0 then
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
  redis.call('DEL', K_CFG, K_FREE, K_EXP, K_HOLD, K_FENCE, K_WAKE, K_WSEQ, K_WEXP, K_INST, K_LOCK)
  return 0
end
to_general()
redis.call('HSET', K_CFG, 'limit', '0')
for _, e in ipairs(redis.call('ZRANGE', K_EXP, '-inf', int(now), 'BYSCORE')) do clear_holder(e) end
redis.call('DEL', K_FREE)
redis.call('RPUSH', K_FREE, SENTINEL)
refresh_arm()
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
// counter, when missing, restarts at TIME in µs. The common case is eight
// commands: HMGET, TIME, ZCARD, ZCARD, LPOP, ZADD, INCR, HSET, and does not
// run the library. The ZCARD guard is what keeps the live holders within the
// limit when tokens are in surplus (drift, a list rebuilt below a lowered
// limit); the token list alone would not.
//
//	ARGV[1] owner  ARGV[2] host  ARGV[3] pid  ARGV[4] lease µs
//
// Returns {slot, fencing, expiry µs}, {-1} when the semaphore is absent,
// {-2, live, limit} when full, {-3, live, limit, tokens} when tokens are
// missing (drift), {-4, ahead, free} when it is not the caller's turn,
// {-6} when the semaphore is keyed (its instances hold the slots), {-7}
// when it is a one-slot semaphore (semFastAcquireScript's).
var semAcquireScript = semHotScript(`
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
`)

// semFastAcquireScript is the acquire of a one-slot semaphore. Armed (a
// negative fencing counter: see the file comment) and with the slot free,
// it is three commands: INCR, TIME, SET NX; it reads no config and no
// line, which the counter's sign vouches for. Otherwise its rare path
// reads the config and the line: it restarts a missing counter at TIME in
// µs (and leaves none behind an absent semaphore, whose re-creation must
// restart it), takes the slot of an expired holder, follows the line's
// rule (the grant takes the caller out of the line, and is flagged when
// others remain in it), and sends a semaphore that is not a one-slot one
// to semAcquireScript. Every fencing number taken stays taken, granted or
// not: numbers only need to grow.
//
//	KEYS[1] fencing  KEYS[2] lock
//	ARGV[1] "<len(owner)> <owner>"  ARGV[2] "<pid> <host>"
//	ARGV[3] the lock's TTL: lease ms + semLockGraceMs  ARGV[4] lease µs
//
// Returns the holder record when granted (the caller reads the fencing
// number and the expiry from it), else {-1} absent, {-2, live, limit}
// full, {-3, live, limit, tokens} the slot deleted (drift), {-4, ahead,
// free} not the caller's turn, {-6} keyed, {-7} not a one-slot semaphore.
var semFastAcquireScript = goredis.NewScript(`
local K_FENCE, K_LOCK = KEYS[1], KEYS[2]
local c = redis.call('INCR', K_FENCE)
if c < 0 then
  local t = redis.call('TIME')
  local now = t[1] * 1000000 + t[2]
  local rec = string.format('0%s %d %d %d %s', ARGV[1], c + ` + semFenceBias + `, now, now + ARGV[4], ARGV[2])
  if redis.call('SET', K_LOCK, rec, 'NX', 'PX', ARGV[3]) then return rec end
end
` + semLuaDerivedKeys + semLuaLib + `
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
`)

// semExtendScript renews owner's lease to now + lease, only while it is
// live: a one-slot semaphore's in the lock (its key TTL too), any other's
// in exp and the owner index.
//
//	ARGV[1] owner  ARGV[2] lease µs  ARGV[3] the lock's TTL (lease ms +
//	semLockGraceMs)
//
// Returns the new expiry in µs, or -1 when owner holds nothing live.
var semExtendScript = semScript(`
local now = now_us()
local r = redis.call('EXISTS', K_LOCK) == 1 and lock_get(now)
if r and r.owner == ARGV[1] then
  if r.exp <= now then return -1 end
  local exp = now + tonumber(ARGV[2])
  redis.call('SET', K_LOCK, lock_record(r.flag, r.owner, r.fencing, r.since, exp, r.pid, r.host), 'PX', ARGV[3])
  return exp
end
local slot, score = owned(ARGV[1])
if not slot then return -1 end
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
// line, on its own list (those before it were entitled already). The
// owner index entry ("<slot> <expiry µs>") must match the slot's lease: a slot's expiry identifies its grant (a later grant of the
// slot starts after the earlier lease ended; extend moves both), so a stale
// entry never releases someone else's slot. The common case (the token
// goes back) is ten commands: HGET, ZSCORE, TIME, HDEL, ZREM, HMGET, ZCARD,
// LPUSH, ZCARD, RPUSH, and does not run the library. The last holder of a
// semaphore of limit 1 to leave makes it a one-slot semaphore. A one-slot
// semaphore's holder is semFastReleaseScript's.
//
//	ARGV[1] owner
//
// Returns {1} when the lease was live, {0} when it had expired (the record
// is cleared all the same), {-1} when owner held nothing here.
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
-- The last holder of a semaphore of limit 1 leaves: it becomes a one-slot
-- semaphore (the rare path).
local single = limit == 1 and records == 0
if kept and not single and redis.call('ZCARD', K_WEXP) == 0 then
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
  if single then
    to_one_slot()
    refresh_arm()
  end
else
  redis.call('LPOP', K_FREE) -- retire the slot
  if len - 2 + records > limit then repair(limit, now, false) end
end
return {code}
`)

// semFastReleaseScript releases a one-slot semaphore's holder: PTTL and
// GETDEL of the lock, the lease live while the TTL still exceeds
// semLockGraceMs (+ 2 ms: the TTL counts whole milliseconds from the SET,
// the record's expiry µs from TIME before it, so the TTL ends up to 2 ms
// later). A record that is not owner's is put back as it was. A flagged
// record (somebody may be blocked on this release) wakes the waiter whose
// turn the free slot makes, the head of the line, or a caller blocked on
// the shared list when nobody is in line (the rare path).
//
//	KEYS[1] lock  ARGV[1] "<len(owner)> <owner>"
//
// Returns 1 when the lease was live, 0 when it had expired (the record is
// cleared all the same), -7 when owner holds no lock (it may hold a slot
// of the token list: semReleaseScript).
var semFastReleaseScript = goredis.NewScript(`
local K_LOCK = KEYS[1]
local pt = redis.call('PTTL', K_LOCK)
if pt <= 0 then return -7 end
local v = redis.call('GETDEL', K_LOCK)
if string.sub(v, 2, #ARGV[1] + 1) ~= ARGV[1] then
  redis.call('SET', K_LOCK, v, 'PX', pt)
  return -7
end
local code = 0
if pt > ` + semLockGraceMs + ` + 2 then code = 1 end
if string.byte(v) == 48 then return code end
local K_FENCE = string.sub(K_LOCK, 1, -5) .. 'fencing'
` + semLuaDerivedKeys + semLuaLib + `
local now = now_us()
prune_line(now)
wake_line(0, 1, 1)
refresh_arm()
return code
`)

// semObserveScript reads one semaphore, and the live instances of a keyed
// one, against one instant. It drops the index entries of instances that
// expired (instObserveLua). A one-slot semaphore's holder is reported as
// slot 0, in the records' format.
//
//	KEYS[10] the index of the instances  ARGV[1] their key prefix
//
// Returns {0} when absent, else {1, limit, lease ns, mode, wake,
// max_waiting, max_hold ns, slots, expired, waiters, keyed, n, then slot,
// expiry µs, holder record for each of the n live holders, then for each
// live instance: key, waiters, m, and slot, expiry µs, holder record for
// each of its m live holders}.
var semObserveScript = semScript(instObserveLua + `
local cfg = redis.call('HMGET', K_CFG, 'limit', 'lease', 'mode', 'wake', 'max_waiting', 'max_hold', 'keyed', 'one')
if not cfg[1] then return {0} end
local now = now_us()
local out = {1, cfg[1], cfg[2] or '0', cfg[3] or '', cfg[4] or '', cfg[5] or '-1', cfg[6] or '0',
  0, 0, redis.call('ZCOUNT', K_WEXP, '(' .. int(now), '+inf'), cfg[7] or '0', 0}
if cfg[8] then
  -- A one-slot semaphore: its slot is the lock (exp holds the sentinel).
  local r, live, v = lock_get(now)
  if v ~= '!' then out[8] = 1 end
  if live then
    out[#out + 1] = 0
    out[#out + 1] = r.exp
    out[#out + 1] = string.format('%d %d ', r.fencing, r.since) .. r.pid .. ' ' .. #r.owner .. ' ' .. r.owner .. r.host
    out[12] = 1
  elseif r then
    out[9] = 1
  end
else
  local held = redis.call('ZRANGE', K_EXP, 0, -1, 'WITHSCORES')
  out[8] = math.max(token_count(), 0) + #held / 2
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
// waiter ahead of the owner stops renewing and its record expires. A
// one-slot semaphore's holder is flagged before the caller blocks on it.
var semWaitCheckScript = semScript(`
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
`)

// semWakeScript gives back a wake element that a cancelled waiter took,
// and deletes its interrupt list.
//
//	KEYS[10] the waiter's interrupt list
//	ARGV[1]  "1" to give the wake element back
var semWakeScript = semScript(`
redis.call('DEL', KEYS[10])
if ARGV[1] == '1' then
  wake(1, math.max(tonumber(redis.call('HGET', K_CFG, 'limit') or '1'), 1))
end
return 0
`)

// semEnterWaitScript registers owner as a waiter, behind every live one,
// after pruning expired waiter records; a waiter already registered renews
// its lease and keeps its ticket.
//
//	ARGV[1] owner  ARGV[2] lease µs  ARGV[3] host  ARGV[4] pid
//
// Returns {1} entered, {0} renewed, {-1} absent, {-2, waiting, max_waiting},
// {-6} keyed (its instances have the lines). Entering disarms the fast
// acquire and flags a one-slot semaphore's holder. Host and pid go to the
// line's winfo (waiters_list.go).
var semEnterWaitScript = semScript(waiterInfoLua + `
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
  winfo_put(K_WSEQ, K_WEXP, ARGV[1], ARGV[3], ARGV[4], now, tonumber(exp), false)
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
winfo_put(K_WSEQ, K_WEXP, ARGV[1], ARGV[3], ARGV[4], now, tonumber(exp), true)
-- Somebody waits now: the fast acquire must read the line, and the
-- holder's release must wake it.
refresh_arm()
flag_lock()
return {1}
`)

// semLeaveWaitScript removes owner's waiter record and wake list. A waiter
// that leaves the line (it gave up) may make it the turn of the waiter at
// position free - 1, which it wakes; the last to leave re-arms the fast
// acquire.
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
  refresh_arm()
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
