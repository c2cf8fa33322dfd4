-- hosts_list.lua reads every record and the server's clock (read-only).
--
--   KEYS[1] the records
--
-- Returns {now µs, {host, record, host, record, ...}}.
local t = redis.call('TIME')
return {tonumber(t[1]) * 1000000 + tonumber(t[2]), redis.call('HGETALL', KEYS[1])}
