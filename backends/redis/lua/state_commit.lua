-- state_commit.lua writes one apply atomically, only while owner holds the
-- apply lock: it assigns the next generation, writes the put entries with
-- that generation, deletes the removed ones and appends the apply record,
-- stamped with the server's TIME.
--
-- The generation counter is a plain INCR (generations are numbered 1, 2, 3
-- as operators read them). When the counter is missing but state remains (a
-- partial loss, or keys deleted by hand) it is first set to the highest
-- generation still recorded, in the last apply record or in any entry, so
-- a generation is never handed out twice for surviving data; when
-- everything is lost the store starts again from 1, as an empty SQL store
-- does.
--
--   KEYS[1] the apply lock
--   KEYS[2] the generation counter
--   KEYS[3] the inventory (hash: "kind:name" -> entry JSON)
--   KEYS[4] the apply log (list of record JSON, oldest first)
--   KEYS[5] the latest record of each spec hash (hash)
--   ARGV[1] owner
--   ARGV[2] spec hash, ARGV[3] host, ARGV[4] summary
--   ARGV[5] n, the number of entries put
--   ARGV[6 .. 5+2n] field, entry JSON without its generation (an object)
--   ARGV[6+2n ..] fields to delete
--
-- Returns {0} when owner does not hold the lock, else {1, generation,
-- record time in µs}.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {0}
end
if redis.call('EXISTS', KEYS[2]) == 0 then
  local top = 0
  local last = redis.call('LINDEX', KEYS[4], -1)
  if last then
    top = tonumber(cjson.decode(last).generation) or 0
  end
  for _, v in ipairs(redis.call('HVALS', KEYS[3])) do
    local g = tonumber(string.match(v, '^{"generation":(%d+),'))
    if g and g > top then top = g end
  end
  redis.call('SET', KEYS[2], string.format('%d', top))
end
local gen = redis.call('INCR', KEYS[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local head = '{"generation":' .. string.format('%d', gen) .. ','
local n = tonumber(ARGV[5])
local last = 5 + 2 * n
local i = 6
while i <= last do
  local args = {}
  local j = math.min(i + 999, last)
  for k = i, j, 2 do
    args[#args + 1] = ARGV[k]
    args[#args + 1] = head .. string.sub(ARGV[k + 1], 2)
  end
  redis.call('HSET', KEYS[3], unpack(args))
  i = j + 1
end
i = last + 1
while i <= #ARGV do
  local j = math.min(i + 999, #ARGV)
  redis.call('HDEL', KEYS[3], unpack(ARGV, i, j))
  i = j + 1
end
local rec = cjson.encode({generation = string.format('%d', gen), spec_hash = ARGV[2], host = ARGV[3],
  summary = ARGV[4], at_us = string.format('%d', now)})
redis.call('RPUSH', KEYS[4], rec)
redis.call('HSET', KEYS[5], ARGV[2], rec)
return {1, gen, now}
