package redis

import goredis "github.com/redis/go-redis/v9"

// The scripts of instances of keyed semaphores (backends/instance.go). An
// instance's keys share its semaphore's hash tag, {sem:<name>}, so one
// script may read the semaphore's config and bump its fencing counter in
// the same atomic step as it changes the instance. Every instance script
// takes the same KEYS (keys.instance):
//
//	KEYS[1] cfg      the semaphore's config hash (limit, max_waiting, keyed)
//	KEYS[2] fencing  the semaphore's fencing counter, shared by every
//	                 instance and by the semaphore's own slots
//	KEYS[3] inst     sorted set: key -> the instance's latest expiry (µs),
//	                 the index that lists live instances
//	KEYS[4] exp      sorted set: held slot -> lease expiry (µs)
//	KEYS[5] hold     hash: held slot -> holder record (as semLuaLib), and
//	                 "o:<owner>" -> "<slot> <expiry µs>"
//	KEYS[6] wseq     sorted set: waiter owner -> ticket (the line, FIFO)
//	KEYS[7] wexp     sorted set: waiter owner -> expiry (µs)
//
// and ARGV[1], the key itself (the index's member). Each waiter in line has
// a wake list of its own, KEYS[6] .. ":" .. owner, as a semaphore's waiters
// do. There are no free tokens: a slot exists while held, numbered with the
// lowest number the instance does not use.
//
// An instance leaves nothing behind: every script ends with settle, which
// deletes the instance's keys and its index entry once it has no live
// holder and no live waiter, and otherwise sets each key to expire with
// the instance's latest expiry (PEXPIREAT, rounded up to the next
// millisecond). So the keys of an instance whose callers crashed expire by
// themselves once their leases have, and meanwhile the next script prunes
// them (an expired holder's slot is free to take: pruning it is the
// reclaim). A pushed wake list expires with its waiter's record.

