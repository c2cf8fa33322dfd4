-- queue_jobs_page.lua lists one page of a queue's jobs in one state (the
-- queue browser: JobsPage). It writes nothing.
--
-- KEYS: the fixed keys, then (for state ready) the ready sets of
-- partitions 0..n-1, n at least the stored span; the other states read
-- none.
-- ARGV: state (ready, delayed, running or dead), key ('' for every job),
-- offset, limit, cut.
-- It returns {1, then per job the fields of lib/queue_browse.lua's browse
-- (queueBrowseFields)}, the first offset jobs of the state's order (of the
-- key's jobs, with a key) skipped and at most limit listed: ready jobs in
-- id (push) order whatever their priority, not in claim order, the ready
-- sets merged, each with the partition of the set that holds it; delayed
-- ones by available_at then id; in-flight ones by lease deadline then id,
-- with their deadline; dead ones in the dead list's order (Dead's). {1} alone when the queue is absent; {-1, n} when the
-- state is ready and it got too few ready sets.
--
-- Every read is bounded by the page or by the jobs of the key: the offset
-- into the ready sets is found by bisecting ids (ZCOUNT per run of one
-- priority of each set, lib/queue_bands.lua), a key's ready and in-flight
-- jobs come from kready and krunning, its delayed jobs from kready or from
-- the delayed set, whichever is smaller, its dead ones from the dead list,
-- read in chunks up to the page's last one.
--#include lib/queue.lua
--#include lib/queue_partial.lua
--#include lib/queue_ready_set.lua
--#include lib/queue_browse.lua
--#include lib/queue_bands.lua
local m = redis.call('HMGET', K_META, 'span', 'partitions')
if not m[2] then return {1} end
local state, key = ARGV[1], ARGV[2]
local off, lim, cut = math.max(tonumber(ARGV[3]), 0), tonumber(ARGV[4]), tonumber(ARGV[5])
local S = span_of({span = m[1], partitions = m[2]})
if state == 'ready' and NLISTS < S then return {-1, S} end
local out = {1}
if lim <= 0 then return out end
local CHUNK = 500

-- A job of a sorted list below is {score, id as a number, id}: by_score_id
-- orders them (a sorted set orders equal scores by member, as strings).
local function by_score_id(a, b)
  if a[1] ~= b[1] then return a[1] < b[1] end
  return a[2] < b[2]
end

