-- rate_delete.lua deletes a rate limit and its records
-- (DeleteRateLimit).
--
-- KEYS: the limit's config hash, its own record and its keys sorted set.
-- ARGV: the prefix of a key's record (the member of the keys set
-- follows it). Replies 1.
for _, m in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do redis.call('DEL', ARGV[1] .. m) end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
return 1
