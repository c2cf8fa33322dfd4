package redis

import goredis "github.com/redis/go-redis/v9"

// The cron scripts, with the Lua they share. Their keys are cronKeys'
// (cron_runtime.go), where the records they write are described.

// cronLuaNow sets now (a number) and nows (its text) to the server's TIME
// in microseconds.
const cronLuaNow = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local nows = string.format('%d', now)
`

// cronLuaTrim defines trim(k, name), which deletes task name's oldest
// finished records beyond its history limit (100 when the task is gone),
// with their output and their pending-retry entries; running records are
// never deleted. k holds the task's keys: occ (records), out (outputs),
// hist (history) and done (finished records). A record's text is JSON
// written by these scripts, so a status found as '"status":"succeeded"'
// is that field (a quote inside a string value is escaped); such a record
// was never a pending retry.
const cronLuaTrim = `
local function trim(k, name)
  local stop = -1 - tonumber(redis.call('HGET', KEYS[6], name) or '100')
  local ids = redis.call('ZRANGE', k.done, 0, stop)
  if #ids == 0 then return end
  for _, id in ipairs(ids) do
    local rec = redis.call('HGET', k.occ, id)
    if rec and not string.find(rec, '"status":"succeeded"', 1, true) and not string.find(rec, '"status":"skipped"', 1, true) then
      redis.call('ZREM', KEYS[5], rec)
    end
  end
  for i = 1, #ids, 1000 do
    local j = math.min(i + 999, #ids)
    redis.call('HDEL', k.occ, unpack(ids, i, j))
    redis.call('HDEL', k.out, unpack(ids, i, j))
    redis.call('ZREM', k.hist, unpack(ids, i, j))
  end
  redis.call('ZREMRANGEBYRANK', k.done, 0, stop)
end
`

// cronLuaTaskKeys is the task keys of the single-occurrence scripts
// (KEYS[7] to KEYS[10], see cronKeys), as trim takes them.
const cronLuaTaskKeys = `
local task = {occ = KEYS[7], out = KEYS[8], hist = KEYS[9], done = KEYS[10]}
`

// cronLuaPaused defines defPaused(def): whether a definition says
// paused: true. The definition is canonical JSON written by coordd, so
// the plain search finds the field when it is there (in a string value a
// quote is escaped); cjson then confirms it.
const cronLuaPaused = `
local function defPaused(def)
  if not string.find(def, '"paused":true', 1, true) then return false end
  return cjson.decode(def).paused == true
end
`

// cronLuaFinal defines failed(status): the statuses that make an attempt
// a pending retry.
const cronLuaFinal = `
local function failed(status)
  return status == 'failed' or status == 'timeout' or status == 'lost'
end
`

// cronClaimScript makes a batch of claims, in order, each in one atomic
// step: the compare-and-swap on next_exec (scheduled attempt 1), the check
// of the previous attempt (retries) or the choice of a free time (manual
// attempt 1), with Exclusive the check that no run of the task is live,
// the fencing number and the record, written with SET NX semantics on
// (task, scheduled_at, attempt). Nothing is written for a claim that is
// refused.
//
// The fencing counter follows the data-loss rule: when the task's counter
// is missing (a new task, a flush, a restart without persistence) it is
// first set to the server's TIME in µs, so the number handed out is above
// any the task held before (one claim per µs is far faster than claims
// come).
//
//	KEYS[1] to KEYS[6] as for every occurrence script (see cronKeys),
//	KEYS[7] the operators' pauses (hash: name -> pause JSON), then for
//	claim j (from 0) the task's records, outputs, history, finished and
//	running records at KEYS[8+5j] to KEYS[12+5j]
//	ARGV, 12 per claim, claim j's at ARGV[1+12j] on:
//	[1] task, [2] mode: "s" scheduled attempt 1, "r" a later attempt, "m"
//	manual attempt 1
//	[3] scheduled_at µs (mode m: ignored, backend now is used, moved a µs
//	at a time past an existing attempt 1 or the pending next_exec)
//	[4] next_exec µs after the claim ("" none; mode s only)
//	[5] attempt, [6] run id, [7] owner, [8] host
//	[9] manual ("1" or "0"), [10] lease µs
//	[11] skip reason ("" to run): the record is written as skipped and
//	finished, without a lease, and the history is trimmed
//	[12] exclusive ("1": refused while a run of the task is live)
//
// Returns one reply per claim: {0, fencing, scheduled_at µs, started µs,
// expires µs} when claimed, or {code}, a backends.ClaimRefusal: 1 the
// task is absent, 2 next_exec is no longer scheduled_at, 3 the attempt
// exists, 4 the previous attempt has not ended unsuccessfully, 5 no free
// time for a manual run, 6 a run of the task is live (exclusive), 7 the
// task is paused (by an operator, or by paused: true in its definition;
// every mode but m).
var cronClaimScript = goredis.NewScript(cronLuaNow + cronLuaTrim + cronLuaFinal + cronLuaPaused + `
local function claim(k, a)
  local name = a[1]
  local attempt = tonumber(a[5])
  local sched = a[3]
  local prev
  if a[2] ~= 'm' then
    local def = redis.call('HGET', KEYS[2], name)
    if not def then return {1} end
    if redis.call('HEXISTS', KEYS[7], name) == 1 or defPaused(def) then return {7} end
  end
  -- A task is in the schedule only while its definition exists (PutCron
  -- and DeleteCron write both), so a matching next_exec proves the task
  -- exists.
  if a[2] == 's' then
    local cur = redis.call('ZSCORE', KEYS[1], name)
    if not cur or tonumber(cur) ~= tonumber(sched) then
      if redis.call('HEXISTS', KEYS[2], name) == 0 then return {1} end
      return {2}
    end
  elseif redis.call('HEXISTS', KEYS[2], name) == 0 then
    return {1}
  elseif a[2] == 'r' then
    prev = redis.call('HGET', k.occ, sched .. ':' .. string.format('%d', attempt - 1))
    if not prev or not failed(cjson.decode(prev).status) then return {4} end
  else
    local nx = redis.call('ZSCORE', KEYS[1], name)
    nx = nx and tonumber(nx)
    sched = nil
    for s = now, now + 999 do
      local ss = string.format('%d', s)
      if nx ~= s and redis.call('HEXISTS', k.occ, ss .. ':1') == 0 then
        sched = ss
        break
      end
    end
    if not sched then return {5} end
  end
  local id = sched .. ':' .. a[5]
  if redis.call('HEXISTS', k.occ, id) == 1 then return {3} end
  if a[12] == '1' and a[11] == '' and #redis.call('ZRANGEBYSCORE', k.run, '(' .. nows, '+inf', 'LIMIT', 0, 1) > 0 then
    return {6}
  end

  -- A live counter is far above 1 (it starts at TIME in µs), so 1 means
  -- it was missing: recreate it above anything it held before.
  local fencing = redis.call('HINCRBY', KEYS[3], name, 1)
  if fencing == 1 then
    fencing = now + 1
    redis.call('HSET', KEYS[3], name, string.format('%d', fencing))
  end
  local fs = string.format('%d', fencing)
  local rec = {task = name, sched = sched, attempt = a[5], run_id = a[6], fencing = fs,
    manual = a[9] == '1', owner = a[7], host = a[8], started = nows}
  local exp = now
  if a[11] == '' then
    rec.status = 'running'
    exp = now + tonumber(a[10])
  else
    rec.status = 'skipped'
    rec.error = a[11]
    rec.exit_code = '0'
    rec.finished = nows
    rec.expires = nows
  end
  local text = cjson.encode(rec)
  redis.call('HSET', k.occ, id, text)
  redis.call('ZADD', k.hist, fencing, id)
  if a[2] == 's' then
    if a[4] == '' then
      redis.call('ZREM', KEYS[1], name)
    else
      redis.call('ZADD', KEYS[1], a[4], name)
    end
  end
  if prev then redis.call('ZREM', KEYS[5], prev) end
  if a[11] == '' then
    redis.call('ZADD', k.run, exp, id)
    redis.call('ZADD', KEYS[4], exp, text)
  else
    redis.call('ZADD', k.done, fencing, id)
    trim(k, name)
  end
  return {0, fencing, tonumber(sched), now, exp}
end

local out = {}
for j = 0, #ARGV / 12 - 1 do
  local b = 7 + 5 * j
  local k = {occ = KEYS[b + 1], out = KEYS[b + 2], hist = KEYS[b + 3], done = KEYS[b + 4], run = KEYS[b + 5]}
  out[j + 1] = claim(k, {unpack(ARGV, 1 + 12 * j, 12 + 12 * j)})
end
return out
`)

// cronExtendManyScript renews a batch of run leases, each only for its
// owner, only while the run is running and its lease unexpired.
//
//	KEYS[1] the leases, then for extension j (from 0) the task's records
//	and running records at KEYS[2+2j] and KEYS[3+2j]
//	ARGV, 3 per extension, extension j's at ARGV[1+3j] on: [1] id,
//	[2] owner, [3] lease µs
//
// Returns one number per extension: the new expiry in µs, or 0 when its
// owner does not hold the run.
var cronExtendManyScript = goredis.NewScript(cronLuaNow + `
local out = {}
for j = 0, #ARGV / 3 - 1 do
  local occ, run = KEYS[2 + 2 * j], KEYS[3 + 2 * j]
  local id, owner, lease = ARGV[1 + 3 * j], ARGV[2 + 3 * j], ARGV[3 + 3 * j]
  local res = 0
  local text = redis.call('HGET', occ, id)
  if text then
    local rec = cjson.decode(text)
    local exp = tonumber(redis.call('ZSCORE', run, id) or '0')
    if rec.status == 'running' and rec.owner == owner and exp > now then
      res = now + tonumber(lease)
      redis.call('ZADD', run, res, id)
      redis.call('ZADD', KEYS[1], res, text)
    end
  end
  out[j + 1] = res
end
return out
`)

// cronFinishScript records the results of runs still running under their
// owners (expired or not, as long as nobody reaped them), moves each from
// the running sets to the finished one (and to the pending retries when it
// failed), and trims its task's history.
//
//	KEYS[1] to KEYS[6] as for every occurrence script (see cronKeys), then
//	for finish j (from 0) the task's records, outputs, history, finished
//	and running records at KEYS[7+5j] to KEYS[11+5j]
//	ARGV, 7 per finish, finish j's at ARGV[1+7j] on: [1] task, [2] id,
//	[3] owner, [4] status, [5] exit code, [6] error, [7] output
//
// Returns one number per finish: 1 when recorded, 0 when its owner does
// not hold the run.
var cronFinishScript = goredis.NewScript(cronLuaNow + cronLuaTrim + cronLuaFinal + `
local function finish(k, a)
  local old = redis.call('HGET', k.occ, a[2])
  if not old then return 0 end
  local rec = cjson.decode(old)
  if rec.status ~= 'running' or rec.owner ~= a[3] then return 0 end
  local exp = tonumber(redis.call('ZSCORE', k.run, a[2]) or nows)
  rec.status = a[4]
  rec.exit_code = a[5]
  if a[6] ~= '' then rec.error = a[6] end
  rec.finished = nows
  rec.expires = string.format('%d', exp)
  local text = cjson.encode(rec)
  redis.call('HSET', k.occ, a[2], text)
  if a[7] ~= '' then redis.call('HSET', k.out, a[2], a[7]) end
  redis.call('ZREM', k.run, a[2])
  redis.call('ZREM', KEYS[4], old)
  redis.call('ZADD', k.done, rec.fencing, a[2])
  if failed(a[4]) then redis.call('ZADD', KEYS[5], now, text) end
  trim(k, a[1])
  return 1
end

local out = {}
for j = 0, #ARGV / 7 - 1 do
  local b = 6 + 5 * j
  local k = {occ = KEYS[b + 1], out = KEYS[b + 2], hist = KEYS[b + 3], done = KEYS[b + 4], run = KEYS[b + 5]}
  out[j + 1] = finish(k, {unpack(ARGV, 1 + 7 * j, 7 + 7 * j)})
end
return out
`)

// cronReapScript marks a running occurrence whose lease expired as lost
// and trims the task's history; like FinishOccurrence, with the result the
// host could not give.
//
//	KEYS as for every occurrence script (see cronKeys)
//	ARGV[1] task, ARGV[2] id
//
// Returns 1 when reaped, 0 when it was not running with an expired lease.
var cronReapScript = goredis.NewScript(cronLuaNow + cronLuaTrim + cronLuaTaskKeys + `
local old = redis.call('HGET', KEYS[7], ARGV[2])
if not old then return 0 end
local rec = cjson.decode(old)
if rec.status ~= 'running' then return 0 end
local exp = tonumber(redis.call('ZSCORE', KEYS[11], ARGV[2]) or '0')
if exp > now then return 0 end
rec.status = 'lost'
rec.exit_code = '0'
rec.error = 'run lease expired: host lost'
rec.finished = nows
rec.expires = string.format('%d', exp)
local text = cjson.encode(rec)
redis.call('HSET', KEYS[7], ARGV[2], text)
redis.call('ZREM', KEYS[11], ARGV[2])
redis.call('ZREM', KEYS[4], old)
redis.call('ZADD', KEYS[10], rec.fencing, ARGV[2])
redis.call('ZADD', KEYS[5], now, text)
trim(task, ARGV[1])
return 1
`)

// cronDueScript lists due tasks that are not paused and the earliest
// future next_exec at one instant (read-only). Paused tasks keep their
// next_exec in the schedule and are skipped a page at a time, so that
// they never take the place of a due task within the limit; the earliest
// future next_exec may be a paused task's (one wake-up for nothing).
//
//	KEYS[1] the schedule, KEYS[2] the definitions, KEYS[3] the operators'
//	pauses
//	ARGV[1] limit (0: all)
//
// Returns {{name, def, next_exec µs, ...}, earliest future next_exec µs or
// ""}.
var cronDueScript = goredis.NewScript(cronLuaNow + cronLuaPaused + `
local limit = tonumber(ARGV[1])
local page = 100
if limit > 0 then page = limit end
local out = {}
local n, off = 0, 0
while limit == 0 or n < limit do
  local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', nows, 'WITHSCORES', 'LIMIT', off, page)
  if #due == 0 then break end
  off = off + #due / 2
  for i = 1, #due, 2 do
    local def = redis.call('HGET', KEYS[2], due[i])
    if def and redis.call('HEXISTS', KEYS[3], due[i]) == 0 and not defPaused(def) then
      out[#out + 1] = due[i]
      out[#out + 1] = def
      out[#out + 1] = due[i + 1]
      n = n + 1
      if n == limit then break end
    end
  end
end
local later = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. nows, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
return {out, later[2] or ''}
`)

// cronExpiredScript lists running records whose lease expired, the
// longest expired first (read-only).
//
//	KEYS[1] the leases
//	ARGV[1] limit (0: all)
//
// Returns {record, expiry µs, ...}.
var cronExpiredScript = goredis.NewScript(cronLuaNow + `
if tonumber(ARGV[1]) > 0 then
  return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', nows, 'WITHSCORES', 'LIMIT', 0, ARGV[1])
end
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', nows, 'WITHSCORES')
`)

// cronRunningScript lists a task's records whose lease is live
// (read-only).
//
//	KEYS[1] the task's records, KEYS[2] the task's running records
//
// Returns {record, expiry µs, ...}.
var cronRunningScript = goredis.NewScript(cronLuaNow + `
local run = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. nows, '+inf', 'WITHSCORES')
local out = {}
for i = 1, #run, 2 do
  local rec = redis.call('HGET', KEYS[1], run[i])
  if rec then
    out[#out + 1] = rec
    out[#out + 1] = run[i + 1]
  end
end
return out
`)

// cronHistoryScript lists a task's records newest first, with their
// output and, for running ones, their lease (read-only).
//
//	KEYS[1] the task's records, KEYS[2] its outputs, KEYS[3] its history,
//	KEYS[4] its running records
//	ARGV[1] limit (0: all)
//
// Returns {record, output or "", lease µs or "", ...}.
var cronHistoryScript = goredis.NewScript(`
local ids = redis.call('ZREVRANGE', KEYS[3], 0, tonumber(ARGV[1]) - 1)
local out = {}
for _, id in ipairs(ids) do
  local rec = redis.call('HGET', KEYS[1], id)
  if rec then
    out[#out + 1] = rec
    out[#out + 1] = redis.call('HGET', KEYS[2], id) or ''
    out[#out + 1] = redis.call('ZSCORE', KEYS[4], id) or ''
  end
end
return out
`)