-- emit adds the jobs got[from..from+lim-1] to out; part(j) is the partition
-- to report (nil: the record's) and exp(j) the lease deadline.
local function emit(got, from, part, exp)
  for i = from, math.min(from + lim - 1, #got) do
    local j = got[i]
    local rec = redis.call('HGET', K_JOBS, j[3])
    if rec then browse(out, j[3], rec, cut, part and part(j), exp and exp(j)) end
  end
end

-- zpage returns the jobs of ranks off..off+lim-1 of sorted set z in
-- (score, id) order, and the index in it of the first. The ranks come from
-- the set's own order, which may differ within a score; the whole groups
-- of the first and last scores are read and sorted so that the page is cut
-- in (score, id) order.
local function zpage(z)
  local w = redis.call('ZRANGE', z, off, off + lim - 1, 'WITHSCORES')
  if #w == 0 then return {}, 1 end
  local before = redis.call('ZCOUNT', z, '-inf', '(' .. w[2])
  local all = redis.call('ZRANGEBYSCORE', z, w[2], w[#w], 'WITHSCORES')
  local got = {}
  for i = 1, #all, 2 do got[#got + 1] = {tonumber(all[i + 1]), tonumber(all[i]), all[i]} end
  table.sort(got, by_score_id)
  return got, off - before + 1
end

-- each_keyed calls fn(id) for each job of key in index (kready or
-- krunning), oldest first, until fn returns true.
local function each_keyed(index, fn)
  local p = kprefix(key)
  local from, to = '[' .. p, '(' .. p .. '\255'
  while true do
    local c = redis.call('ZRANGEBYLEX', index, from, to, 'LIMIT', 0, CHUNK)
    for _, mb in ipairs(c) do
      if fn(string.format('%d', tonumber(string.sub(mb, #p + 1), 16))) then return end
    end
    if #c < CHUNK then return end
    from = '(' .. c[#c]
  end
end

-- scored returns key's jobs of index whose score in z (delayed or
-- inflight) exists, sorted by (score, id).
local function scored(index, z)
  local got = {}
  each_keyed(index, function(id)
    local sc = redis.call('ZSCORE', z, id)
    if sc then got[#got + 1] = {tonumber(sc), tonumber(id), id} end
  end)
  table.sort(got, by_score_id)
  return got
end

-- key_of returns the key of job record rec.
local function key_of(rec)
  local _, _, _, _, _, k = cmsgpack.unpack(rec)
  return k
end

local function part_of(j) return j[4] end
local function score_of(j) return j[1] end

if state == 'ready' and key == '' then
  -- The runs of one priority of every set, each in id order (a run's ids
  -- from x on are its scores from x - prio * PRIO_STEP to its top). The id
  -- of rank off in the merged runs: the least x with more than off ids <=
  -- x, bisected between the least and the greatest id.
  local runs, total, lo, hi = {}, 0, nil, nil
  for p = 0, S - 1 do
    local z = ready_key(p)
    local n = redis.call('ZCARD', z)
    if n > 0 then
      total = total + n
      for _, r in ipairs(ready_bands(z)) do
        r.z, r.p, r.shift = z, p, r.prio * PRIO_STEP
        runs[#runs + 1] = r
        local f = r.first + r.shift
        local l = tonumber(redis.call('ZREVRANGEBYSCORE', z, fmt(r.top), fmt(r.first), 'LIMIT', 0, 1)[1])
        if not lo or f < lo then lo = f end
        if not hi or l > hi then hi = l end
      end
    end
  end
  if off >= total then return out end
  local from = lo
  if off > 0 then
    local a, b = lo - 1, hi -- at most off ids <= a, more than off <= b
    while b - a > 1 do
      local mid = a + math.floor((b - a) / 2) -- a + b may not be exact
      local c = 0
      for _, r in ipairs(runs) do
        local to = math.min(mid - r.shift, r.top)
        if to >= r.first then c = c + redis.call('ZCOUNT', r.z, fmt(r.first), fmt(to)) end
      end
      if c > off then b = mid else a = mid end
    end
    from = b
  end
  local got = {}
  for _, r in ipairs(runs) do
    local s = math.max(from - r.shift, r.first)
    for _, id in ipairs(redis.call('ZRANGEBYSCORE', r.z, fmt(s), fmt(r.top), 'LIMIT', 0, lim)) do
      got[#got + 1] = {0, tonumber(id), id, r.p}
    end
  end
  table.sort(got, by_score_id)
  emit(got, 1, part_of)
elseif state == 'ready' then
  -- kready holds the key's ready and delayed jobs, in id order.
  local got, seen = {}, 0
  each_keyed(K_KREADY, function(id)
    if not redis.call('ZSCORE', K_DELAYED, id) then
      seen = seen + 1
      if seen > off then
        local rec = redis.call('HGET', K_JOBS, id)
        local p = rec and ready_set_of(id, decode(rec).part)
        if p then got[#got + 1] = {0, tonumber(id), id, p} end
      end
    end
    return #got >= lim
  end)
  emit(got, 1, part_of)
elseif state == 'delayed' and key == '' then
  local got, from = zpage(K_DELAYED)
  emit(got, from)
elseif state == 'delayed' then
  local p = kprefix(key)
  if redis.call('ZLEXCOUNT', K_KREADY, '[' .. p, '(' .. p .. '\255') <= redis.call('ZCARD', K_DELAYED) then
    emit(scored(K_KREADY, K_DELAYED), off + 1)
  else
    -- The delayed set in its order, a chunk at a time, keeping the key's
    -- jobs, up to the page's last one and the rest of its score's group.
    local got, i, bound = {}, 0, nil
    while true do
      local c = redis.call('ZRANGE', K_DELAYED, i, i + CHUNK - 1, 'WITHSCORES')
      if #c == 0 then break end
      local ids = {}
      for k = 1, #c, 2 do ids[#ids + 1] = c[k] end
      local recs = redis.call('HMGET', K_JOBS, unpack(ids))
      local stop = false
      for k, id in ipairs(ids) do
        local sc = tonumber(c[2 * k])
        if bound and sc > bound then
          stop = true
          break
        end
        if recs[k] and key_of(recs[k]) == key then
          got[#got + 1] = {sc, tonumber(id), id}
          if not bound and #got >= off + lim then bound = sc end
        end
      end
      if stop or #ids < CHUNK then break end
      i = i + CHUNK
    end
    table.sort(got, by_score_id)
    emit(got, off + 1)
  end
elseif state == 'running' and key == '' then
  local got, from = zpage(K_INFLIGHT)
  emit(got, from, nil, score_of)
elseif state == 'running' then
  emit(scored(K_KRUNNING, K_INFLIGHT), off + 1, nil, score_of)
elseif state == 'dead' and key == '' then
  for _, id in ipairs(redis.call('LRANGE', K_DEAD, off, off + lim - 1)) do
    local rec = redis.call('HGET', K_JOBS, id)
    if rec then browse(out, id, rec, cut) end
  end
elseif state == 'dead' then
  local seen, n, i = 0, 0, 0
  while n < lim do
    local ids = redis.call('LRANGE', K_DEAD, i, i + CHUNK - 1)
    if #ids == 0 then break end
    local recs = redis.call('HMGET', K_JOBS, unpack(ids))
    for k, id in ipairs(ids) do
      if recs[k] and key_of(recs[k]) == key then
        seen = seen + 1
        if seen > off and n < lim then
          browse(out, id, recs[k], cut)
          n = n + 1
        end
      end
    end
    if #ids < CHUNK then break end
    i = i + CHUNK
  end
end
return out
