-- marker.lua reads the server's run_id, replication id and role (INFO)
-- and the marker, and acts as ARGV[1] says:
--
--   observe  change nothing
--   check    handle a change (see marker.go); a missing marker is
--            left missing
--   mark     as check, and write a missing marker (with a hold of ARGV[3]
--            when ARGV[2] is "1": the inventory lists objects here), and
--            record ARGV[3] as the longest lease
--
-- Nothing is written on a replica.
--
--   KEYS[1] the marker  KEYS[2] the leader term counter
--   KEYS[3] the cron fencing counters (hash: task -> counter)
--   ARGV[1] the mode  ARGV[2] "1" when objects existed  ARGV[3] the
--   longest lease, µs ("" with observe and check)  ARGV[4] "1" when the
--   backend is durable (a change raises counters but holds nothing)
--   ARGV[5] the hold when the marker records no longest lease, µs
--
-- Returns {present 0/1, hold_until µs, now µs, run_id in the marker before
-- this call ("" when missing), changed 0/1 (the marker named another
-- server: handled, or seen with observe or on a replica), cause, wrote 0/1,
-- raise token ("" when no counter awaits raising), hold µs recorded}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local srv = redis.call('INFO', 'server')
local rep = redis.call('INFO', 'replication')
local run_id = string.match(srv, 'run_id:(%w+)') or ''
local replid = string.match(rep, 'master_replid:(%w+)') or ''
local primary = string.match(rep, 'role:(%w+)') ~= 'slave'
local mode = ARGV[1]
local m = redis.call('HMGET', KEYS[1], 'run_id', 'hold_until', 'replid', 'hold', 'cause', 'raise')
if not m[1] then
  if mode ~= 'mark' or not primary then return {0, 0, now, '', 0, '', 0, '', 0} end
  local hu = 0
  if ARGV[2] == '1' then hu = now + tonumber(ARGV[3]) end
  redis.call('HSET', KEYS[1], 'run_id', run_id, 'replid', replid, 'created_at', string.format('%d', now),
    'hold', ARGV[3], 'hold_until', string.format('%d', hu), 'cause', 'lost')
  return {1, hu, now, '', 0, 'lost', 1, '', tonumber(ARGV[3])}
end
local hu = tonumber(m[2] or '0') or 0
local hold = tonumber(m[4] or '')
local cause = m[5] or ''
local changed = m[1] ~= run_id or (m[3] ~= false and m[3] ~= replid)
if mode == 'observe' or not primary then
  return {1, hu, now, m[1], changed and 1 or 0, cause, 0, m[6] or '', hold or -1}
end
if mode == 'mark' and ARGV[3] ~= m[4] then
  redis.call('HSET', KEYS[1], 'hold', ARGV[3])
  hold = tonumber(ARGV[3])
end
if not changed then
  if not m[3] then redis.call('HSET', KEYS[1], 'replid', replid) end
  return {1, hu, now, m[1], 0, cause, 0, m[6] or '', hold or -1}
end
local raise = string.format('%d', now)
redis.call('HSET', KEYS[1], 'run_id', run_id, 'replid', replid, 'changed_at', raise, 'raise', raise)
local term = redis.call('GET', KEYS[2])
if term and tonumber(term) < now then redis.call('SET', KEYS[2], raise) end
local f = redis.call('HGETALL', KEYS[3])
for i = 1, #f, 2 do
  if (tonumber(f[i + 1]) or 0) < now then redis.call('HSET', KEYS[3], f[i], raise) end
end
if ARGV[4] ~= '1' then
  local h = hold or tonumber(ARGV[5])
  if now + h > hu then
    hu = now + h
    cause = 'changed'
    redis.call('HSET', KEYS[1], 'hold_until', string.format('%d', hu), 'cause', cause)
  end
end
return {1, hu, now, m[1], 1, cause, 1, raise, hold or -1}
