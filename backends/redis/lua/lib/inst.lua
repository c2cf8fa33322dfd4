-- lib/inst.lua opens every script of an instance of a keyed semaphore
-- (inst_*.lua; instance_scripts.go describes them): the keys by name and
-- the helpers. Every instance script takes the same KEYS (keys.instance),
-- all under the semaphore's hash tag {sem:<name>}:
--
--   KEYS[1] cfg      the semaphore's config hash (limit, max_waiting, keyed)
--   KEYS[2] fencing  the semaphore's fencing counter, shared by every
--                    instance and by the semaphore's own slots
--   KEYS[3] inst     sorted set: key -> the instance's latest expiry (µs),
--                    the index that lists live instances
--   KEYS[4] exp      sorted set: held slot -> lease expiry (µs)
--   KEYS[5] hold     hash: held slot -> holder record (as lib/sem.lua), and
--                    "o:<owner>" -> "<slot> <expiry µs>"
--   KEYS[6] wseq     sorted set: waiter owner -> ticket (the line, FIFO)
--   KEYS[7] wexp     sorted set: waiter owner -> expiry (µs)
--
-- and ARGV[1], the key itself (the index's member). Each waiter in line has
-- a wake list of its own, KEYS[6] .. ":" .. owner, as a semaphore's waiters
-- do.
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
