// Package postgres is the PostgreSQL backend: every primitive of coordd
// (semaphores, the leader lease, cron claims, queues, the cluster's state)
// in tables of one schema, on the SQL shared by every SQL store
// (backends/internal/sqlstore) in its Standard flavor.
//
// # Connections
//
// The shared code speaks database/sql, so the store runs pgx (the standard
// PostgreSQL driver for Go) through pgx's stdlib adapter: statements are
// prepared and cached per connection by pgx, sessions run in UTC, and
// every value is a bound parameter. Identifiers (the schema, the table
// prefix) are validated and quoted; nothing a user types reaches SQL text.
//
// # Clock
//
// Leases and due times compare with the server's clock, never a host's:
// {now} is statement_timestamp() in microseconds, one instant per
// statement. Times are stored as bigint microseconds since the epoch.
//
// # Fencing
//
// Fencing numbers and leader terms come from counter columns bumped in the
// same statement that grants the slot or the term, as GREATEST(c + 1,
// now in µs). A counter therefore only grows on one server, and after a
// failover to a replica that missed the last bumps (asynchronous
// streaming replication) the new primary's clock is already past every
// number handed out before, as long as the clocks agree within the time
// the switch took. A sequence would not do better: sequences are not
// replicated ahead of their use either, and its values are not bound to
// the row that was granted.
//
// # Claims
//
// Cron occurrences are claimed by a conditional update of next_exec, so two
// hosts never start the same scheduled time (a batch of on-time claims in
// one call of a server function, cron_claim.go); queue jobs are claimed in
// one statement that locks the jobs it takes (FOR UPDATE SKIP LOCKED), with
// the per-key and partition rules of every store (queue_claim.go). A
// lease-mode acquire and release are one call each of a server function
// (semaphore_lease.go): what must read after a row lock cannot be one
// statement, whose snapshot predates the lock.
//
// # Commits that do not wait for the WAL flush
//
// A commit waits for the WAL flush (the default synchronous_commit) unless
// a crash losing it can only take back something the crash ends anyway or
// that comes back by itself: a queue claim (the job is delivered again), a
// lease-mode release (the slot stays held until its lease ends), a
// session-mode grant and release (the crash ends the session that holds
// the lock). Pushes, acks, acquires and cron claims wait. The WAL is
// flushed in order, so a commit that waits makes every earlier one
// durable: an ack, the claim it follows.
//
// # Migrations
//
// Every pending migration runs in one transaction under a transaction
// advisory lock: all or nothing, and once when several hosts start
// together.
package postgres