// instLua opens every instance script: the keys by name and the helpers.
const instLua = `
local K_CFG, K_FENCE, K_INST, K_EXP, K_HOLD, K_WSEQ, K_WEXP =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local IKEY = ARGV[1]
-- K_WINFO: who waits in the line (waiters_list.go), deleted with it.
local K_WINFO = string.sub(K_WSEQ, 1, -5) .. 'winfo'

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function int(n) return string.format('%d', n) end

local function wkey(owner) return K_WSEQ .. ':' .. owner end

local function holder_owner(d)
  local n, rest = string.match(d, '^%-?%d+ %-?%d+ %-?%d+ (%d+) (.*)$')
  if not n then return nil end
  return string.sub(rest, 1, tonumber(n))
end

-- sem reads the semaphore: limit and max_waiting, or -1 when it is absent
-- and -2 when it is not keyed.
local function sem()
  local c = redis.call('HMGET', K_CFG, 'limit', 'max_waiting', 'keyed')
  if not c[1] then return -1, 0 end
  if c[3] ~= '1' then return -2, 0 end
  return tonumber(c[1]), tonumber(c[2] or '-1')
end

-- prune drops the holders and waiter records whose lease expired.
local function prune(now)
  for _, slot in ipairs(redis.call('ZRANGE', K_EXP, '-inf', int(now), 'BYSCORE')) do
    local d = redis.call('HGET', K_HOLD, slot)
    local o = d and holder_owner(d)
    if o then redis.call('HDEL', K_HOLD, slot, 'o:' .. o) else redis.call('HDEL', K_HOLD, slot) end
    redis.call('ZREM', K_EXP, slot)
  end
  for _, o in ipairs(redis.call('ZRANGE', K_WEXP, '-inf', int(now), 'BYSCORE')) do
    redis.call('ZREM', K_WEXP, o)
    redis.call('ZREM', K_WSEQ, o)
    redis.call('DEL', wkey(o))
  end
end

-- settle removes an idle instance (no live holder, no live waiter) with its
-- index entry; otherwise its keys expire with its latest expiry, which its
-- index entry records. The index itself expires with its latest entry.
local function settle(now)
  local last = 0
  local e = redis.call('ZRANGE', K_EXP, -1, -1, 'WITHSCORES')
  if e[2] then last = tonumber(e[2]) end
  local w = redis.call('ZRANGE', K_WEXP, -1, -1, 'WITHSCORES')
  if w[2] and tonumber(w[2]) > last then last = tonumber(w[2]) end
  if last <= now then
    for _, o in ipairs(redis.call('ZRANGE', K_WSEQ, 0, -1)) do redis.call('DEL', wkey(o)) end
    redis.call('DEL', K_EXP, K_HOLD, K_WSEQ, K_WEXP, K_WINFO)
    redis.call('ZREM', K_INST, IKEY)
  else
    local ms = math.floor(last / 1000) + 1
    redis.call('PEXPIREAT', K_EXP, ms)
    redis.call('PEXPIREAT', K_HOLD, ms)
    redis.call('PEXPIREAT', K_WSEQ, ms)
    redis.call('PEXPIREAT', K_WEXP, ms)
    redis.call('PEXPIREAT', K_WINFO, ms)
    redis.call('ZADD', K_INST, int(last), IKEY)
  end
  local top = redis.call('ZRANGE', K_INST, -1, -1, 'WITHSCORES')
  if top[2] then redis.call('PEXPIREAT', K_INST, math.floor(tonumber(top[2]) / 1000) + 1) end
end

-- ahead counts the live waiters ahead of owner (every one when owner is
-- not in line) and returns owner's ticket (run prune first).
local function ahead(owner)
  local seq = redis.call('ZSCORE', K_WSEQ, owner)
  if seq then return redis.call('ZCOUNT', K_WSEQ, '-inf', '(' .. seq), seq end
  return redis.call('ZCARD', K_WSEQ), nil
end

-- wake_line wakes the waiters at positions from .. from + n - 1 of the line
-- (0 is the head), each on its own list, which keeps at most one element
-- and expires with the waiter's record.
local function wake_line(from, n)
  if n <= 0 then return end
  for _, o in ipairs(redis.call('ZRANGE', K_WSEQ, from, from + n - 1)) do
    local k = wkey(o)
    if redis.call('RPUSH', k, '1') > 1 then redis.call('LTRIM', k, -1, -1) end
    local e = redis.call('ZSCORE', K_WEXP, o)
    if e then redis.call('PEXPIREAT', k, math.floor(tonumber(e) / 1000) + 1) else redis.call('DEL', k) end
  end
end
`

// instScript is an instance script: the keys, the helpers and a body.
func instScript(body string) *goredis.Script { return goredis.NewScript(instLua + body) }

// instAcquireScript takes a slot of the instance, creating it: unless the
// semaphore is absent or not keyed, the instance's live holders reach the
// limit, or waiters are in line and it is not the caller's turn, it gives
// the caller the lowest slot number the instance does not use, bumps the
// semaphore's fencing counter (restarting it at TIME in µs when missing)
// and takes the caller out of the line.
//
//	ARGV[2] owner  ARGV[3] host  ARGV[4] pid  ARGV[5] lease µs
//
// Returns {slot, fencing, expiry µs}, {-1} absent, {-5} not keyed, {-2,
// live, limit} full, {-4, ahead, free} not the caller's turn.
var instAcquireScript = instScript(`
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
`)

// instOwnedLua finds ARGV[2]'s slot and expiry while its index entry
// matches the slot's lease (as owned in semLuaLib), else drops the stale
// entry and sets slot to nil.
const instOwnedLua = `
local oi = 'o:' .. ARGV[2]
local slot, score
local v = redis.call('HGET', K_HOLD, oi)
if v then
  local s, e = string.match(v, '^(%d+) (%d+)$')
  local sc = s and redis.call('ZSCORE', K_EXP, s)
  if sc and tonumber(sc) == tonumber(e) then
    slot, score = s, tonumber(sc)
  else
    redis.call('HDEL', K_HOLD, oi)
  end
end
`

