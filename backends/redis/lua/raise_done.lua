-- raise_done.lua clears the raise token, unless a later change set
-- another.
--
--   KEYS[1] the marker  ARGV[1] the token
if redis.call('HGET', KEYS[1], 'raise') == ARGV[1] then redis.call('HDEL', KEYS[1], 'raise') end
return 0
