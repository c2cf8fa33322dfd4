-- raise_counter.lua raises one counter to the server's time in µs when it
-- is below it; an armed semaphore counter (negative: see the one-slot
-- semaphores in semaphore_scripts.go) stays armed.
--
--   KEYS[1] the counter  ARGV[1] "sem" for a semaphore's fencing counter
--
-- Returns 1 when it raised the counter.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local v = tonumber(redis.call('GET', KEYS[1]) or '')
if not v then return 0 end
if ARGV[1] == 'sem' and v < 0 then
  if v + 4503599627370496 < now then
    redis.call('SET', KEYS[1], string.format('%d', now - 4503599627370496))
    return 1
  end
  return 0
end
if v < now then
  redis.call('SET', KEYS[1], string.format('%d', now))
  return 1
end
return 0
