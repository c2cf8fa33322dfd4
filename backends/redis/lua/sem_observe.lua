-- sem_observe.lua reads one semaphore, and the live instances of a keyed
-- one, against one instant. It drops the index entries of instances that
-- expired (lib/inst_observe.lua). A one-slot semaphore's holder is reported
-- as slot 0, in the records' format.
--
--   KEYS[10] the index of the instances  ARGV[1] their key prefix
--
-- Returns {0} when absent, else {1, limit, lease ns, mode, wake,
-- max_waiting, max_hold ns, slots, expired, waiters, keyed, n, then slot,
-- expiry µs, holder record for each of the n live holders, then for each
-- live instance: key, waiters, m, and slot, expiry µs, holder record for
-- each of its m live holders}.
--#include lib/sem_keys.lua
--#include lib/sem_consts.lua
--#include lib/sem.lua
--#include lib/inst_observe.lua
local cfg = redis.call('HMGET', K_CFG, 'limit', 'lease', 'mode', 'wake', 'max_waiting', 'max_hold', 'keyed', 'one')
if not cfg[1] then return {0} end
local now = now_us()
local out = {1, cfg[1], cfg[2] or '0', cfg[3] or '', cfg[4] or '', cfg[5] or '-1', cfg[6] or '0',
  0, 0, redis.call('ZCOUNT', K_WEXP, '(' .. int(now), '+inf'), cfg[7] or '0', 0}
if cfg[8] then
  -- A one-slot semaphore: its slot is the lock (exp holds the sentinel).
  local r, live, v = lock_get(now)
  if v ~= '!' then out[8] = 1 end
  if live then
    out[#out + 1] = 0
    out[#out + 1] = r.exp
    out[#out + 1] = string.format('%d %d ', r.fencing, r.since) .. r.pid .. ' ' .. #r.owner .. ' ' .. r.owner .. r.host
    out[12] = 1
  elseif r then
    out[9] = 1
  end
else
  local held = redis.call('ZRANGE', K_EXP, 0, -1, 'WITHSCORES')
  out[8] = math.max(token_count(), 0) + #held / 2
  for i = 1, #held, 2 do
    if tonumber(held[i + 1]) > now then
      out[#out + 1] = tonumber(held[i])
      out[#out + 1] = tonumber(held[i + 1])
      out[#out + 1] = redis.call('HGET', K_HOLD, held[i]) or ''
      out[12] = out[12] + 1
    else
      out[9] = out[9] + 1
    end
  end
end
if redis.call('EXISTS', K_INST) == 1 then
  for _, i in ipairs(instances(now)) do
    local hs = redis.call('ZRANGE', i[2], '(' .. int(now), '+inf', 'BYSCORE', 'WITHSCORES')
    out[#out + 1] = i[1]
    out[#out + 1] = redis.call('ZCOUNT', i[5], '(' .. int(now), '+inf')
    out[#out + 1] = #hs / 2
    for j = 1, #hs, 2 do
      out[#out + 1] = tonumber(hs[j])
      out[#out + 1] = tonumber(hs[j + 1])
      out[#out + 1] = redis.call('HGET', i[3], hs[j]) or ''
    end
  end
end
return out