// instExtendScript renews ARGV[2]'s lease to now + ARGV[3] µs while it is
// live. Returns the new expiry in µs, -1 when it holds nothing live.
var instExtendScript = instScript(instOwnedLua + `
local now = now_us()
if not slot or score <= now then return -1 end
local exp = int(now + tonumber(ARGV[3]))
redis.call('ZADD', K_EXP, 'XX', exp, slot)
redis.call('HSET', K_HOLD, oi, slot .. ' ' .. exp)
settle(now)
return tonumber(exp)
`)

// instReleaseScript removes ARGV[2]'s holder record and wakes the waiter
// whose turn the freed slot makes (the one at position free - 1 of the
// line: those before it were entitled already); the instance is gone when
// that leaves it idle. Returns {1} when the lease was live, {0} when it had
// expired (cleared all the same), {-1} when ARGV[2] held nothing.
var instReleaseScript = instScript(instOwnedLua + `
local now = now_us()
if not slot then
  settle(now)
  return {-1}
end
local code = 0
if score > now then code = 1 end
redis.call('HDEL', K_HOLD, slot, oi)
redis.call('ZREM', K_EXP, slot)
prune(now)
local free = tonumber(redis.call('HGET', K_CFG, 'limit') or '0') - redis.call('ZCARD', K_EXP)
if free > 0 then wake_line(free - 1, 1) end
settle(now)
return {code}
`)

// instEnterWaitScript queues ARGV[2] behind every live waiter of the
// instance (creating it), or renews its record, keeping its place.
//
//	ARGV[3] lease µs
//
// Returns {1} entered, {0} renewed, {-1} absent, {-5} not keyed, {-2,
// waiting, max_waiting}.
var instEnterWaitScript = instScript(waiterInfoLua + `
local limit, maxw = sem()
if limit < 0 then
  if limit == -1 then return {-1} end
  return {-5}
end
local now = now_us()
prune(now)
local exp = int(now + tonumber(ARGV[3]))
if redis.call('ZSCORE', K_WEXP, ARGV[2]) then
  redis.call('ZADD', K_WEXP, exp, ARGV[2])
  winfo_put(K_WSEQ, K_WEXP, ARGV[2], ARGV[4], ARGV[5], now, tonumber(exp), false)
  settle(now)
  return {0}
end
local n = redis.call('ZCARD', K_WEXP)
if maxw >= 0 and n >= maxw then
  settle(now)
  return {-2, n, maxw}
end
local last = redis.call('ZRANGE', K_WSEQ, -1, -1, 'WITHSCORES')
local seq = 1
if last[2] then seq = tonumber(last[2]) + 1 end
redis.call('ZADD', K_WSEQ, int(seq), ARGV[2])
redis.call('ZADD', K_WEXP, exp, ARGV[2])
winfo_put(K_WSEQ, K_WEXP, ARGV[2], ARGV[4], ARGV[5], now, tonumber(exp), true)
settle(now)
return {1}
`)

// instLeaveWaitScript removes ARGV[2]'s waiter record and wake list, wakes
// the waiter whose turn that makes, and removes the instance when idle.
var instLeaveWaitScript = instScript(`
local was = redis.call('ZREM', K_WEXP, ARGV[2])
redis.call('ZREM', K_WSEQ, ARGV[2])
redis.call('DEL', wkey(ARGV[2]))
local now = now_us()
prune(now)
if was == 1 then
  local free = tonumber(redis.call('HGET', K_CFG, 'limit') or '0') - redis.call('ZCARD', K_EXP)
  if free > 0 then wake_line(free - 1, 1) end
end
settle(now)
return 0
`)

// instFirstWaiterScript returns the live waiter with the lowest ticket, ""
// when nobody waits.
var instFirstWaiterScript = instScript(`
local now = now_us()
for _, o in ipairs(redis.call('ZRANGE', K_WSEQ, 0, -1)) do
  local e = redis.call('ZSCORE', K_WEXP, o)
  if e and tonumber(e) > now then return o end
end
return ''
`)

