package redis

import (
	"strconv"

	goredis "github.com/redis/go-redis/v9"
)

// The queue scripts. Every job moves only inside one of them. Each script
// is queueLuaPrelude followed by its body, and takes the same KEYS:
//
//	KEYS[1..10]  the queue's fixed keys, in queueFixedKeys order:
//	             meta, ids, jobs, payloads, inflight, delayed, dead,
//	             kready, krunning, wake
//	KEYS[11..]   the ready sets of partitions 0, 1, ... (as many as the
//	             script says it needs; none for the others)
//
// A script that needs the ready sets checks that it got as many as the
// queue has (the partition count, or for PutQueue, DeleteQueue and
// ObserveQueues the span, see queue.go) and otherwise changes nothing and
// returns {-1, n}, n being the number it needs: the caller builds the keys
// again and runs it once more. A script that finds no meta hash returns
// {0} (the queue is absent) unless it says otherwise.
//
// Job ids are decimal strings in Lua (a Lua number converted by Redis could
// be written in exponent form); they fit in a double exactly (< 2^53), so
// they also serve as ready-set scores. Times are microseconds of the
// server's clock (TIME).

// queueWakeMax bounds the wake list: at most this many wake elements wait
// for a blocked worker (see WaitQueue).
const queueWakeMax = 64

// queueSweepMax bounds the due delayed jobs and the expired leases one
// claim moves back to the ready sets (each claim moves the next ones).
const queueSweepMax = 1000

// queueLuaPrelude names the fixed keys and defines what the scripts share:
//
//	now_us()          the server's clock in microseconds
//	ready_key(p)      the ready set of partition p
//	decode, encode    a job record (the jobs hash value): cmsgpack of
//	                  partition, attempt, enqueued_at, available_at, owner
//	                  ('' unless in flight), key ('' for none), last_error
//	kprefix, kmember  members of the keyed indexes kready and krunning:
//	                  the key's length (8 hex digits), the key, then the
//	                  id (16 hex digits), so that ZRANGEBYLEX over the
//	                  prefix lists a key's jobs, oldest first
//	oldest_keyed      the oldest job of a key in one index, or nil
//	wake(n)           pushes n wake elements, as many as fit under
//	                  queueWakeMax (the elements are all alike; a full
//	                  list, where workers are busy, costs one LLEN)
//	each_chunk        calls a command with a long argument list in chunks
//	                  (Lua's unpack has a stack limit)
var queueLuaPrelude = `
local K_META, K_IDS, K_JOBS, K_PAYLOADS, K_INFLIGHT, K_DELAYED, K_DEAD, K_KREADY, K_KRUNNING, K_WAKE =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local NLISTS = #KEYS - 10
local WAKE_MAX = ` + strconv.Itoa(queueWakeMax) + `
local SWEEP_MAX = ` + strconv.Itoa(queueSweepMax) + `

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function ready_key(p) return KEYS[11 + p] end

local function decode(m)
  local part, attempt, enq, avail, owner, key, err = cmsgpack.unpack(m)
  return {part = part, attempt = attempt, enq = enq, avail = avail, owner = owner, key = key, err = err}
end

local function encode(j)
  return cmsgpack.pack(j.part, j.attempt, j.enq, j.avail, j.owner, j.key, j.err)
end

local function kprefix(key) return string.format('%08x', #key) .. key end
local function kmember(key, id) return kprefix(key) .. string.format('%016x', tonumber(id)) end

local function oldest_keyed(index, key)
  local p = kprefix(key)
  local r = redis.call('ZRANGEBYLEX', index, '[' .. p, '(' .. p .. '\255', 'LIMIT', 0, 1)
  if r[1] then return string.format('%d', tonumber(string.sub(r[1], #p + 1), 16)) end
  return nil
end

local function wake(n)
  n = math.min(n, WAKE_MAX - redis.call('LLEN', K_WAKE))
  if n <= 0 then return end
  local a = {}
  for i = 1, n do a[i] = '1' end
  redis.call('LPUSH', K_WAKE, unpack(a))
end

local function each_chunk(cmd, key, list)
  for i = 1, #list, 1000 do
    redis.call(cmd, key, unpack(list, i, math.min(i + 999, #list)))
  end
end

local function span_of(meta)
  return math.max(tonumber(meta.span or '0') or 0, tonumber(meta.partitions or '0') or 0)
end
`

