package redis

// The scripts of instances of keyed semaphores (backends/instance.go,
// lua/inst_*.lua). An instance's keys share its semaphore's hash tag,
// {sem:<name>}, so one script may read the semaphore's config and bump its
// fencing counter in the same atomic step as it changes the instance.
// Every instance script takes the same KEYS (keys.instance), listed in
// lua/lib/inst.lua. There are no free tokens: a slot exists while held,
// numbered with the lowest number the instance does not use.
//
// An instance leaves nothing behind: every script ends with settle, which
// deletes the instance's keys and its index entry once it has no live
// holder and no live waiter, and otherwise sets each key to expire with
// the instance's latest expiry (PEXPIREAT, rounded up to the next
// millisecond). So the keys of an instance whose callers crashed expire by
// themselves once their leases have, and meanwhile the next script prunes
// them (an expired holder's slot is free to take: pruning it is the
// reclaim). A pushed wake list expires with its waiter's record.

// instAcquireScript takes a slot of the instance, creating it
// (lua/inst_acquire.lua).
var instAcquireScript = luaScript("inst_acquire.lua")

// instExtendScript renews ARGV[2]'s lease to now + ARGV[3] µs while it is
// live (lua/inst_extend.lua).
var instExtendScript = luaScript("inst_extend.lua")

// instReleaseScript removes ARGV[2]'s holder record and wakes the waiter
// whose turn the freed slot makes (lua/inst_release.lua).
var instReleaseScript = luaScript("inst_release.lua")

// instEnterWaitScript queues ARGV[2] behind every live waiter of the
// instance (creating it), or renews its record, keeping its place
// (lua/inst_enter_wait.lua).
var instEnterWaitScript = luaScript("inst_enter_wait.lua")

// instLeaveWaitScript removes ARGV[2]'s waiter record and wake list, wakes
// the waiter whose turn that makes, and removes the instance when idle
// (lua/inst_leave_wait.lua).
var instLeaveWaitScript = luaScript("inst_leave_wait.lua")

// instFirstWaiterScript returns the live waiter with the lowest ticket, ""
// when nobody waits (lua/inst_first_waiter.lua).
var instFirstWaiterScript = luaScript("inst_first_waiter.lua")

// instWaitCheckScript is WaitSemaphore's first step for an instance
// (lua/inst_wait_check.lua).
var instWaitCheckScript = luaScript("inst_wait_check.lua")