// instWaitCheckScript is WaitSemaphore's first step for an instance: {1}
// when TryAcquire may succeed for ARGV[2] now (or the semaphore is
// absent), else {0, µs until the next event or -1 when none, 1 when
// ARGV[2] is in line else 0}, having emptied ARGV[2]'s wake list so that
// the BLPOP that follows waits for a new push. The events: the earliest
// live lease expires, or the record of a waiter ahead expires.
var instWaitCheckScript = instScript(`
local limit = redis.call('HGET', K_CFG, 'limit')
if not limit then return {1} end
limit = tonumber(limit)
local now = now_us()
prune(now)
local n, seq = ahead(ARGV[2])
local live = redis.call('ZCARD', K_EXP)
if live < limit and n < limit - live then
  settle(now)
  return {1}
end
if seq then redis.call('DEL', wkey(ARGV[2])) end
local wait = -1
local first = redis.call('ZRANGE', K_EXP, 0, 0, 'WITHSCORES')
if first[2] then wait = tonumber(first[2]) - now end
if n > 0 then
  local ws = redis.call('ZRANGE', K_WEXP, 0, 1, 'WITHSCORES')
  for i = 1, #ws, 2 do
    if ws[i] ~= ARGV[2] then
      local d = tonumber(ws[i + 1]) - now
      if wait < 0 or d < wait then wait = d end
      break
    end
  end
end
settle(now)
if seq then return {0, wait, 1} end
return {0, wait, 0}
`)

// instObserveLua reads the instances of a semaphore for semObserveScript
// and cleans up after them for semDeleteScript and semPutScript. Those
// scripts take the semaphore's keys (KEYS[1..9]) and its index
// (KEYS[10]); an instance's keys are not in KEYS, since the scripts cannot
// know them in advance: they are built here from ARGV[1], the key prefix
// shared by the semaphore's instances ("<prefix>{sem:<name>}:i:"), with
// the encoding of keys.instance (encodeKey), and share the semaphore's hash
// tag, so they live in its slot.
const instObserveLua = `
local K_INST = KEYS[10]
local IBASE = ARGV[1]

local function enc_key(k)
  if string.match(k, '^[%w_%.%-]+$') then return k end
  return '=' .. (string.gsub(k, '.', function(c) return string.format('%02x', string.byte(c)) end))
end

-- instances lists the keys of the live instances (index entries later
-- than now), dropping the others, with each instance's keys.
local function instances(now)
  redis.call('ZREMRANGEBYSCORE', K_INST, '-inf', int(now))
  local out = {}
  for _, k in ipairs(redis.call('ZRANGE', K_INST, 0, -1)) do
    local b = IBASE .. enc_key(k) .. ':'
    out[#out + 1] = {k, b .. 'exp', b .. 'hold', b .. 'wseq', b .. 'wexp'}
  end
  return out
end

-- inst_live counts an instance's live holders.
local function inst_live(i, now)
  return redis.call('ZCOUNT', i[2], '(' .. int(now), '+inf')
end

-- inst_delete deletes every key of an instance, its waiters' wake lists
-- included.
local function inst_delete(i)
  for _, o in ipairs(redis.call('ZRANGE', i[4], 0, -1)) do redis.call('DEL', i[4] .. ':' .. o) end
  redis.call('DEL', i[2], i[3], i[4], i[5], string.sub(i[4], 1, -5) .. 'winfo')
end

-- inst_wake wakes the first n waiters of an instance (a limit raised); a
-- waiter that finds it is not its turn waits again.
local function inst_wake(i, n)
  for _, o in ipairs(redis.call('ZRANGE', i[4], 0, n - 1)) do
    local k = i[4] .. ':' .. o
    if redis.call('RPUSH', k, '1') > 1 then redis.call('LTRIM', k, -1, -1) end
    local e = redis.call('ZSCORE', i[5], o)
    if e then redis.call('PEXPIREAT', k, math.floor(tonumber(e) / 1000) + 1) else redis.call('DEL', k) end
  end
end
`