func queueScript(body string) *goredis.Script {
	return goredis.NewScript(queueLuaPrelude + body)
}

// queuePutScript creates or updates a queue (PutQueue).
//
// KEYS: the fixed keys, then the ready sets of partitions 0..n-1 where n is
// at least the stored span and the new partition count.
// ARGV: config JSON, partitions, visibility µs, max_attempts, retry_backoff
// µs, unique, max_payload.
// It moves the jobs of ready sets at or above the new partition count into
// set p % partitions (a union, so ids keep their order), sets the span to
// the partition count, pushes wake elements when it moved jobs, and returns
// {1, moved}; {-1, n} when it got too few ready sets.
var queuePutScript = queueScript(`
local m = redis.call('HMGET', K_META, 'span', 'partitions', 'cursor')
local P = tonumber(ARGV[2])
local need = math.max(span_of({span = m[1], partitions = m[2]}), P)
if NLISTS < need then return {-1, need} end
local moved = 0
for p = P, NLISTS - 1 do
  local n = redis.call('ZCARD', ready_key(p))
  if n > 0 then
    local dst = ready_key(p % P)
    redis.call('ZUNIONSTORE', dst, 2, dst, ready_key(p))
    redis.call('DEL', ready_key(p))
    moved = moved + n
  end
end
local cursor = tonumber(m[3] or '0') or 0
if cursor >= P then cursor = 0 end
redis.call('HSET', K_META, 'config', ARGV[1], 'partitions', P, 'span', P, 'vis', ARGV[3],
  'max_attempts', ARGV[4], 'backoff', ARGV[5], 'unique', ARGV[6], 'max_payload', ARGV[7], 'cursor', cursor)
wake(moved)
return {1, moved}
`)

// queueDeleteScript removes a queue (DeleteQueue).
//
// KEYS: the fixed keys, then the ready sets of partitions 0..n-1, n at
// least the stored span.
// ARGV: force ('1' or '0').
// It returns {1} after deleting every key of the queue; {-2, jobs} when the
// queue holds jobs (the jobs hash) and force is not set; {-1, n} when it
// got too few ready sets. An absent queue's leftover keys are deleted too.
var queueDeleteScript = queueScript(`
local m = redis.call('HMGET', K_META, 'span', 'partitions')
local need = span_of({span = m[1], partitions = m[2]})
if NLISTS < need then return {-1, need} end
local jobs = redis.call('HLEN', K_JOBS)
if jobs > 0 and ARGV[1] ~= '1' then return {-2, jobs} end
redis.call('DEL', unpack(KEYS))
return {1}
`)

// queueObserveScript reads one queue (ObserveQueues). It writes nothing.
//
// KEYS: the fixed keys, then the ready sets of partitions 0..n-1, n at
// least the stored span.
// ARGV: none.
// It returns {1, config JSON, partitions, ready, in flight, dead, delayed,
// oldest ready enqueued_at µs or -1, stranded, the first delayed job's
// available_at µs or -1}; {0} when absent; {-1, n}
// when it got too few ready sets. Ready counts the ready sets and the
// delayed set (a delayed job is ready, not yet available); delayed counts
// the delayed jobs not yet due; in flight includes expired leases no claim
// has swept yet, as the SQL stores count them.
var queueObserveScript = queueScript(`
local m = redis.call('HMGET', K_META, 'span', 'partitions', 'config')
if not m[2] then return {0} end
local need = span_of({span = m[1], partitions = m[2]})
if NLISTS < need then return {-1, need} end
local P = tonumber(m[2])
local now = now_us()
local ready, stranded, oldest = 0, 0, nil
for p = 0, need - 1 do
  local n = redis.call('ZCARD', ready_key(p))
  ready = ready + n
  if p >= P then stranded = stranded + n end
  if n > 0 then
    local first = redis.call('ZRANGE', ready_key(p), 0, 0)
    local rec = redis.call('HGET', K_JOBS, first[1])
    if rec then
      local j = decode(rec)
      if not oldest or j.enq < oldest then oldest = j.enq end
    end
  end
end
local ndelayed = redis.call('ZCARD', K_DELAYED)
local future = redis.call('ZCOUNT', K_DELAYED, '(' .. now, '+inf')
local due = redis.call('ZRANGEBYSCORE', K_DELAYED, '-inf', now, 'LIMIT', 0, 100)
if #due > 0 then
  local recs = redis.call('HMGET', K_JOBS, unpack(due))
  for i = 1, #due do
    if recs[i] then
      local j = decode(recs[i])
      if not oldest or j.enq < oldest then oldest = j.enq end
    end
  end
end
local first = redis.call('ZRANGEBYSCORE', K_DELAYED, '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
return {1, m[3], P, ready + ndelayed, redis.call('ZCARD', K_INFLIGHT), redis.call('LLEN', K_DEAD),
  future, oldest or -1, stranded, first[2] and tonumber(first[2]) or -1}
`)

