// Package memcached is the memcached backend of coordd. It holds semaphores
// only (the inventory lives in the cluster backend), in two modes.
//
// # Mode lease (the default, any limit)
//
// Slot i of a semaphore is the key slot:<i>, taken with add and holding the
// holder record (owner token, host, pid, fencing, acquired_at and
// expires_at in server time). Its TTL is the lease in whole seconds, at
// least 3, given as an absolute time of the server's clock (`stats` time,
// or a `stats` reading at most 10 s old advanced by the host's monotonic
// clock: see Store.clockFor), so that expires_at is exactly when memcached
// drops the key. A free slot
// is an absent key: slots exist only while held, and retire by themselves.
//
// The limit guard: add takes a free slot in [0, limit), then the acquirer
// reads the config and every slot key again, and keeps the grant only if
// the live keys (its own included) do not exceed the limit; otherwise it
// expires its key and reports no slot. Of two racing acquirers, the one
// whose add came later reads the other's key in its check, so together
// they never pass the limit; both may back off, which only costs a retry.
// The same check-after-write makes lowering the limit safe (holders above
// it keep their keys, and nobody is admitted while they reach the limit)
// and makes DeleteSemaphore safe (it writes limit 0 before it looks for
// holders).
//
// Extend is gets + cas (a new record and TTL); Release is a cas that expires
// the key: a single cas when this store made the grant and its own
// connection to the server was not redialled since (semaphore.go,
// grantCas), else gets + cas. A key that vanished (lease expired, eviction, a restart) makes
// both return backends.ErrLost: the holder treats the slot as lost.
//
// Fencing numbers come from the fencing key (incr). When it is missing, its
// creator waits for the server's second to change, then adds server time ×
// 10⁶, so a re-created counter starts above any earlier value.
//
// # Mode counter (limit 1)
//
// The published memcached counter mutex, incr to take and decr to give
// back (counter.go), with its weak points tested.
//
// # Time and restarts
//
// Every expiry uses the clock of the server that holds the semaphore's keys,
// read with `stats` over a connection of the store's own (gomemcache does
// not expose `stats`); it ticks in whole seconds. Between readings (at most
// 10 s apart, and none kept across a connection error) the store estimates
// it from the last reading and the host's monotonic clock, never the host's
// wall clock; the fencing key's re-creation always reads it fresh. A restart loses every key:
// the per-server marker (marker.go) lets reconcile hold re-creation for the
// longest lease, as on Redis. memcached has no run_id; pid and start time
// from `stats` stand for one.
//
// memcached keeps no waiter line and has no blocking pop: its Semaphores
// hand out no Waiters (nil), the semaphore client polls TryAcquire with a
// bounded delay, and PutSemaphore refuses max_waiting >= 0 with
// backends.ErrUnsupported.
// Its waiters are therefore not served in arrival order: whoever tries
// first after a release wins. A line would need a check of the line and a
// take of the slot in one atomic step, which memcached offers only on one
// key (cas), so every acquire and release would contend on that key.
package memcached
