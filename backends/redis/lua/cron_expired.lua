-- cron_expired.lua lists running records whose lease expired, the
-- longest expired first (read-only).
--
--   KEYS[1] the leases
--   ARGV[1] limit (0: all)
--
-- Returns {record, expiry µs, ...}.
--#include lib/cron_now.lua
if tonumber(ARGV[1]) > 0 then
  return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', nows, 'WITHSCORES', 'LIMIT', 0, ARGV[1])
end
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', nows, 'WITHSCORES')