// queuePushScript enqueues a batch of jobs (Push; concurrent pushes of
// one Store to one queue go together, queuePushBatch).
//
// KEYS: the fixed keys, then the ready sets of all partitions.
// ARGV: the number of jobs n, then per job: payload, key (empty for none),
// the key's partition (when a key is given), delay µs.
// When every job is pushed (the common case) it returns {2, first, now,
// P}: the jobs got the ids first, first+1, ... in batch order, were
// enqueued at now and are available at now + their delay, a keyless job in
// partition id % P and a keyed one in the partition it was given. Else it
// returns {1, r1, ..., rn}, one reply per job: {1, id, partition,
// enqueued_at, available_at}; {-2, size, max_payload} when the payload is
// too large; {-3, <job>} when the queue is unique and the key is pending
// (or running, under pending_or_running), <job> being the oldest such job
// as queueJobFields lists them followed by its expiry µs (0 unless in
// flight) and owner. For the whole batch: {0} when the queue is absent;
// {-1, partitions} when the ready sets do not match.
//
// The jobs are pushed in order, each as if alone: a unique job later in
// the batch finds an earlier one of its key. The checks come first; then
// the ids come from one INCRBY and each key is written once for the whole
// batch (a job costs its share of a few calls, not five calls of its
// own). An INCRBY that finds the ids key missing (it returns the batch's
// size) moves it to the server's time in µs first (the data-loss rule:
// above any id it can have handed out before). A keyless job goes to
// partition id % P (round robin); a job available now joins its ready set,
// a delayed one the delayed set; a keyed one enters the kready index. One
// wake element is pushed per job either way: a worker woken by a delayed
// job bounds its next wait by the job's available_at.
var queuePushScript = queueScript(`
local m = redis.call('HMGET', K_META, 'partitions', 'unique', 'max_payload')
if not m[1] then return {0} end
local P = tonumber(m[1])
if NLISTS ~= P then return {-1, P} end
local maxp = tonumber(m[3] or '0') or 0
local uniq = m[2] == 'pending' or m[2] == 'pending_or_running'
local now = now_us()
local n = tonumber(ARGV[1])
local out, ok, first, dups = {1}, {}, {}, {}
-- The checks, each job as if pushed alone after the batch's earlier ones:
-- a unique job's key is looked up among the batch's earlier jobs (first),
-- else in the store (which the checks do not change).
for i = 0, n - 1 do
  local payload, key = ARGV[2 + 4 * i], ARGV[3 + 4 * i]
  local unique = uniq and key ~= ''
  if maxp > 0 and #payload > maxp then
    out[i + 2] = {-2, #payload, maxp}
  elseif unique and first[key] then
    dups[#dups + 1] = {i, first[key]}
  else
    local best
    if unique then
      best = oldest_keyed(K_KREADY, key)
      if m[2] == 'pending_or_running' then
        local o = oldest_keyed(K_KRUNNING, key)
        if o and (not best or tonumber(o) < tonumber(best)) then best = o end
      end
    end
    local rec = best and redis.call('HGET', K_JOBS, best)
    if rec then
      local j = decode(rec)
      local exp = redis.call('ZSCORE', K_INFLIGHT, best)
      out[i + 2] = {-3, best, j.part, j.attempt, j.enq, j.avail, j.key, j.err, redis.call('HGET', K_PAYLOADS, best) or '',
        tonumber(exp or '0'), j.owner}
    else
      ok[#ok + 1] = i
      if unique then first[key] = i end
    end
  end
end
local all = #ok == n
local idn = 0
-- The writes: the ids from one INCRBY, one call per key for the batch.
if #ok > 0 then
  idn = redis.call('INCRBY', K_IDS, #ok)
  if idn == #ok then idn = redis.call('INCRBY', K_IDS, now) end
  idn = idn - #ok
  local recs, pays, delayed, kready, ready = {}, {}, {}, {}, {}
  for _, i in ipairs(ok) do
    idn = idn + 1
    local id = string.format('%d', idn)
    local key, delay = ARGV[3 + 4 * i], tonumber(ARGV[5 + 4 * i])
    local part
    if key ~= '' then part = tonumber(ARGV[4 + 4 * i]) else part = idn % P end
    local avail = now + delay
    recs[#recs + 1] = id
    recs[#recs + 1] = cmsgpack.pack(part, 0, now, avail, '', key, '') -- encode's layout
    pays[#pays + 1] = id
    pays[#pays + 1] = ARGV[2 + 4 * i]
    if delay > 0 then
      delayed[#delayed + 1] = avail
      delayed[#delayed + 1] = id
    else
      local r = ready[part]
      if not r then r = {}; ready[part] = r end
      r[#r + 1] = id
      r[#r + 1] = id
    end
    if key ~= '' then
      kready[#kready + 1] = 0
      kready[#kready + 1] = kmember(key, id)
    end
    if not all then out[i + 2] = {1, idn, part, now, avail} end
  end
  redis.call('HSET', K_JOBS, unpack(recs))
  redis.call('HSET', K_PAYLOADS, unpack(pays))
  if #delayed > 0 then redis.call('ZADD', K_DELAYED, unpack(delayed)) end
  for part, r in pairs(ready) do redis.call('ZADD', ready_key(part), unpack(r)) end
  if #kready > 0 then redis.call('ZADD', K_KREADY, unpack(kready)) end
  wake(#ok)
end
if all then return {2, idn - n + 1, now, P} end
-- A duplicate of an earlier job of the batch gets that job, as pushed.
for _, d in ipairs(dups) do
  local i, j = d[1], d[2]
  local g = out[j + 2]
  out[i + 2] = {-3, g[2], g[3], 0, now, g[5], ARGV[3 + 4 * j], '', ARGV[2 + 4 * j], 0, ''}
end
return out
`)

