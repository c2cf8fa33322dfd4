-- host_beat.lua upserts one host's record at the server's TIME. The start
-- time is kept while the stored record has the same run id (the same
-- daemon process) and is TIME otherwise.
--
--   KEYS[1] the records (hash: host -> record JSON)
--   KEYS[2] last seen (sorted set: host -> µs)
--   ARGV[1] host, ARGV[2] run id, ARGV[3] pid, ARGV[4] version,
--   ARGV[5] spec hash, ARGV[6] heartbeat period in ns,
--   ARGV[7] stopped ("1" or "0")
--
-- Returns the time of the heartbeat in µs.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local nows = string.format('%d', now)
local started = nows
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur then
  local ok, old = pcall(cjson.decode, cur)
  if ok and type(old) == 'table' and old.run_id == ARGV[2] and type(old.started_us) == 'string' then
    started = old.started_us
  end
end
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode({run_id = ARGV[2], pid = ARGV[3], version = ARGV[4],
  spec_hash = ARGV[5], heartbeat_ns = ARGV[6], stopped = ARGV[7], started_us = started, seen_us = nows}))
redis.call('ZADD', KEYS[2], nows, ARGV[1])
return now
