// Package chaos is the fault-injection harness behind `make chaos` and its
// shortened run in the test suite (TestChaos). It proves coordd's promises
// from evidence that coordd does not write.
//
// For each backend it starts a private server (MariaDB, PostgreSQL, Redis
// with appendonly yes, memcached; the embedded SQLite store has none), three
// `coordd run` daemons, three `coordd sem run` clients in a loop, two
// `coordd queue work` workers and a pusher (2 jobs/s), all real processes
// built from cmd/coordd. The spec has two cron tasks, tick (`@every 2s`,
// catch_up all, overlap allow, on_host_loss retry, run_lease 3s) and
// defaults (`@every 2s`, catch_up all, every other field at its default:
// overlap forbid, run_lease 30s, retry_backoff 30s), one semaphore
// (limit 2, lease 3s) and one queue (visibility_timeout 3s). Every command
// sleeps 0.5-3 s, but the defaults task's 0.1-1 s, so that the times that
// waited for a run lost with its host catch up while the run settles.
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
//   - every scheduled time started (no miss under catch_up all; under
//     overlap forbid a time may be skipped only behind a run that ended, so
//     whose host lived, and that had run as long as the time between the
//     two scheduled times), no start while a run of another time still ran
//     (overlap forbid) unless that run's host was lost, no
//     (scheduled time, attempt) started twice, no fencing token given twice,
//     and every second attempt followed the loss of the first one's host (a
//     kill or stop of that daemon, or a backend restart, while it ran);
//   - the witness never counted more living holders than the limit;
//   - every pushed job was done, no (job, attempt) started twice, and every
//     second delivery is explained by a lease that ran out: its worker
//     killed, a backend restart while it ran, or a push that failed and was
//     retried. Lost writes are allowed for what they are: a stale Redis
//     failover's, and on PostgreSQL a claim that a crash lost before its
//     WAL was flushed (the attempt then starts again).
//
// A fault "hits mid-operation" when its target had a command running; a run
// where none did proves nothing and fails.
//
// On the networked backends every process reaches the server through a
// proxy in the test process (internal/netfault), which tells the processes
// apart by the socket's owner in /proc; network faults strike one daemon,
// sem run client or worker at a time: a partition (bytes held both ways,
// connections open) or one-way loss for 1-7 s, 100 ms +- 50 of latency or
// a link of 2-8 KB/s for 3-8 s, or resets of every connection for up to
// 1.5 s. Each kind happens at least once per backend. The witness is also
// the resource that fencing protects: it keeps the highest token seen per
// slot, and a holder whose token is not above it, or that still runs when
// a newer token of its slot arrives, is a violation.
//
// The redis-sentinel backend (TestSentinelFailoverUnderLoad, and `make
// chaos`) runs Redis as a primary, a replica and three Sentinels, with
// SENTINEL FAILOVER in place of the backend restart. The
// redis-stale-failover backend runs Redis with a replica and, in place of
// the restart, RedisFailover: replication cut, writes on the primary, the
// replica promoted and the proxy moved to it. Its checks allow what such a
// failover loses and nothing more: a push made between the cut and the
// promotion may be lost, and an occurrence or a job attempt claimed then
// may start twice.
//
// Environment: COORDD_CHAOS_DURATION (default 45s per backend),
// COORDD_CHAOS_SEED (default: the time; printed, so a failing schedule can
// be replayed), COORDD_CHAOS_BACKENDS (default
// sqlite,mysql,postgres,redis,redis-stale-failover,memcached;
// redis-sentinel too, and make chaos runs them all),
// COORDD_CHAOS_REPORT (a file to write the table to).
package chaos