// queueClaimScript sweeps and claims (Claim, and WaitQueue's look).
//
// KEYS: the fixed keys, then the ready sets of all partitions.
// ARGV: the number of members n, then per member its owner and its max.
//
// First it moves up to queueSweepMax due delayed jobs into their ready
// sets, then returns up to queueSweepMax in-flight jobs whose lease
// deadline passed (score <= now) to their ready sets, or to the dead list
// when they used max_attempts attempts (<= 0: unlimited), with last_error
// 'visibility timeout' and the owner cleared: a late ack, retry or extend
// by that owner then finds another owner (or none) and is refused. A job
// whose partition no longer exists (PutQueue shrank the queue while it was
// delayed or in flight) goes to partition % P.
//
// Then it reads the ready sets merged in id (push) order, whatever the
// partition (each set is scored by id; a chunk of ids of a set at a time,
// the set's share of the claim first, then twice the last up to
// queueClaimChunkMax), and each member in turn takes up to its max
// claimable jobs from that one stream. A job without a key is claimable; a
// job with a key only while krunning has no job of its key and it is the
// oldest job of its key in kready (which holds delayed ones too): the jobs
// of one key run one at a time in push order, and a claim takes at most
// one of them (taking it moves it to krunning). Jobs passed over stay in
// their sets. Each job taken is leased to the member's owner until now +
// visibility, counting an attempt.
//
// It returns {1, now, visibility µs, empty, next, then per member: count,
// then count times the fields of queueJobFields}. empty is 1 when no job
// was claimable, in which case the wake list was deleted (anything that
// may make a job claimable later pushes a new element: a push, a retry, an
// ack or death of a job with a key, a return, a requeue) and next is the
// earliest of the first delayed job's available_at, the first lease
// deadline and now + visibility (no lease taken later can expire sooner),
// the instant until which an idle worker may block; otherwise empty is 0
// and next -1. With no member (n = 0) it only sweeps and looks.
var queueClaimScript = queueScript(`
local m = redis.call('HMGET', K_META, 'partitions', 'vis', 'max_attempts')
if not m[1] then return {0} end
local P = tonumber(m[1])
if NLISTS ~= P then return {-1, P} end
local vis, maxatt = tonumber(m[2]), tonumber(m[3])
local now = now_us()

local due = redis.call('ZRANGEBYSCORE', K_DELAYED, '-inf', now, 'LIMIT', 0, SWEEP_MAX)
if #due > 0 then
  redis.call('ZREM', K_DELAYED, unpack(due))
  local recs = redis.call('HMGET', K_JOBS, unpack(due))
  for i, id in ipairs(due) do
    if recs[i] then
      local j = decode(recs[i])
      local p = j.part % P
      if p ~= j.part then
        j.part = p
        redis.call('HSET', K_JOBS, id, encode(j))
      end
      redis.call('ZADD', ready_key(p), id, id)
    end
  end
end

local expired = redis.call('ZRANGEBYSCORE', K_INFLIGHT, '-inf', now, 'LIMIT', 0, SWEEP_MAX)
if #expired > 0 then
  redis.call('ZREM', K_INFLIGHT, unpack(expired))
  local recs = redis.call('HMGET', K_JOBS, unpack(expired))
  for i, id in ipairs(expired) do
    if recs[i] then
      local j = decode(recs[i])
      j.owner, j.err = '', 'visibility timeout'
      if j.key ~= '' then redis.call('ZREM', K_KRUNNING, kmember(j.key, id)) end
      if maxatt > 0 and j.attempt >= maxatt then
        redis.call('RPUSH', K_DEAD, id)
      else
        j.part = j.part % P
        redis.call('ZADD', ready_key(j.part), id, id)
        if j.key ~= '' then redis.call('ZADD', K_KREADY, 0, kmember(j.key, id)) end
      end
      redis.call('HSET', K_JOBS, id, encode(j))
    end
  end
end

-- The candidates: per set, a chunk of ids after the last one read. The
-- first chunk is the set's share of the claim (the members' max summed,
-- over P: keyless jobs go round robin), each further one of a set twice
-- the last, up to queueClaimChunkMax.
local members = tonumber(ARGV[1])
local need = 1
for k = 1, members do need = need + tonumber(ARGV[2 * k + 1]) end
local ids, size, at, last, ended, headn = {}, {}, {}, {}, {}, {}
-- peek returns the next id of set p as a number (headn[p]), or nil.
local function peek(p)
  if ended[p] then return nil end
  if not ids[p] or at[p] > #ids[p] then
    local from = '-inf'
    if last[p] then from = '(' .. last[p] end
    size[p] = math.min(size[p] and 2 * size[p] or math.ceil(need / P) + 1, ` + strconv.Itoa(queueClaimChunkMax) + `)
    local c = redis.call('ZRANGEBYSCORE', ready_key(p), from, '+inf', 'LIMIT', 0, size[p])
    if #c == 0 then
      ended[p] = true
      return nil
    end
    ids[p], at[p], headn[p] = c, 1, nil
  end
  if not headn[p] then headn[p] = tonumber(ids[p][at[p]]) end
  return headn[p]
end
-- next_candidate pops the lowest id of all sets: the id and its set.
local function next_candidate()
  local bestn, bp = nil, nil
  for p = 0, P - 1 do
    local n = peek(p)
    if n and (not bestn or n < bestn) then bestn, bp = n, p end
  end
  if not bp then return nil end
  local id = ids[bp][at[bp]]
  last[bp], at[bp], headn[bp] = id, at[bp] + 1, nil
  return id, bp
end
-- free reports whether a job of key may start, as far as the key goes.
-- A key found busy stays busy for the rest of the script (a job taken
-- here makes its key busy).
local busy = {}
local function free(id, key)
  if key == '' then return true end
  if busy[key] then return false end
  local o = oldest_keyed(K_KREADY, key)
  if oldest_keyed(K_KRUNNING, key) or (o and tonumber(o) ~= tonumber(id)) then
    busy[key] = true
    return false
  end
  return true
end
-- take returns the next claimable job (id, set, decoded record), or nil.
-- It reads the candidates' records in batches (HMGET): the claim's size
-- first, then twice the last batch, up to the chunk bound.
local cids, cps, crecs, bi, bsize = {}, {}, {}, 1, nil
local function take()
  while true do
    if bi > #cids then
      bsize = math.min(bsize and 2 * bsize or need, ` + strconv.Itoa(queueClaimChunkMax) + `)
      cids, cps, bi = {}, {}, 1
      while #cids < bsize do
        local id, p = next_candidate()
        if not id then break end
        cids[#cids + 1], cps[#cps + 1] = id, p
      end
      if #cids == 0 then return nil end
      crecs = redis.call('HMGET', K_JOBS, unpack(cids))
    end
    local id, p, rec = cids[bi], cps[bi], crecs[bi]
    bi = bi + 1
    if not rec then
      redis.call('ZREM', ready_key(p), id) -- a record gone behind coordd's back
    else
      local j = decode(rec)
      if free(id, j.key) then return id, p, j end
    end
  end
end

local out = {1, now, vis, 0, -1}
local popped = false
local dry = false -- the stream ran out
local gone = {}   -- per set, the ids taken from it
for k = 1, members do
  local owner, max = ARGV[2 * k], tonumber(ARGV[2 * k + 1])
  local exp = now + vis
  local zargs, hargs, taken = {}, {}, {}
  local countAt = #out + 1
  out[countAt] = 0
  local n = countAt
  while #taken < max and not dry do
    local id, p, j = take()
    if not id then
      dry = true
    else
      taken[#taken + 1] = id
      local g = gone[p]
      if not g then
        g = {}
        gone[p] = g
      end
      g[#g + 1] = id
      j.attempt, j.owner, j.part = j.attempt + 1, owner, p
      zargs[#zargs + 1], zargs[#zargs + 2] = exp, id
      hargs[#hargs + 1], hargs[#hargs + 2] = id, encode(j)
      if j.key ~= '' then
        local km = kmember(j.key, id)
        redis.call('ZREM', K_KREADY, km)
        redis.call('ZADD', K_KRUNNING, 0, km)
        busy[j.key] = true
      end
      out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5], out[n + 6], out[n + 7] =
        tonumber(id), p, j.attempt, j.enq, j.avail, j.key, j.err
      out[n + 8] = false -- the payload, below
      n = n + 8
    end
  end
  out[countAt] = #taken
  if #taken > 0 then
    popped = true
    local pays = redis.call('HMGET', K_PAYLOADS, unpack(taken))
    for i = 1, #taken do out[countAt + 8 * i] = pays[i] or '' end
    redis.call('ZADD', K_INFLIGHT, unpack(zargs))
    redis.call('HSET', K_JOBS, unpack(hargs))
  end
end
if popped then
  for p, g in pairs(gone) do each_chunk('ZREM', ready_key(p), g) end
  return out
end
if members == 0 and take() then return out end
redis.call('DEL', K_WAKE)
local next = now + vis
local d = redis.call('ZRANGE', K_DELAYED, 0, 0, 'WITHSCORES')
if d[2] and tonumber(d[2]) < next then next = tonumber(d[2]) end
local f = redis.call('ZRANGE', K_INFLIGHT, 0, 0, 'WITHSCORES')
if f[2] and tonumber(f[2]) < next then next = tonumber(f[2]) end
out[4], out[5] = 1, next
return out
`)

