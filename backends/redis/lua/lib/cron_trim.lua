-- lib/cron_trim.lua defines trim(k, name), which deletes task name's oldest
-- finished records beyond its history limit (100 when the task is gone),
-- with their output and their pending-retry entries; running records are
-- never deleted. k holds the task's keys: occ (records), out (outputs),
-- hist (history) and done (finished records). A record's text is JSON
-- written by these scripts, so a status found as '"status":"succeeded"'
-- is that field (a quote inside a string value is escaped); such a record
-- was never a pending retry.
local function trim(k, name)
  local stop = -1 - tonumber(redis.call('HGET', KEYS[6], name) or '100')
  local ids = redis.call('ZRANGE', k.done, 0, stop)
  if #ids == 0 then return end
  for _, id in ipairs(ids) do
    local rec = redis.call('HGET', k.occ, id)
    if rec and not string.find(rec, '"status":"succeeded"', 1, true) and not string.find(rec, '"status":"skipped"', 1, true) then
      redis.call('ZREM', KEYS[5], rec)
    end
  end
  for i = 1, #ids, 1000 do
    local j = math.min(i + 999, #ids)
    redis.call('HDEL', k.occ, unpack(ids, i, j))
    redis.call('HDEL', k.out, unpack(ids, i, j))
    redis.call('ZREM', k.hist, unpack(ids, i, j))
  end
  redis.call('ZREMRANGEBYRANK', k.done, 0, stop)
end
