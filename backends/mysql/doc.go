// Package mysql is coordd's MySQL/MariaDB backend: a database shared by
// every host of a cluster. It is developed against MariaDB 10.11 and written
// to run on MySQL 8.0 too (differences below).
//
// It holds every area of package backends (Cluster, Semaphores with its
// Waiters, Crons, Queues) and has the optional Migrator, WakeRepairer and
// PayloadLimiter. Semaphores come in mode lease (semaphore.go,
// instance.go) and mode session (session*.go), waiters park in the server
// (waiters.go, sem_park.go), the leader lease has its own statements
// (leader.go), cron tasks are the shared store's with their own claim,
// renewal, finish and reap scripts (cron_claim.go, cron_runtime.go), and
// queues have their own claim and parking (queue.go, queue_runtime.go,
// queue_park.go).
//
// # Tables and the prefix
//
// Every table name starts with the backend's table_prefix, which the spec
// loader validates as ^[a-zA-Z0-9_]{0,32}$ (Open checks it again). Only the
// prefix is spliced into SQL text, inside backticks; names, owners and every
// other value are bound parameters. Queries are named constants with a {p}
// placeholder, and each Store substitutes its prefix once per query. The
// driver interpolates parameters client-side (interpolateParams), so a
// statement costs one round trip and nothing is prepared; that escaping is
// sound only in the charsets package dsn allows, which Open enforces on the
// DSN and on every new connection (charsetChecked). Batched statements
// (IN lists, multi-row VALUES) are a constant head plus one "?" group per
// item. All tables are InnoDB, utf8mb4 with the binary collation, so names
// compare byte for byte as they do in SQLite (the default collation would
// make "A" and "a" one semaphore).
//
// # The clock
//
// The backend clock is the server's UTC_TIMESTAMP(6), read inside every
// statement that compares a lease or an expiry (nowSQL); never NOW(6),
// which follows the session time zone, and never the host clock. Times are
// stored as BIGINT microseconds since the Unix epoch, UTC, computed as
// TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)), which involves
// no time zone. Open forces parseTime with loc=UTC and the session
// time_zone +00:00 whatever the DSN says. The server fixes the current time
// once per statement, so all uses of nowSQL in one statement agree.
//
// # Two pools, scripts and round trips
//
// Ordinary statements and transactions use the statement pool (its size,
// lifetimes and TLS come from the DSN; see package dsn). Work that must
// stay on one connection uses a dedicated connection from a second pool
// (park.go): a session-mode holder's GET_LOCK, a parked waiter, and
// scripts. A script (runScript) is one transaction sent as several
// statements in one request, carrying intermediate values in session
// variables, so that a transaction that needs a locking read, a guarded
// write and a counter bump costs one round trip and one commit: the
// lease-mode acquire (qSemAcquire), the fast release (qSemReleaseFast), the
// cron claim and finish (cron_claim.go, cron_runtime.go). Only dedicated
// connections allow several statements per request. A script that fails
// midway may leave its transaction open, so its connection is discarded.
// Single statements return values in the OK packet with
// LAST_INSERT_ID(expr) instead of a read-back (a renewal's new expiry, a
// fencing number). RoundTrips counts one per request, plus one per
// transaction of the statement pool for its BEGIN and COMMIT.
//
// # Semaphores, mode lease (lock rows)
//
// What every SQL store does alike (configs, the repair of slot rows,
// release that retires slots, keyed instances, the waiter line) is the
// shared SQL store's (backends/internal/sqlstore) in MySQL's syntax; this
// package keeps the one-round-trip acquire, release and extend below.
//
// One row per slot (semaphore_slots: state FREE or LOCK, owner token, host,
// pid, fencing, acquired_at, expires_at) and one per semaphore (semaphores:
// config and the fencing counter). The acquire script locks the semaphore
// row and then its slot rows, reads the limit, the live holders and the
// lowest free or expired slot against one instant, takes that slot with an
// UPDATE guarded by (state = 'FREE' OR expires_at <= now) only while the
// live holders are below the limit (the count, not the number of rows, is
// the guard that keeps a lowered limit safe) and bumps the fencing counter
// in the same transaction, so a holder that takes a slot after another's
// lease expired gets a higher number. Extend and release match the owner
// token; extend is one UPDATE. Release is one script when nothing is left to
// retire; otherwise (slots at or above a lowered limit, an expired lease) a
// transaction frees the slot and deletes surplus ones. The driver is opened
// with clientFoundRows, so an UPDATE reports the rows it matched.
//
// Waiters (waiters.go) queue in semaphore_waiters with a ticket, bounded by
// max_waiting; the acquire script serves that line first come, first served
// and a waiter parks in the server until a release wakes it (sem_park.go).
// A record also names the waiter's host and pid and when it entered the
// line (EnterWait), for ListWaiters (waiters_list.go).
//
// # Semaphores, mode session (GET_LOCK slots)
//
// See session.go (and session_acquire.go, session_wait.go,
// session_release.go, session_repair.go by phase): slot i is a named lock held by the holder's dedicated
// connection; the wait lock (wake poll) and the SLEEP/KILL wake-up with the
// check lock (wake kill) for limits above 1; a plain blocking GET_LOCK for
// limit 1; the holder record and fencing bump in one UPDATE; a ping as
// Extend; the repair pass (RepairWakeups).
//
// # Parking and wake-ups
//
// See park.go: a waiter parks its dedicated connection in a statement
// tagged 'coordd-park:<channel>:<ticket>' that sleeps; a waker finds the
// oldest in information_schema.processlist and ends it with KILL QUERY
// (KILL QUERY ID on MariaDB, which cannot hit the connection's next
// statement). Session semaphores with wake kill and idle queue workers use
// it. Without the privilege to kill another user's statement the waiters
// wake at the end of their sleep.
//
// # Cron
//
// A claim is one script: an UPDATE of the task row that moves next_exec
// only while it still equals the claimed time (the compare-and-swap) and
// bumps the task's fencing counter, then the INSERT of the occurrence row,
// whose primary key (task, scheduled_at, attempt) turns a second claim into
// ErrConflict. Finish and reap are one script each: the UPDATE of the
// occurrence, checked against its owner and lease, and the trim of history
// beyond history_limit.
//
// # Queues
//
// The shared SQL store's queue runtime (backends/internal/sqlstore), with
// MySQL's own paths: see queue_runtime.go, queue_claim.go, queue_push.go,
// queue_ack.go and queue_park.go. Partition locks (claim: partition; a
// claim holds one free lock row of the queue's partitions and takes the
// first claimable jobs of the whole queue in claim order, the highest
// priority first, then the oldest, the jobs of one key one at a time in
// push order) or a FOR UPDATE SKIP LOCKED claim across the queue that
// ignores keys (claim: skip_locked, by priority, then available_at), each
// one script; pushes in one
// statement, batched; acks grouped into one DELETE; idle workers parked
// and woken by pushes and the other writes that make jobs claimable
// (queue.go).
//
// # Deadlocks and races
//
// A transaction or script that InnoDB rolls back for a deadlock (1213) or a
// lock wait timeout (1205) is run again, up to six times, after a jittered
// backoff doubling from 2 ms. Gap locks make such deadlocks possible when
// two transactions create the same absent row (a new semaphore, the first
// leader or apply lock row); a duplicate key on those inserts (1062) is
// retried the same way, and the retry then finds the row. A statement that
// changes one holder's row reaches it by a unique key (the owner index with
// a hint, or the primary key), never by a range: on a small table the
// optimizer reads an instance's whole primary key range for a statement that
// names the owner, locking its neighbours' rows, and two releases of one
// instance then deadlock until the retries run out.
//
// # The leader lease and fencing
//
// The leader row is taken by one guarded UPDATE (free, expired or resigned:
// anyone, the next term; the live holder itself: renewed in its term) and
// RenewLeader matches only holder, term and an unexpired lease, River's
// LeaderAttemptReelect. A missing row (fresh store, or deleted behind
// coordd's back) is inserted with term = backend now in microseconds; a new
// semaphore's or task's fencing counter starts the same way, and updates
// keep it, so numbers stay above any earlier ones after a delete and
// re-create or a replace from another backend. Every bump of a term or a
// fencing counter takes one above the last and at least backend now in µs
// (nextTerm, nextFencing), so that a failover to a replica that missed
// the last bumps does not hand a number out again.
//
// # Schema
//
// Numbered migrations are embedded from migrations/*.sql and recorded in
// <prefix>schema_migrations with min_binary, with SQLite's rule and its
// ErrSchemaTooNew (see migrate.go). DDL is not transactional on MariaDB or
// MySQL, so each statement is idempotent (CREATE TABLE IF NOT EXISTS,
// indexes inline; ADD COLUMN, which MySQL cannot make conditional, is
// skipped on a re-run by its error 1060) and Migrate holds GET_LOCK on
// "coordd-migrate-" plus a hash of the database and prefix, waiting up to a
// minute, so hosts migrating at once serialise. Schema never writes. A
// store opened ReadOnly never creates or migrates anything; a database
// without the tables reads as empty. The database itself must exist.
//
// # MySQL 8.0
//
// Written for both. Known differences: MySQL 8.0.20+ deprecates VALUES() in
// ON DUPLICATE KEY UPDATE and INTO before FROM (both still accepted, with a
// warning); MySQL has no ADD COLUMN IF NOT EXISTS (see Schema), no KILL
// QUERY ID (the processlist has no query id; a late wake-up may then end a
// connection's next statement, which is retried) and no TIME_MS in the
// processlist; SKIP LOCKED, RELEASE_ALL_LOCKS and several named locks per
// session exist in both (MariaDB 10.6+, MySQL 8.0); neither has UPDATE ...
// RETURNING; KILL of another user's statement needs CONNECTION_ADMIN on
// MySQL 8 and CONNECTION ADMIN on MariaDB 10.5+. GET_LOCK names are limited
// to 64 characters on both.
package mysql
