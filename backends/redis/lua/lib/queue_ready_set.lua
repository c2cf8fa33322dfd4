-- lib/queue_ready_set.lua defines ready_set_of(id, part), the partition
-- whose ready set holds job id, or nil when none of the sets the script
-- got holds it (the job is delayed, in flight, dead or gone). A job is
-- looked for first in the set of its record's partition, then in every
-- set: PutQueue moves the jobs of a removed partition into another set
-- without rewriting their records.
local function ready_set_of(id, part)
  if part and part >= 0 and part < NLISTS and redis.call('ZSCORE', ready_key(part), id) then return part end
  for p = 0, NLISTS - 1 do
    if p ~= part and redis.call('ZSCORE', ready_key(p), id) then return p end
  end
  return nil
end
