-- rate_take.lua takes up to n permits of a rate limit by the GCRA
-- (TakePermit), with the server's clock.
--
-- KEYS: the limit's hash: its config (iv: interval µs, burst, keyed), the
-- theoretical arrival time (TAT, µs) of the unkeyed limit in field tat and
-- of each key of a keyed one in field k:<key>, and sweep, the cursor of
-- the sweep of idle keys.
-- ARGV: the key ('' for an unkeyed limit), n.
-- With base = max(TAT, now) and tol = (burst - 1) x iv, permits are due
-- when base - now <= tol, 1 + (tol - (base - now)) / iv of them; min(n,
-- that) are granted and the TAT moves by iv for each. A refusal writes
-- nothing. A permit is TIME, one HMGET and one HSET, whatever the key.
-- A key's field whose TAT has passed grants what an absent one does: each
-- new key sweeps a few fields on from the last sweep and deletes those
-- idle for a minute, so idle keys do not pile up (and a key in use now and
-- then is not deleted and re-created each time).
-- Replies: {granted, remaining} granted; {0, retry_after_µs} refused;
-- {-1} no such limit; {-2, keyed} the key does not match the limit.
local f = 'tat'
if ARGV[1] ~= '' then f = 'k:' .. ARGV[1] end
local cfg = redis.call('HMGET', KEYS[1], 'iv', 'burst', 'keyed', f)
if not cfg[1] then return {-1} end
local keyed = cfg[3] == '1'
if keyed ~= (ARGV[1] ~= '') then
  if keyed then return {-2, 1} end
  return {-2, 0}
end
local iv = tonumber(cfg[1])
local tol = (tonumber(cfg[2]) - 1) * iv
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat = tonumber(cfg[4] or '0')
local base = math.max(tat, now)
if base - now > tol then return {0, base - now - tol} end
local k = math.min(tonumber(ARGV[2]), math.floor((tol - (base - now)) / iv) + 1)
local nt = base + k * iv
redis.call('HSET', KEYS[1], f, string.format('%d', nt))
if keyed and not cfg[4] then
  local r = redis.call('HSCAN', KEYS[1], redis.call('HGET', KEYS[1], 'sweep') or '0', 'MATCH', 'k:*', 'COUNT', 20)
  local fs = r[2]
  for i = 1, #fs, 2 do
    if tonumber(fs[i + 1]) < now - 60000000 then redis.call('HDEL', KEYS[1], fs[i]) end
  end
  redis.call('HSET', KEYS[1], 'sweep', r[1])
end
return {k, math.floor((tol - (nt - now) + iv) / iv)}
