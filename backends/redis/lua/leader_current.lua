-- leader_current.lua reads the live lease (read-only).
--
--   KEYS[1] the lease
--
-- Returns {holder, term, exp µs}, or an empty array when nobody holds a
-- live lease.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local cur = redis.call('HMGET', KEYS[1], 'holder', 'term', 'exp')
if not cur[1] or (tonumber(cur[3]) or 0) <= now then
  return {}
end
return {cur[1], tonumber(cur[2]), (tonumber(cur[3]) or 0)}
