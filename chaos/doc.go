// Package chaos is the fault-injection harness behind `make chaos` and its
// shortened run in the test suite (TestChaos). It proves coordd's promises
// from evidence that coordd does not write.
//
// For each backend it starts a private server (MariaDB, Redis with
// appendonly yes, memcached; the embedded SQLite store has none), three
// `coordd run` daemons, three `coordd sem run` clients in a loop, two
// `coordd queue work` workers and a pusher (2 jobs/s), all real processes
// built from cmd/coordd. The spec has one cron task (`@every 2s`, catch_up
// all, overlap allow, on_host_loss retry, run_lease 3s), one semaphore
// (limit 2, lease 3s) and one queue (visibility_timeout 3s). Every command
// sleeps 0.5-3 s.
//
// On a schedule drawn from a seed it kills daemons with kill -9 (the leader
// half of the time) and starts them again, freezes one with SIGSTOP for
// longer than the leader and run leases together and then continues it,
// kills sem run clients and queue workers with kill -9, and kills and
// restarts the backend server. The embedded store's outage is a stall
// instead: the harness holds its write lock. The schedule is raised to
// floors (by default 5 daemon kills and 1 backend restart).
//
// The evidence (see evidence.go for the formats) is written by the
// commands: an append-only log of cron starts and ends, a witness that
// counts living semaphore holders under flock(1), and a log of job starts
// and ends. The checks:
//
//   - every scheduled time started (no miss under catch_up all), no
//     (scheduled time, attempt) started twice, no fencing token given twice,
//     and every second attempt followed the loss of the first one's host (a
//     kill or stop of that daemon, or a backend restart, while it ran);
//   - the witness never counted more living holders than the limit;
//   - every pushed job was done, and every second delivery is explained by
//     a lease that ran out: its worker killed, a backend restart while it
//     ran, or a push that failed and was retried.
//
// A fault "hits mid-operation" when its target had a command running; a run
// where none did proves nothing and fails.
//
// Environment: COORDD_CHAOS_DURATION (default 45s per backend),
// COORDD_CHAOS_SEED (default: the time; printed, so a failing schedule can
// be replayed), COORDD_CHAOS_BACKENDS (default sqlite,mysql,redis,memcached),
// COORDD_CHAOS_REPORT (a file to write the table to).
package chaos
