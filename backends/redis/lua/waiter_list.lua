-- waiter_list.lua lists the live waiters of one line in line order, as
-- pairs {expiry µs, info}. Read-only.
--
--   KEYS[1] wseq  KEYS[2] wexp
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local info = string.sub(KEYS[1], 1, -5) .. 'winfo'
local out = {}
for _, o in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local e = redis.call('ZSCORE', KEYS[2], o)
  if e and tonumber(e) > now then
    out[#out + 1] = e
    out[#out + 1] = redis.call('HGET', info, o) or ''
  end
end
return out