// queueClaimChunkMax bounds how many ids of a ready set a claim reads at a
// time.
const queueClaimChunkMax = 1024

// queueAckScript deletes finished jobs (Ack, a batch of one queue).
//
// KEYS: the fixed keys.
// ARGV: id, owner, id, owner, ... (one pair per ack).
// It returns one number per pair: 1 when the job was deleted, 0 when the
// owner does not hold it (any more): it is gone, back in the queue, dead,
// or in flight for another owner. The second ack of one job in a batch
// gets 0. A deleted job with a key whose key has jobs waiting pushes a wake
// element: the next of them may start now.
var queueAckScript = queueScript(`
local n = #ARGV / 2
local ids = {}
for i = 1, n do ids[i] = ARGV[2 * i - 1] end
local recs = redis.call('HMGET', K_JOBS, unpack(ids))
local res, del, seen = {}, {}, {}
local nwake = 0
for i = 1, n do
  res[i] = 0
  local id = ids[i]
  if recs[i] and not seen[id] then
    local _, _, _, _, owner, key = cmsgpack.unpack(recs[i])
    if owner ~= '' and owner == ARGV[2 * i] then
      res[i] = 1
      seen[id] = true
      del[#del + 1] = id
      if key ~= '' then
        redis.call('ZREM', K_KRUNNING, kmember(key, id))
        if oldest_keyed(K_KREADY, key) then nwake = nwake + 1 end
      end
    end
  end
end
if #del > 0 then
  redis.call('ZREM', K_INFLIGHT, unpack(del))
  redis.call('HDEL', K_JOBS, unpack(del))
  redis.call('HDEL', K_PAYLOADS, unpack(del))
end
wake(nwake)
return res
`)

