-- queue_claim.lua sweeps and claims (Claim, and WaitQueue's look).
--
-- KEYS: the fixed keys, then the ready sets of all partitions.
-- ARGV: the number of members n, then per member its owner and its max.
--
-- First it moves up to SWEEP_MAX due delayed jobs into their ready
-- sets, then returns up to SWEEP_MAX in-flight jobs whose lease
-- deadline passed (score <= now) to their ready sets, or to the dead list
-- when they used max_attempts attempts (<= 0: unlimited), with last_error
-- 'visibility timeout' and the owner cleared: a late ack, retry or extend
-- by that owner then finds another owner (or none) and is refused. A job
-- whose partition no longer exists (PutQueue shrank the queue while it was
-- delayed or in flight) goes to partition % P.
--
-- A job keeps its priority through both moves (its record holds it, and
-- ready_score scores it again).
--
-- Then it reads the ready sets merged in claim order, the highest priority
-- first and within one priority in id (push) order, whatever the partition
-- (each set is scored by ready_score, lib/queue.lua, so the merge goes by
-- lowest score; a chunk of a set at a time, read with its scores after the
-- last score read, the set's share of the claim first, then twice the last
-- up to 1024 ids), and each member in turn takes up to its max claimable
-- jobs from that one stream, in that order. A job without a key is
-- claimable; a job with a key only while krunning has no job of its key
-- and it is the oldest job of its key in kready (which holds delayed ones
-- too, in id order whatever the priority): the jobs of one key run one at
-- a time in push order, a higher priority never lets one overtake an older
-- one of its key, and a claim takes at most one of them (taking it moves
-- it to krunning). Jobs passed over stay in their sets. Each job taken is
-- leased to the member's owner until now + visibility, counting an
-- attempt.
--
-- It returns {1, now, visibility µs, empty, next, then per member: count,
-- then count times a job's fields (lib/queue.lua), in claim order}. empty
-- is 1 when no job was claimable, in which case the wake list was deleted
-- (anything that may make a job claimable later pushes a new element: a
-- push, a retry, an ack or death of a job with a key, a return, a
-- requeue) and next is the earliest of the first delayed job's
-- available_at, the first lease deadline and now + visibility (no lease
-- taken later can expire sooner), the instant until which an idle worker
-- may block; otherwise empty is 0 and next -1. With no member (n = 0) it only sweeps and looks.
--#include lib/queue.lua
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
      redis.call('ZADD', ready_key(p), ready_score(id, j.prio), id)
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
        j.avail = now -- its time of death
        redis.call('RPUSH', K_DEAD, id)
      else
        j.part = j.part % P
        redis.call('ZADD', ready_key(j.part), ready_score(id, j.prio), id)
        if j.key ~= '' then redis.call('ZADD', K_KREADY, 0, kmember(j.key, id)) end
      end
      redis.call('HSET', K_JOBS, id, encode(j))
    end
  end
end

-- The candidates: per set, a chunk of members with their scores after
-- the last score read (scores are unique, as ids are). The first chunk is
-- the set's share of the claim (the members' max summed, over P: keyless
-- jobs go round robin), each further one of a set twice the last, up to
-- 1024 ids (the chunk bound, written out below).
local members = tonumber(ARGV[1])
local need = 1
for k = 1, members do need = need + tonumber(ARGV[2 * k + 1]) end
-- ids[p] is set p's chunk as ZRANGEBYSCORE WITHSCORES gives it (member,
-- score, member, ...), at[p] the index of its next member.
local ids, size, at, last, ended, headn = {}, {}, {}, {}, {}, {}
-- peek returns the next score of set p as a number (headn[p]), or nil.
local function peek(p)
  if ended[p] then return nil end
  if not ids[p] or at[p] > #ids[p] then
    local from = '-inf'
    if last[p] then from = '(' .. last[p] end
    size[p] = math.min(size[p] and 2 * size[p] or math.ceil(need / P) + 1, 1024)
    local c = redis.call('ZRANGEBYSCORE', ready_key(p), from, '+inf', 'WITHSCORES', 'LIMIT', 0, size[p])
    if #c == 0 then
      ended[p] = true
      return nil
    end
    ids[p], at[p], headn[p] = c, 1, nil
  end
  if not headn[p] then headn[p] = tonumber(ids[p][at[p] + 1]) end
  return headn[p]
end
-- next_candidate pops the lowest score of all sets: the id and its set.
local function next_candidate()
  local bestn, bp = nil, nil
  for p = 0, P - 1 do
    local n = peek(p)
    if n and (not bestn or n < bestn) then bestn, bp = n, p end
  end
  if not bp then return nil end
  local i = at[bp]
  last[bp], at[bp], headn[bp] = ids[bp][i + 1], i + 2, nil
  return ids[bp][i], bp
end
-- free reports whether a job of key may start, as far as the key goes: no
-- job of its key runs and it is its key's oldest in kready. A key found
-- busy stays busy for the rest of the script (a job taken here makes its
-- key busy); a key's oldest job is looked up once (oldest, false for none)
-- and stays the one that may start, since the stream comes in priority
-- order, not id order: a newer job of the key may come before it.
local busy, oldest = {}, {}
local function free(id, key)
  if key == '' then return true end
  if busy[key] then return false end
  local o = oldest[key]
  if o == nil then
    if oldest_keyed(K_KRUNNING, key) then
      busy[key] = true
      return false
    end
    o = oldest_keyed(K_KREADY, key) or false
    oldest[key] = o
  end
  return not o or tonumber(o) == tonumber(id)
end
-- take returns the next claimable job (id, set, decoded record), or nil.
-- It reads the candidates' records in batches (HMGET): the claim's size
-- first, then twice the last batch, up to the chunk bound.
local cids, cps, crecs, bi, bsize = {}, {}, {}, 1, nil
local function take()
  while true do
    if bi > #cids then
      bsize = math.min(bsize and 2 * bsize or need, 1024)
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
      out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5], out[n + 6], out[n + 7], out[n + 8] =
        tonumber(id), p, j.attempt, j.enq, j.avail, j.key, j.err, j.prio
      out[n + 9] = false -- the payload, below
      n = n + 9
    end
  end
  out[countAt] = #taken
  if #taken > 0 then
    popped = true
    local pays = redis.call('HMGET', K_PAYLOADS, unpack(taken))
    for i = 1, #taken do out[countAt + 9 * i] = pays[i] or '' end
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
