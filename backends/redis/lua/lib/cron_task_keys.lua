-- lib/cron_task_keys.lua is the task keys of the single-occurrence scripts
-- (KEYS[7] to KEYS[10], see cronKeys in cron_runtime.go), as trim takes them.
local task = {occ = KEYS[7], out = KEYS[8], hist = KEYS[9], done = KEYS[10]}