// queueRetryScript returns a failed job to the queue or the dead list
// (Retry).
//
// KEYS: the fixed keys, then the ready sets of all partitions.
// ARGV: id, owner, reason.
// When owner holds the job (ErrLost otherwise) it records the reason and
// clears the owner; with max_attempts > 0 used up the job goes to the dead
// list, otherwise it is ready again at now + retry_backoff: in the delayed
// set with a backoff, in its ready set (its id keeps its place) without,
// and a wake element is pushed (also when a job with a key dies and its
// key has jobs waiting). It returns {1} (ready), {2} (dead), {3}
// (the owner does not hold it, or the queue is gone), or {-1, P}.
var queueRetryScript = queueScript(`
local m = redis.call('HMGET', K_META, 'partitions', 'max_attempts', 'backoff')
if not m[1] then return {3} end
local P = tonumber(m[1])
if NLISTS ~= P then return {-1, P} end
local id, owner = ARGV[1], ARGV[2]
local rec = redis.call('HGET', K_JOBS, id)
if not rec then return {3} end
local j = decode(rec)
if j.owner == '' or j.owner ~= owner then return {3} end
redis.call('ZREM', K_INFLIGHT, id)
j.owner, j.err = '', ARGV[3]
local maxatt, backoff = tonumber(m[2]), tonumber(m[3])
if j.key ~= '' then redis.call('ZREM', K_KRUNNING, kmember(j.key, id)) end
if maxatt > 0 and j.attempt >= maxatt then
  redis.call('RPUSH', K_DEAD, id)
  redis.call('HSET', K_JOBS, id, encode(j))
  if j.key ~= '' and oldest_keyed(K_KREADY, j.key) then wake(1) end
  return {2}
end
local now = now_us()
j.avail = now + backoff
j.part = j.part % P
if backoff > 0 then
  redis.call('ZADD', K_DELAYED, j.avail, id)
else
  redis.call('ZADD', ready_key(j.part), id, id)
end
if j.key ~= '' then redis.call('ZADD', K_KREADY, 0, kmember(j.key, id)) end
redis.call('HSET', K_JOBS, id, encode(j))
wake(1)
return {1}
`)

