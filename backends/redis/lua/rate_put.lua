-- rate_put.lua writes a rate limit's config (PutRateLimit).
--
-- KEYS: the limit's hash (see rate_take.lua); its TATs are kept.
-- ARGV: count, per (µs), iv (interval µs), burst, keyed (0 or 1).
-- A change of keyed deletes the TATs it leaves behind: the limit's own
-- when it becomes keyed, its keys' when it stops being. Replies 1.
redis.call('HSET', KEYS[1], 'count', ARGV[1], 'per', ARGV[2], 'iv', ARGV[3], 'burst', ARGV[4], 'keyed', ARGV[5])
if ARGV[5] == '1' then
  redis.call('HDEL', KEYS[1], 'tat')
  return 1
end
local c = '0'
repeat
  local r = redis.call('HSCAN', KEYS[1], c, 'MATCH', 'k:*', 'COUNT', 1000)
  c = r[1]
  for i = 1, #r[2], 2 do redis.call('HDEL', KEYS[1], r[2][i]) end
until c == '0'
redis.call('HDEL', KEYS[1], 'sweep')
return 1
