-- lib/queue_bands.lua defines ready_bands(z), the runs of ready set z in
-- id order, for the readers that list ready jobs by id rather than in claim
-- order (queue_jobs_page.lua, queue_observe.lua's oldest ready job).
--
-- A ready set is scored by ready_score (lib/queue.lua): the jobs of one
-- priority are one run of consecutive scores, in id order, and the runs
-- follow one another from the highest priority to the lowest. ready_bands
-- returns them in that order, one table per priority present: prio, first
-- (the run's first score, its lowest id's) and top (no score of the run is
-- above it, none of the next run at or below it), so that the run's ids
-- from x on are its scores from x - prio * PRIO_STEP up to top. It costs
-- one ZRANGEBYSCORE per priority present and one more (one and one for a
-- set of priority-0 jobs only).
--
-- A run is found from its first member m: its ids lie within HALF_STEP of
-- m (the ids of the jobs ready at once differ by less than that, see
-- lib/queue.lua), so it ends at top = m + HALF_STEP - prio * PRIO_STEP, and
-- the next starts above. Should that not hold, a run is cut short (the
-- order of a listing may then be off), but every member is still in some
-- run: top never falls below the member found.
local HALF_STEP = PRIO_STEP / 2

-- fmt writes an integral score in full (Lua's tostring keeps 14 digits).
local function fmt(x) return string.format('%d', x) end

local function ready_bands(z)
  local out, from = {}, '-inf'
  while true do
    local r = redis.call('ZRANGEBYSCORE', z, from, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    if not r[1] then return out end
    local sc = tonumber(r[2])
    local prio = score_priority(r[1], sc)
    local top = math.max(tonumber(r[1]) + HALF_STEP - prio * PRIO_STEP, sc)
    out[#out + 1] = {prio = prio, first = sc, top = top}
    from = '(' .. fmt(top)
  end
end
