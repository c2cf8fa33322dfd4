-- lib/inst_observe.lua reads the instances of a semaphore for
-- sem_observe.lua and cleans up after them for sem_delete.lua and
-- sem_put.lua. Those scripts take the semaphore's keys (KEYS[1..9]) and its
-- index (KEYS[10]); an instance's keys are not in KEYS, since the scripts
-- cannot know them in advance: they are built here from ARGV[1], the key
-- prefix shared by the semaphore's instances ("<prefix>{sem:<name>}:i:"),
-- with the encoding of keys.instance (encodeKey in instance.go), and share
-- the semaphore's hash tag, so they live in its slot.
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
