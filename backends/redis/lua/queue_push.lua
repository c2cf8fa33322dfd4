-- queue_push.lua enqueues a batch of jobs (Push; concurrent pushes of
-- one Store to one queue go together: queuePushBatch in queue_runtime.go).
--
-- KEYS: the fixed keys, then the ready sets of all partitions.
-- ARGV: the number of jobs n, then per job: payload, key (empty for none),
-- the key's partition (when a key is given), delay µs, priority; then, for
-- a push once (PushOnce: n is 1), the once key.
-- When every job is pushed (the common case) it returns {2, first, now,
-- P}: the jobs got the ids first, first+1, ... in batch order, were
-- enqueued at now and are available at now + their delay, a keyless job in
-- partition id % P and a keyed one in the partition it was given. Else it
-- returns {1, r1, ..., rn}, one reply per job: {1, id, partition,
-- enqueued_at, available_at}; {-2, size, max_payload} when the payload is
-- too large; {-3, <job>} when the queue is unique and the key is pending
-- (or running, under pending_or_running), <job> being the oldest such job
-- as lib/queue.lua lists its fields, followed by its expiry µs (0 unless in
-- flight) and owner. For the whole batch: {0} when the queue is absent;
-- {-1, partitions} when the ready sets do not match; {3, id} when the once
-- key was pushed before, as job id; {4, id} when the batch's last id would
-- be id >= ID_LIMIT (lib/queue.lua: its ready-set score might no longer be
-- exact), in which case nothing is pushed and the counter is put back. That
-- cannot happen before the year 2143 (the ids start at the server's time
-- in µs), short of a counter set behind coordd's back.
--
-- The jobs are pushed in order, each as if alone: a unique job later in
-- the batch finds an earlier one of its key. The checks come first; then
-- the ids come from one INCRBY and each key is written once for the whole
-- batch (a job costs its share of a few calls, not five calls of its
-- own). An INCRBY that finds the ids key missing (it returns the batch's
-- size) moves it to the server's time in µs first (the data-loss rule:
-- above any id it can have handed out before). A keyless job goes to
-- partition id % P (round robin); a job available now joins its ready set
-- (scored by ready_score: its priority, then its id), a delayed one the
-- delayed set; a keyed one enters the kready index (in id order, whatever
-- the priority: a key's jobs run in push order). A priority other than 0
-- is kept in the job's record (encode's layout). One
-- wake element is pushed per job either way: a worker woken by a delayed
-- job bounds its next wait by the job's available_at.
--#include lib/queue.lua
local m = redis.call('HMGET', K_META, 'partitions', 'unique', 'max_payload')
if not m[1] then return {0} end
local P = tonumber(m[1])
if NLISTS ~= P then return {-1, P} end
local maxp = tonumber(m[3] or '0') or 0
local uniq = m[2] == 'pending' or m[2] == 'pending_or_running'
local now = now_us()
local n = tonumber(ARGV[1])
local once = ARGV[2 + 5 * n]
if once then
  local got = redis.call('HGET', K_META, 'once:' .. once)
  if got then return {3, tonumber(string.match(got, '^(%d+)'))} end
end
local out, ok, first, dups = {1}, {}, {}, {}
-- The checks, each job as if pushed alone after the batch's earlier ones:
-- a unique job's key is looked up among the batch's earlier jobs (first),
-- else in the store (which the checks do not change).
for i = 0, n - 1 do
  local payload, key = ARGV[2 + 5 * i], ARGV[3 + 5 * i]
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
      out[i + 2] = {-3, best, j.part, j.attempt, j.enq, j.avail, j.key, j.err, j.prio,
        redis.call('HGET', K_PAYLOADS, best) or '', tonumber(exp or '0'), j.owner}
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
  if idn >= ID_LIMIT then
    redis.call('INCRBY', K_IDS, -#ok)
    return {4, idn}
  end
  idn = idn - #ok
  local recs, pays, delayed, kready, ready = {}, {}, {}, {}, {}
  for _, i in ipairs(ok) do
    idn = idn + 1
    local id = string.format('%d', idn)
    local key, delay, prio = ARGV[3 + 5 * i], tonumber(ARGV[5 + 5 * i]), tonumber(ARGV[6 + 5 * i])
    local part
    if key ~= '' then part = tonumber(ARGV[4 + 5 * i]) else part = idn % P end
    local avail = now + delay
    recs[#recs + 1] = id
    if prio == 0 then -- encode's layout
      recs[#recs + 1] = cmsgpack.pack(part, 0, now, avail, '', key, '')
    else
      recs[#recs + 1] = cmsgpack.pack(part, 0, now, avail, '', key, '', false, prio)
    end
    pays[#pays + 1] = id
    pays[#pays + 1] = ARGV[2 + 5 * i]
    if delay > 0 then
      delayed[#delayed + 1] = avail
      delayed[#delayed + 1] = id
    else
      local r = ready[part]
      if not r then r = {}; ready[part] = r end
      r[#r + 1] = ready_score(id, prio)
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
if once then
  local id
  if all then
    id = idn
  elseif out[2][1] == -3 then
    id = tonumber(out[2][2])
  end
  if id then
    redis.call('HSET', K_META, 'once:' .. once, string.format('%d:%d', id, now))
    local r = redis.call('HSCAN', K_META, redis.call('HGET', K_META, 'once_sweep') or '0', 'MATCH', 'once:*', 'COUNT', 20)
    for i = 1, #r[2], 2 do
      local at = tonumber(string.match(r[2][i + 1], ':(%d+)$'))
      if at and at < now - 604800000000 then redis.call('HDEL', K_META, r[2][i]) end
    end
    redis.call('HSET', K_META, 'once_sweep', r[1])
  end
end
if all then return {2, idn - n + 1, now, P} end
-- A duplicate of an earlier job of the batch gets that job, as pushed.
for _, d in ipairs(dups) do
  local i, j = d[1], d[2]
  local g = out[j + 2]
  out[i + 2] = {-3, g[2], g[3], 0, now, g[5], ARGV[3 + 5 * j], '', tonumber(ARGV[6 + 5 * j]), ARGV[2 + 5 * j], 0, ''}
end
return out
