package redis

// The semaphore scripts (lua/sem_*.lua). Every one but the one-slot fast
// scripts (below) takes the same KEYS, the keys of one semaphore in the
// order of semKeyNames (keys.semaphore), all under the hash tag
// {sem:<name>}: lua/lib/sem_keys.lua lists them.
//
// Beside the line, the hash winfo (waiters_list.go) records each waiter's
// host, pid and arrival for ListWaiters; only the enter scripts write it.
//
// Each waiter in line also has a wake list of its own, KEYS[7] .. ":" ..
// owner (wkey; the owner follows the hash tag, so it stays in the
// semaphore's slot): a release pushes to the list of the waiter whose turn
// it makes, so the wake-up reaches that waiter and no other.
//
// The line: a slot is granted only while fewer live waiters are ahead of
// the caller than slots are free (limit minus live holders). A caller not
// in line (a newcomer, a no-wait caller) has every live waiter ahead of it.
// Expired waiter records are pruned by every script that reads the line,
// so a crashed waiter holds its place for at most its waiter lease.
//
// A slot is a token in free, or a holder record (exp + holders + owners),
// never both and never in the client's hands alone: a token leaves free
// only in the script that writes its holder record. The sentinel tells a
// list that lost tokens (drift: repaired by PutSemaphore) from a list that
// is gone altogether (a key deleted, a partial flush): acquire rebuilds a
// lost list from cfg and the holder set at once.
//
// # One-slot semaphores
//
// A semaphore of limit 1 that is not keyed keeps its slot in one key, lock,
// instead of free, exp and holders (cfg field "one" = "1" says so): the
// lock holds the holder record, "<flag><len(owner)> <owner> <fencing>
// <acquired µs> <expiry µs> <pid> <host>", set with SET NX and a key TTL of
// the lease plus semLockGrace (GRACE_MS in lua/lib/sem_consts.lua), so
// that an expired lease leaves its record (an expired holder, as in exp)
// for that long. This is the common case
// made cheap: an acquire is INCR fencing, TIME and SET NX; a release is
// PTTL and GETDEL (the liveness of the lease read from the key's TTL, with
// 2 ms to spare for the TTL's whole milliseconds, so that a release never
// calls live a lease whose recorded expiry passed). Each is one script
// that takes only those keys: every KEYS entry costs the client and the
// server (measured in docs/benchmarks.md), and their rare paths build the
// others from the lock's name, which shares the hash tag.
//
// The fencing counter's sign arms the fast path: a negative counter c
// stands for the fencing number c + BIAS (2^52, lua/lib/sem_consts.lua),
// and says that the fast acquire may grant without reading anything else:
// the semaphore exists, is a one-slot semaphore of limit 1, not keyed, and
// nobody is in line (wexp is empty). Every script that changes one of these
// re-arms or disarms (refresh_arm) in the same step; a positive counter
// (every other semaphore, a counter that went missing) sends the acquire to
// its full path. A missing counter still restarts at TIME in µs.
//
// The flag, the record's first byte, is "1" once somebody may be blocked on
// this holder's release (a waiter entered the line, a caller checked before
// blocking, or the grant left others in line): only then does the release
// run the wake-ups. A slot deleted behind coordd's back (drift) is the
// record "!", which no acquire takes until PutSemaphore repairs it.
//
// A semaphore enters this mode when PutSemaphore (or a release that leaves
// no holder) finds limit 1, not keyed, and no live holder record; it leaves
// it, the lock's holder moving into exp and holders as slot 0, when the
// limit or keyed changes (PutSemaphore, DeleteSemaphore). While in it, exp
// keeps a sentinel holder of slot 0 that never expires (LOCK_SENT_EXP in
// lua/lib/sem_consts.lua) so that a binary from before this mode, which
// knows only the token list, sees the slot held and never admits a second
// holder during a rolling upgrade.

// semPutScript creates or updates the config and repairs the slots to
// max(limit, live holders), inside one script so that no token is in flight
// while it counts (lua/sem_put.lua).
var semPutScript = luaScript("sem_put.lua")

// semDeleteScript deletes every key of a semaphore without live holders
// (lua/sem_delete.lua).
var semDeleteScript = luaScript("sem_delete.lua")

// semAcquireScript takes a token and records its holder
// (lua/sem_acquire.lua).
var semAcquireScript = luaScript("sem_acquire.lua")

// semFastAcquireScript is the acquire of a one-slot semaphore
// (lua/sem_fast_acquire.lua).
var semFastAcquireScript = luaScript("sem_fast_acquire.lua")

// semExtendScript renews owner's lease to now + lease, only while it is
// live (lua/sem_extend.lua).
var semExtendScript = luaScript("sem_extend.lua")

// semReleaseScript removes owner's holder record and gives its token back
// to free while the slots (tokens + holder records) stay within the limit
// (lua/sem_release.lua).
var semReleaseScript = luaScript("sem_release.lua")

// semFastReleaseScript releases a one-slot semaphore's holder
// (lua/sem_fast_release.lua).
var semFastReleaseScript = luaScript("sem_fast_release.lua")

// semObserveScript reads one semaphore, and the live instances of a keyed
// one, against one instant (lua/sem_observe.lua).
var semObserveScript = luaScript("sem_observe.lua")

// semWaitCheckScript is WaitSemaphore's first step
// (lua/sem_wait_check.lua).
var semWaitCheckScript = luaScript("sem_wait_check.lua")

// semWakeScript gives back a wake element that a cancelled waiter took, and
// deletes its interrupt list (lua/sem_wake.lua).
var semWakeScript = luaScript("sem_wake.lua")

// semEnterWaitScript registers owner as a waiter, behind every live one,
// after pruning expired waiter records (lua/sem_enter_wait.lua).
var semEnterWaitScript = luaScript("sem_enter_wait.lua")

// semLeaveWaitScript removes owner's waiter record and wake list
// (lua/sem_leave_wait.lua).
var semLeaveWaitScript = luaScript("sem_leave_wait.lua")

// semFirstWaiterScript returns the live waiter with the lowest ticket, ""
// when nobody waits (lua/sem_first_waiter.lua).
var semFirstWaiterScript = luaScript("sem_first_waiter.lua")
