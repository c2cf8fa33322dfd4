-- lib/queue.lua opens every queue script (queue_*.lua): every job moves
-- only inside one of them. They take the same KEYS:
--
--   KEYS[1..10]  the queue's fixed keys, in queueFixedKeys order:
--                meta, ids, jobs, payloads, inflight, delayed, dead,
--                kready, krunning, wake
--   KEYS[11..]   the ready sets of partitions 0, 1, ... (as many as the
--                script says it needs; none for the others)
--
-- A script that needs the ready sets checks that it got as many as the
-- queue has (the partition count, or for PutQueue, DeleteQueue and
-- ObserveQueues the span, see queue.go) and otherwise changes nothing and
-- returns {-1, n}, n being the number it needs: the caller builds the keys
-- again and runs it once more. A script that finds no meta hash returns
-- {0} (the queue is absent) unless it says otherwise.
--
-- Job ids are decimal strings in Lua (a Lua number converted by Redis could
-- be written in exponent form); they fit in a double exactly (< 2^53).
-- Times are microseconds of the server's clock (TIME).
-- A job comes back from a script as queueJobFields (queue_scripts.go)
-- fields: id, partition, attempt, enqueued_at µs, available_at µs, key,
-- last_error, priority, payload.
--
-- A ready set is scored by ready_score: id - priority * PRIO_STEP, so that
-- its order (lowest score first) is the claim order, the highest priority
-- first and within one priority the lowest id, and a priority-0 job's score
-- is its id (as every score was before priorities: such sets need no
-- migration). Ids start at the server's time in µs (queue_push.lua), about
-- 2^51 today, not at 0: the order holds while the ids of the jobs that are
-- ready at once differ by less than PRIO_STEP (2^45, some 35 million
-- million pushes), which the counter gives them, and the scores are exact
-- in a double while ids stay under ID_LIMIT = 2^53 - 100 * PRIO_STEP
-- (156 * 2^45, about 5.5e15: the server's clock in µs in the year 2143),
-- which queue_push.lua checks (spec.MaxPriority is 100). Scores are unique
-- because ids are, under the same condition. A member's priority is
-- (member - score) / PRIO_STEP, exactly (score_priority).
--
-- This file names the fixed keys and defines what the scripts share:
--
--   now_us()          the server's clock in microseconds
--   ready_key(p)      the ready set of partition p
--   decode, encode    a job record (the jobs hash value): cmsgpack of
--                     partition, attempt, enqueued_at, available_at, owner
--                     ('' unless in flight), key ('' for none), last_error,
--                     and once an attempt failed its attempt errors (the
--                     JSON array backends.AppendAttemptError writes), then
--                     the priority when it is not 0 (after false in place
--                     of the attempt errors when there are none); decode
--                     gives prio 0 when absent, hist nil when absent or
--                     false
--   ready_score       a job's score in its ready set (above)
--   score_priority    the priority of a ready-set member from its score
--   kprefix, kmember  members of the keyed indexes kready and krunning:
--                     the key's length (8 hex digits), the key, then the
--                     id (16 hex digits), so that ZRANGEBYLEX over the
--                     prefix lists a key's jobs, oldest first
--   oldest_keyed      the oldest job of a key in one index, or nil
--   wake(n)           pushes n wake elements, as many as fit under
--                     WAKE_MAX (the elements are all alike; a full
--                     list, where workers are busy, costs one LLEN)
--   each_chunk        calls a command with a long argument list in chunks
--                     (Lua's unpack has a stack limit)
local K_META, K_IDS, K_JOBS, K_PAYLOADS, K_INFLIGHT, K_DELAYED, K_DEAD, K_KREADY, K_KRUNNING, K_WAKE =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local NLISTS = #KEYS - 10
-- WAKE_MAX bounds the wake list: at most this many wake elements wait for
-- a blocked worker (see WaitQueue).
local WAKE_MAX = 64
-- SWEEP_MAX bounds the due delayed jobs and the expired leases one claim
-- moves back to the ready sets (each claim moves the next ones).
local SWEEP_MAX = 1000

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function ready_key(p) return KEYS[11 + p] end

-- PRIO_STEP is the score distance of one priority (lib comment above);
-- ID_LIMIT the first id queue_push.lua refuses to hand out.
local PRIO_STEP = 35184372088832 -- 2^45
local ID_LIMIT = 5488762045857792 -- 2^53 - 100 * 2^45

local function decode(m)
  local part, attempt, enq, avail, owner, key, err, hist, prio = cmsgpack.unpack(m)
  return {part = part, attempt = attempt, enq = enq, avail = avail, owner = owner, key = key, err = err,
    hist = hist or nil, prio = prio or 0}
end

local function encode(j)
  if j.prio and j.prio ~= 0 then
    return cmsgpack.pack(j.part, j.attempt, j.enq, j.avail, j.owner, j.key, j.err, j.hist or false, j.prio)
  end
  if j.hist then return cmsgpack.pack(j.part, j.attempt, j.enq, j.avail, j.owner, j.key, j.err, j.hist) end
  return cmsgpack.pack(j.part, j.attempt, j.enq, j.avail, j.owner, j.key, j.err)
end

-- ready_score is the score of job id (a decimal string) of priority prio
-- in its ready set: the id itself for priority 0.
local function ready_score(id, prio)
  if prio == 0 then return id end
  return tonumber(id) - prio * PRIO_STEP
end

-- score_priority is the priority of ready-set member id (a decimal string)
-- of score sc (a number).
local function score_priority(id, sc) return (tonumber(id) - sc) / PRIO_STEP end

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
