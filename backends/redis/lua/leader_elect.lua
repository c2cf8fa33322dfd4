-- leader_elect.lua is SET NX PX with terms: it takes the lease when
-- nobody holds it unexpired, starting a new term, and renews it (same
-- term) when holder already holds it. A missing term counter (a fresh
-- store, a flush, a restart without persistence) is first set to the
-- server's TIME in µs, so the new term is above every term handed out
-- before: terms grow by one per election, far slower than the clock.
--
-- The lease's expiry is kept in the hash, in µs, and compared with TIME;
-- the key's own expiry (PEXPIREAT, milliseconds, rounded up) only cleans it
-- away.
--
--   KEYS[1] the lease (hash: holder, term, exp)
--   KEYS[2] the term counter
--   ARGV[1] holder
--   ARGV[2] lease in µs
--
-- Returns {1, term, exp µs} when holder holds the lease, or {0, holder,
-- term, exp µs} of the live lease of another holder.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local exp = now + tonumber(ARGV[2])
local cur = redis.call('HMGET', KEYS[1], 'holder', 'term', 'exp')
local term
if cur[1] and (tonumber(cur[3]) or 0) > now then
  if cur[1] ~= ARGV[1] then
    return {0, cur[1], tonumber(cur[2]), (tonumber(cur[3]) or 0)}
  end
  term = tonumber(cur[2])
else
  if redis.call('EXISTS', KEYS[2]) == 0 then
    redis.call('SET', KEYS[2], string.format('%d', now))
  end
  term = redis.call('INCR', KEYS[2])
end
redis.call('HSET', KEYS[1], 'holder', ARGV[1], 'term', string.format('%d', term), 'exp', string.format('%d', exp))
redis.call('PEXPIREAT', KEYS[1], string.format('%d', math.floor(exp / 1000) + 1))
return {1, term, exp}
