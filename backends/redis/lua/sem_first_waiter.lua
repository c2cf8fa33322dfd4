-- sem_first_waiter.lua returns the live waiter with the lowest ticket, ""
-- when nobody waits.
--#include lib/sem_keys.lua
--#include lib/sem_consts.lua
--#include lib/sem.lua
local now = now_us()
for _, o in ipairs(redis.call('ZRANGE', K_WSEQ, 0, -1)) do
  local e = redis.call('ZSCORE', K_WEXP, o)
  if e and tonumber(e) > now then return o end
end
return ''
