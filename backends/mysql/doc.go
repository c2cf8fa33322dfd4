// Package mysql is coordd's MySQL/MariaDB backend: a database shared by
// every host of a cluster. It is developed against MariaDB 10.11 and written
// to run on MySQL 8.0 too (differences below).
//
// Implemented: Backend, Migrator, StateStore (inventory, apply log, apply
// lock), SemaphoreAdmin, Semaphores (lease mode), Waiters (with FirstWaiter),
// Leader, CronAdmin/Crons and QueueAdmin/Queues. Not implemented yet:
// semaphore mode session (GET_LOCK slots) and the SLEEP/KILL wake-up of
// semaphore waiters and idle queue workers; until then both poll with a
// bounded backoff (see Waiters below).
//
// Cron: a claim locks the task row (SELECT … FOR UPDATE), checks that
// next_exec still equals the claimed time, moves it and inserts the
// occurrence row, whose primary key (task, scheduled_at, attempt) turns a
// second claim into ErrConflict.
//
// Queues: a claim reads the config under a shared lock, sweeps expired
// leases, then locks one partition row at a time by primary key with FOR
// UPDATE SKIP LOCKED (least recently claimed first) and leases up to max of
// its ready jobs in insert order. Locking one row at a time, not an ORDER BY
// … LIMIT scan, keeps claimers of different partitions from blocking each
// other.
//
// # Tables and the prefix
//
// Every table name starts with the backend's table_prefix, which the spec
// loader validates as ^[a-zA-Z0-9_]{0,32}$ (Open checks it again). Only the
// prefix is spliced into SQL text, inside backticks; names, owners and every
// other value are bound parameters. Queries are named constants with a {p}
// placeholder, and each Store substitutes its prefix once per query. The
// driver interpolates parameters client-side (interpolateParams), so a
// statement costs one round trip and nothing is prepared. Batched statements
// (IN lists, multi-row VALUES) are a constant head plus one "?" group per
// item. All tables are InnoDB, utf8mb4 with the binary collation, so names
// compare byte for byte as they do in SQLite (the default collation would
// make "A" and "a" one semaphore).
//
// The tables are those of the embedded store: semaphores (config and the
// fencing counter), semaphore_slots (one lock row per slot: state FREE or
// LOCK, owner token, host, pid, fencing, acquired_at, expires_at),
// semaphore_waiters (name, owner, seq, expires_at), leader (one row: holder,
// term, expires_at), inventory, apply_log, apply_lock (one row: owner,
// expires_at), cron_tasks, cron_occurrences, queues, queue_partitions,
// queue_jobs, and schema_migrations.
//
// # The clock
//
// The backend clock is the server's UTC_TIMESTAMP(6), read inside every
// statement that compares a lease or an expiry (nowSQL); never NOW(6),
// which follows the session time zone, and never the host clock. Times are
// stored as BIGINT microseconds since the Unix epoch, UTC, computed as
// TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)), which involves
// no time zone (UNIX_TIMESTAMP of a DATETIME would). Storing integers keeps
// the schema and the code parallel to the SQLite store and leaves the driver
// no time zone to convert. Now is SELECT UTC_TIMESTAMP(6); Open forces
// parseTime with loc=UTC (and the session time_zone to +00:00) whatever the
// DSN says, so times come back in UTC. The server fixes the current time
// once per statement, so all uses of nowSQL in one statement agree.
//
// # Transactions and the acquire guard
//
// Write transactions run at the default REPEATABLE READ and take row locks
// before deciding anything: every transaction that changes a semaphore's
// slots or waiters first locks its semaphores row (SELECT ... FOR UPDATE),
// so they serialise per semaphore, and reads it acts on are locking reads.
// TryAcquire, in one transaction: locks the semaphore row, counts the live
// holders (state = 'LOCK' AND expires_at > now); at or above the stored
// limit it refuses with ErrNoSlot. Otherwise one UPDATE ... ORDER BY slot
// LIMIT 1 takes the lowest slot guarded by (state = 'FREE' OR expires_at <=
// now) against its own instant, so a live slot is never overwritten; no row
// matched (fewer slot rows than the limit: drift) is ErrNoSlot too. The
// fencing counter is bumped in the same transaction. The guard uses <= where
// the live test uses >, so every slot is exactly one of live or free.
//
// The driver is opened with clientFoundRows, so an UPDATE reports the rows
// it matched, not the rows it changed: a renewal that lands on the same
// microsecond still counts. MariaDB has no UPDATE ... RETURNING, so a
// renewal reads its new expiry back in the same transaction.
//
// # Retirement on release
//
// As in SQLite: lowering a limit deletes free slots at once and leaves held
// ones alone; when a holder releases and the semaphore has more slots than
// max(limit, live holders), surplus free or expired slots are deleted instead
// of kept free. Release of an expired lease still clears it and returns
// ErrLost.
//
// # Deadlocks and races
//
// A transaction that InnoDB rolls back for a deadlock (1213) or a lock wait
// timeout (1205) is run again, up to six times, after a jittered backoff
// doubling from 2 ms. Gap locks make such deadlocks possible when two
// transactions create the same absent row (a new semaphore, the first leader
// or apply lock row); a duplicate key on those inserts (1062) is retried the
// same way, and the retry then finds the row.
//
// # The leader lease and fencing
//
// The leader row is taken by one UPDATE (free, expired or resigned: anyone,
// term + 1; the live holder itself: renewed in its term) and RenewLeader only
// matches holder, term and an unexpired lease. A missing row (fresh store, or
// deleted behind coordd's back) is inserted with term = backend now in
// microseconds; a new semaphore's fencing counter starts the same way, and
// updates keep it, so numbers stay above any earlier ones after a delete and
// re-create or a replace from another backend.
//
// # Waiters
//
// EnterWait, holding the semaphore row lock, deletes expired waiter records,
// refuses with ErrTooManyWaiters at max_waiting, and queues the owner with a
// ticket above every live waiter's; re-entering renews and keeps the place.
// FirstWaiter names the head of the line. WaitSemaphore polls a cheap read
// with a backoff from 2 ms to 20 ms. A push wake-up (a releaser waking
// waiters blocked in SELECT SLEEP(...) with KILL QUERY) comes in a later
// session.
//
// # Schema
//
// Numbered migrations are embedded from migrations/*.sql and recorded in
// <prefix>schema_migrations with min_binary, with SQLite's rule and its
// ErrSchemaTooNew (see migrate.go). DDL is not transactional on MariaDB or
// MySQL, so each statement is idempotent (CREATE TABLE IF NOT EXISTS, indexes
// inline) and Migrate holds GET_LOCK on "coordd-migrate-" plus a hash of the
// database and prefix (lock names are server-wide and at most 64
// characters), waiting up to a minute, so hosts migrating at once serialise.
// Schema never writes. A store opened ReadOnly never creates or migrates
// anything; a database without the tables reads as empty (LoadState empty,
// Observe* empty maps, CurrentLeader ErrNotFound). The database itself must
// exist: Open fails on an unknown database, read-only or not.
//
// # Connections
//
// The pool allows 16 open (and idle) connections, closes connections idle
// for a minute and recycles every connection after five minutes (under
// wait_timeout and proxy idle cut-offs, and so that a failover is picked
// up). RoundTrips counts one per statement plus one per transaction.
//
// # MySQL 8.0
//
// Written for both. Known differences: MySQL 8.0.20+ deprecates VALUES() in
// ON DUPLICATE KEY UPDATE in favour of row aliases (still accepted, with a
// warning; MariaDB has no row aliases); SKIP LOCKED and NOWAIT exist in both
// (MariaDB 10.6+, MySQL 8.0), which the queue runtime will use; MariaDB has
// INSERT/DELETE ... RETURNING but neither has UPDATE ... RETURNING;
// transaction_isolation is called tx_isolation before MariaDB 11.1 (the
// store does not set it). GET_LOCK names are limited to 64 characters on
// both.
package mysql
