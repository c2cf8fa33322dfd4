-- rate_put.lua writes a rate limit's config (PutRateLimit).
--
-- KEYS: the limit's config hash, its own record and its keys sorted set.
-- ARGV: count, per (µs), iv (interval µs), burst, keyed (0 or 1), the
-- prefix of a key's record (the member of the keys set follows it).
-- A change of keyed deletes the records it leaves behind: the limit's
-- own when it becomes keyed, its keys' when it stops being. Replies 1.
redis.call('HSET', KEYS[1], 'count', ARGV[1], 'per', ARGV[2], 'iv', ARGV[3], 'burst', ARGV[4], 'keyed', ARGV[5])
if ARGV[5] == '1' then
  redis.call('DEL', KEYS[2])
else
  for _, m in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do redis.call('DEL', ARGV[6] .. m) end
  redis.call('DEL', KEYS[3])
end
return 1
