-- lib/cron_final.lua defines failed(status): the statuses that make an
-- attempt a pending retry.
local function failed(status)
  return status == 'failed' or status == 'timeout' or status == 'lost'
end