// queueExtendScript renews a lease (ExtendJob).
//
// KEYS: the fixed keys.
// ARGV: id, owner.
// When owner holds the job and its deadline has not passed, the deadline
// becomes now + visibility; it returns the new deadline µs, or 0 when the
// lease is lost (another owner, none, expired, or the queue is gone).
var queueExtendScript = queueScript(`
local vis = redis.call('HGET', K_META, 'vis')
if not vis then return 0 end
local id, owner = ARGV[1], ARGV[2]
local rec = redis.call('HGET', K_JOBS, id)
if not rec then return 0 end
local j = decode(rec)
if j.owner == '' or j.owner ~= owner then return 0 end
local now = now_us()
local exp = redis.call('ZSCORE', K_INFLIGHT, id)
if not exp or tonumber(exp) <= now then return 0 end
local deadline = now + tonumber(vis)
redis.call('ZADD', K_INFLIGHT, 'XX', deadline, id)
return deadline
`)

// queueDeadScript lists dead jobs (Dead). It writes nothing.
//
// KEYS: the fixed keys.
// ARGV: the most to list (<= 0: all).
// It returns the fields of queueJobFields for each, in the dead list's
// order: the order in which they died, oldest first.
var queueDeadScript = queueScript(`
local limit = tonumber(ARGV[1])
local ids = redis.call('LRANGE', K_DEAD, 0, limit > 0 and limit - 1 or -1)
local out = {}
if #ids == 0 then return out end
for i = 1, #ids, 500 do
  local part = {unpack(ids, i, math.min(i + 499, #ids))}
  local recs = redis.call('HMGET', K_JOBS, unpack(part))
  local pays = redis.call('HMGET', K_PAYLOADS, unpack(part))
  for k, id in ipairs(part) do
    if recs[k] then
      local j = decode(recs[k])
      local n = #out
      out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5], out[n + 6], out[n + 7], out[n + 8] =
        tonumber(id), j.part, j.attempt, j.enq, j.avail, j.key, j.err, pays[k] or ''
    end
  end
end
return out
`)

