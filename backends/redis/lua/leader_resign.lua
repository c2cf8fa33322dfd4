-- leader_resign.lua deletes the lease if it is exactly holder's live
-- term; the term counter stays, so the next election continues above it.
--
--   KEYS[1] the lease
--   ARGV[1] holder, ARGV[2] term
--
-- Returns 1 when it resigned, 0 when the term was not live.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local cur = redis.call('HMGET', KEYS[1], 'holder', 'term', 'exp')
if cur[1] ~= ARGV[1] or cur[2] ~= ARGV[2] or (tonumber(cur[3]) or 0) <= now then
  return 0
end
return redis.call('DEL', KEYS[1])
