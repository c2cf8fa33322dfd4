-- rate_take.lua takes up to n permits of a rate limit by the GCRA
-- (TakePermit), with the server's clock.
--
-- KEYS: the limit's config hash (iv: interval µs, burst, keyed), the
-- record of the limit or of the key (a string: the theoretical arrival
-- time, TAT, in µs) and the limit's keys sorted set (member: the key's
-- record suffix, score: its TAT).
-- ARGV: the key's record suffix ('' for an unkeyed limit), n.
-- With base = max(TAT, now) and tol = (burst - 1) x iv, permits are due
-- when base - now <= tol, 1 + (tol - (base - now)) / iv of them; min(n,
-- that) are granted, the TAT moves by iv for each, and the record expires
-- when that time has passed (an expired record grants what an idle one
-- does). A refusal writes nothing.
-- Replies: {granted, remaining} granted; {0, retry_after_µs} refused;
-- {-1} no such limit; {-2, keyed} the key does not match the limit.
local cfg = redis.call('HMGET', KEYS[1], 'iv', 'burst', 'keyed')
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
local tat = tonumber(redis.call('GET', KEYS[2]) or '0')
local base = math.max(tat, now)
if base - now > tol then return {0, base - now - tol} end
local k = math.min(tonumber(ARGV[2]), math.floor((tol - (base - now)) / iv) + 1)
local nt = base + k * iv
redis.call('SET', KEYS[2], string.format('%d', nt), 'PX', math.floor((nt - now) / 1000) + 1)
if keyed then
  redis.call('ZADD', KEYS[3], nt, ARGV[1])
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. string.format('%d', now))
end
return {k, math.floor((tol - (nt - now) + iv) / iv)}
