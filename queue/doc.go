// Package queue is the Go API for coordd queues: push jobs, and work them
// with a handler while their visibility lease is kept alive.
//
// The backend does the queueing (see backends.Queues): claims in push
// order, the jobs of one key one at a time, visibility leases, attempts,
// retry backoff and the dead set. This package adds waiting and lease
// keeping.
//
// # Waiting
//
// In one process, an idle worker is woken by a Push through the same Client
// (and by the ack of a job with a key, which may let the next job of its
// key start) with no lost wake-ups: the worker takes the queue's current
// wake channel *before* it tries to claim, and Push closes that channel, so
// a push that lands between an empty claim and the wait still wakes it
// (package semaphore wakes its waiters on release the same way). Across
// processes the backend's WaitQueue takes over; on SQLite it is a bounded
// backoff poll (at most one query per 100 ms per idle Work call), so an
// idle worker does not hammer the store.
//
// # One claimer per Work call
//
// Work runs one claim loop that claims as many jobs as it has free handler
// slots (at most WorkerOptions.Batch per claim, which defaults to all of
// them), and never more, so a claimed job never waits in a local buffer
// while its lease runs. One claim of many jobs costs the backend about
// what a claim of one does (one round trip, one commit), which is why the
// default takes every free slot. Each claim uses a new random owner token.
//
// # Leases
//
// Every claimed job is leased for the queue's visibility timeout. While the
// handler runs, the worker renews it with ExtendJob about every
// visibility/3. The lease is trusted only until a monotonic deadline (the
// send time of the claim or of the last successful renewal, plus the
// visibility timeout, minus a margin). When an extend returns
// backends.ErrLost, or the deadline passes without a renewal, the handler's
// context is cancelled with cause ErrLeaseLost, and the job is neither
// acked nor retried: it belongs to its next owner. An Ack or Retry that
// still finds the lease gone (backends.ErrLost) is logged and counted, and
// the worker goes on.
//
// A handler that needs the lease's timing (a child process supervisor, for
// example) gets it with LeaseOf.
package queue