// queueRequeueDeadScript makes every dead job ready again (RequeueDead).
//
// KEYS: the fixed keys, then the ready sets of all partitions.
// ARGV: none.
// Each dead job gets its attempts reset and available_at now, and goes
// back to its partition's ready set (% P), where its id keeps its place;
// last_error is kept as the record of why it died. Wake elements are
// pushed. It returns {1, n}, {0} or {-1, P}.
var queueRequeueDeadScript = queueScript(`
local m = redis.call('HMGET', K_META, 'partitions')
if not m[1] then return {0} end
local P = tonumber(m[1])
if NLISTS ~= P then return {-1, P} end
local ids = redis.call('LRANGE', K_DEAD, 0, -1)
local now = now_us()
local n = 0
for i = 1, #ids, 500 do
  local part = {unpack(ids, i, math.min(i + 499, #ids))}
  local recs = redis.call('HMGET', K_JOBS, unpack(part))
  for k, id in ipairs(part) do
    if recs[k] then
      local j = decode(recs[k])
      j.attempt, j.avail, j.owner, j.part = 0, now, '', j.part % P
      redis.call('HSET', K_JOBS, id, encode(j))
      redis.call('ZADD', ready_key(j.part), id, id)
      if j.key ~= '' then redis.call('ZADD', K_KREADY, 0, kmember(j.key, id)) end
      n = n + 1
    end
  end
end
redis.call('DEL', K_DEAD)
wake(n)
return {1, n}
`)

// queuePurgeDeadScript deletes every dead job (PurgeDead).
//
// KEYS: the fixed keys.
// ARGV: none.
// It returns the number deleted.
var queuePurgeDeadScript = queueScript(`
local ids = redis.call('LRANGE', K_DEAD, 0, -1)
if #ids == 0 then return 0 end
each_chunk('HDEL', K_JOBS, ids)
each_chunk('HDEL', K_PAYLOADS, ids)
redis.call('DEL', K_DEAD)
return #ids
`)

// queueJobFields is the number of fields a script returns per job: id,
// partition, attempt, enqueued_at µs, available_at µs, key, last_error,
// payload.
const queueJobFields = 8
