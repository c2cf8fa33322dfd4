// Package sqlite is coordd's embedded backend: one SQLite file that every
// coordd process on one host shares.
//
// # One file, several processes
//
// The file is opened in WAL mode with synchronous=NORMAL, a busy timeout of
// about ten seconds and foreign keys on. Every write transaction starts with
// BEGIN IMMEDIATE, so a transaction takes the write lock before it reads
// anything it will act on: two processes (or two handles in one process)
// never both decide from the same stale read, and the busy timeout turns
// contention into waiting instead of errors. The one step the busy timeout
// cannot cover is the switch of a new file to WAL, which Open makes: it
// begins as a read and SQLite fails, rather than waits, a read that must
// become a write while another connection writes, as happens when several
// processes create the file together. Open retries that step for as long as
// the busy timeout (see enableWAL). The file only coordinates the processes
// of the host that holds it; for several hosts use a networked backend.
//
// # The clock
//
// SQLite has no server, so the backend clock is the clock of the host that
// holds the file, read inside SQL by nowSQL. Every lease and expiry
// comparison is made in the statement against that one clock, never against
// a time computed in Go. julianday('now') loses precision in a float64 (tens
// of microseconds), so the clock is unixepoch('subsec') rounded to whole
// milliseconds and stored as INTEGER microseconds since the Unix epoch, UTC.
// Its resolution is therefore one millisecond.
//
// # The guard on acquire
//
// Semaphores, their keyed instances and their waiter lines are the shared
// SQL store's code (backends/internal/sqlstore, its Standard flavor); what
// follows is how it behaves on one file. A semaphore has max(limit, live holders) slot rows. TryAcquire counts the
// live holders inside its IMMEDIATE transaction and refuses when they are at
// or above the stored limit; only then does it take the lowest free or
// expired slot. That count, not the number of slot rows, is what keeps a
// lowered limit safe: slots above the new limit that are still held stay, but
// nobody is admitted until the holders are below the limit again.
//
// # Retirement on release
//
// Lowering a limit deletes free slots at once and leaves held ones alone.
// When a holder releases and the semaphore has more slots than max(limit,
// live holders), the surplus free or expired slots are deleted instead of
// kept free, so the slot count converges on the limit without evicting
// anybody.
//
// # Waiters
//
// semaphore_waiters bounds and orders the waiters of a semaphore. EnterWait,
// in one IMMEDIATE transaction, deletes expired waiter records, refuses with
// ErrTooManyWaiters when max_waiting live waiters remain, and otherwise
// queues the owner with a ticket (seq) above every live waiter's, leased in
// backend time so that a crashed waiter's place frees itself. Re-entering
// renews the lease and keeps the place. TryAcquire serves the line first
// come, first served, in its write transaction: it grants a slot only while
// fewer live waiters are ahead of the owner (lower tickets; every live
// waiter for an owner not in line) than slots are free, and deletes the
// owner's waiter record with the grant. FirstWaiter (not part of
// backends.Waiters) names the head of the line. SQLite cannot push a
// wake-up to another process, so WaitSemaphore polls a cheap read that
// follows the same rule, with a backoff from 2 ms to 20 ms, until
// TryAcquire may succeed. A record also names the waiter's host and pid and
// when it entered the line (EnterWait), for ListWaiters
// (waiters_list.go), the line as operators see it.
//
// # The leader lease
//
// The leader table has one row: holder, term and expiry. ElectLeader is one
// UPSERT that takes a free, expired or resigned lease with term + 1, renews
// the live holder's own lease in the same term, and changes nothing while
// another holder's lease is live. ResignLeader only expires the row, so the
// term counter survives. Should the row be deleted behind coordd's back (or
// on a fresh store), the next term starts at backend now in microseconds:
// terms grow by one per election, far slower than the clock, so the restart
// is still above every earlier term.
//
// # Queues
//
// The queue runtime is the shared SQL store's Standard flavor
// (backends/internal/sqlstore, queue_*.go), which this store runs as it
// is: a push and a claim are one IMMEDIATE transaction each, so claims
// never run at once and each takes the first claimable jobs of the whole
// queue in claim order (the highest priority first, then the oldest); the
// claim names its indexes (INDEXED BY). SQLite cannot push a
// wake-up to another process, so WaitQueue polls a cheap read with a
// backoff from 5 ms to 100 ms.
//
// # Schema
//
// Numbered migrations are embedded from migrations/*.sql and recorded in
// schema_migrations with the oldest binary that may use the schema (see
// migrate.go). A store that was never migrated, or a missing file opened
// read-only, reads as empty.
package sqlite
