-- lib/inst_owned.lua finds ARGV[2]'s slot and expiry while its index entry
-- matches the slot's lease (as owned in lib/sem.lua), else drops the stale
-- entry and sets slot to nil.
local oi = 'o:' .. ARGV[2]
local slot, score
local v = redis.call('HGET', K_HOLD, oi)
if v then
  local s, e = string.match(v, '^(%d+) (%d+)$')
  local sc = s and redis.call('ZSCORE', K_EXP, s)
  if sc and tonumber(sc) == tonumber(e) then
    slot, score = s, tonumber(sc)
  else
    redis.call('HDEL', K_HOLD, oi)
  end
end
