-- cron_claim.lua makes a batch of claims, in order, each in one atomic
-- step: the compare-and-swap on next_exec (scheduled attempt 1), the check
-- of the previous attempt (retries) or the choice of a free time (manual
-- attempt 1), with Exclusive the check that no run of the task is live,
-- the fencing number and the record, written with SET NX semantics on
-- (task, scheduled_at, attempt). Nothing is written for a claim that is
-- refused.
--
-- The fencing counter follows the data-loss rule: when the task's counter
-- is missing (a new task, a flush, a restart without persistence) it is
-- first set to the server's TIME in µs, so the number handed out is above
-- any the task held before (one claim per µs is far faster than claims
-- come).
--
--   KEYS[1] to KEYS[6] as for every occurrence script (see cronKeys in
--   cron_runtime.go),
--   KEYS[7] the operators' pauses (hash: name -> pause JSON), then for
--   claim j (from 0) the task's records, outputs, history, finished and
--   running records at KEYS[8+5j] to KEYS[12+5j]
--   ARGV, 12 per claim, claim j's at ARGV[1+12j] on:
--   [1] task, [2] mode: "s" scheduled attempt 1, "r" a later attempt, "m"
--   manual attempt 1
--   [3] scheduled_at µs (mode m: ignored, backend now is used, moved a µs
--   at a time past an existing attempt 1 or the pending next_exec)
--   [4] next_exec µs after the claim ("" none; mode s only)
--   [5] attempt, [6] run id, [7] owner, [8] host
--   [9] manual ("1" or "0"), [10] lease µs
--   [11] skip reason ("" to run): the record is written as skipped and
--   finished, without a lease, and the history is trimmed
--   [12] exclusive ("1": refused while a run of the task is live)
--
-- Returns one reply per claim: {0, fencing, scheduled_at µs, started µs,
-- expires µs} when claimed, or {code}, a backends.ClaimRefusal: 1 the
-- task is absent, 2 next_exec is no longer scheduled_at, 3 the attempt
-- exists, 4 the previous attempt has not ended unsuccessfully, 5 no free
-- time for a manual run, 6 a run of the task is live (exclusive), 7 the
-- task is paused (by an operator, or by paused: true in its definition;
-- every mode but m).
--#include lib/cron_now.lua
--#include lib/cron_trim.lua
--#include lib/cron_final.lua
--#include lib/cron_paused.lua
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
