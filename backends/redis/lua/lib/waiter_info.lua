-- lib/waiter_info.lua is winfo_put, prepended to the enter scripts.
--
-- winfo_put records owner's host and pid for the line wseq/wexp, with
-- since = now when the owner is new in line (fresh) and kept for a
-- renewal; it keeps the hash alive until the waiter record's expiry exp.
local function winfo_put(wseq, wexp, owner, host, pid, now, exp, fresh)
  local k = string.sub(wseq, 1, -5) .. 'winfo'
  if fresh then
    redis.call('HSET', k, owner, string.format('%d', now) .. ' ' .. (pid or '0') .. ' ' .. (host or ''))
  elseif redis.call('HEXISTS', k, owner) == 0 then
    redis.call('HSET', k, owner, '0 ' .. (pid or '0') .. ' ' .. (host or ''))
  end
  if redis.call('HLEN', k) > 2 * redis.call('ZCARD', wexp) + 8 then
    for _, o in ipairs(redis.call('HKEYS', k)) do
      if not redis.call('ZSCORE', wexp, o) then redis.call('HDEL', k, o) end
    end
  end
  local want = math.floor((exp - now) / 1000) + 1
  if redis.call('PTTL', k) < want then redis.call('PEXPIRE', k, want) end
end
