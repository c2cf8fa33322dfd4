package redis

// The cron scripts, with the Lua they share. Their keys are cronKeys'
// (cron_runtime.go), where the records they write are described.

// cronClaimScript makes a batch of claims, in order, each in one atomic
// step (lua/cron_claim.lua).
var cronClaimScript = luaScript("cron_claim.lua")

// cronExtendManyScript renews a batch of run leases, each only for its
// owner, only while the run is running and its lease unexpired
// (lua/cron_extend_many.lua).
var cronExtendManyScript = luaScript("cron_extend_many.lua")

// cronFinishScript records the results of runs still running under their
// owners (expired or not, as long as nobody reaped them), moves each from
// the running sets to the finished one (and to the pending retries when it
// failed), and trims its task's history (lua/cron_finish.lua).
var cronFinishScript = luaScript("cron_finish.lua")

// cronReapScript marks a running occurrence whose lease expired as lost and
// trims the task's history (lua/cron_reap.lua).
var cronReapScript = luaScript("cron_reap.lua")

// cronDueScript lists due tasks that are not paused and the earliest future
// next_exec at one instant (read-only; lua/cron_due.lua).
var cronDueScript = luaScript("cron_due.lua")

// cronExpiredScript lists running records whose lease expired, the longest
// expired first (read-only; lua/cron_expired.lua).
var cronExpiredScript = luaScript("cron_expired.lua")

// cronRunningScript lists a task's records whose lease is live (read-only;
// lua/cron_running.lua).
var cronRunningScript = luaScript("cron_running.lua")

// cronHistoryScript lists a task's records newest first, with their output
// and, for running ones, their lease (read-only; lua/cron_history.lua).
var cronHistoryScript = luaScript("cron_history.lua")
