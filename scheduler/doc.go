// Package scheduler runs cron tasks: while this host's elector leads, it
// claims due occurrences in the backends that hold cron tasks and runs each
// one in its own goroutine under internal/child.
//
// Every claim is a compare-and-swap in the backend (next_exec moves from the
// claimed time to the next one in the same transaction), so even two hosts
// that both believe they lead never start one occurrence twice. The task
// definition always comes from the applied spec stored with the task, never
// from local files.
//
// The loop sleeps until the earliest next_exec, estimated on this host's
// clock plus the backend clock's measured offset (one Now every ten
// minutes; whether a task is due is still the backend's decision), and at
// most Config.Poll (20 s), which bounds how late a task applied behind this
// host's back is noticed; Wake (the daemon calls it after every reload and
// apply, a run calls it when it ends) and a leadership change wake it at
// once. Each pass claims the due tasks, a page at a time: every task with
// one on-time due time in one ClaimOccurrences call, overlap forbid checked
// in the claim (Exclusive); while pages remain the next is claimed at once
// and sweeps wait (see "Bursts" below). Every Config.Sweep (20 s), and on
// every wake-up, leadership gain, end of a retry's backoff or expiry of the
// run lease of a run that holds back a due task (overlap forbid), the pass
// first reaps occurrences whose run lease expired (marked lost) and claims
// due retries (PendingRetries, filtered by max_attempts, retry_backoff and
// on_host_loss). An idle leader thus reads the backend three times per
// 20 s.
//
// Catch-up after downtime, with due times t1 = next_exec < t2 < ... <= now:
//
//   - all: each runs, in order, one claim each; when more than
//     catch_up_limit are due, one skipped occurrence is recorded first that
//     moves next_exec past the excess oldest ones.
//   - once: one skipped occurrence for t1 moves next_exec to tk; tk runs.
//   - none: as once, but tk is skipped too when it is more than one minute
//     late (a host that was briefly busy still runs the current time).
//
// A paused task (coordd cron pause, or paused: true in its definition) is
// not listed by DueTasks, and the backend refuses its scheduled claims,
// skips and retries in the claim itself (ErrPaused), so a scheduler that
// read the task before it was paused still starts nothing. Its next_exec
// stays at the first time missed while paused; once resumed, the missed
// times follow catch_up as above, as after a downtime. Resuming from
// another process is noticed within Poll.
//
// # Overlap
//
// Under overlap forbid, due times are decided before catch-up while a run of
// the task is live (overlapDecision):
//
//   - a run this scheduler does not supervise (another host's, which may
//     have died or frozen; a `coordd cron run`) may or may not be alive:
//     the times wait, next_exec unmoved, until it ends or its lease runs
//     out (the loop sweeps then, reapAt) and it is reaped; then catch_up
//     applies as after a downtime;
//   - a run it supervises whose command has not ended is known to run: a
//     time is skipped once that run has been running for as long as the
//     time is after the run's own scheduled time (it would have overlapped
//     it even on time); a later time waits, and the loop looks again when
//     that point comes. A late run (catch-up, retry) thus makes the next
//     time wait, not skip;
//   - a run of its own whose command ended is being recorded: the times
//     wait for it.
//
// Every claim of a forbid task (scheduled, catch-up, retry, manual) is
// Exclusive, so the backend refuses it while any run is live: the decision
// above chooses between skipping and waiting, the claim prevents overlap.
//
// Under overlap replace the claims are Exclusive too, but a due time that
// finds runs it supervises with their commands going stops them instead
// (replaceRuns: TERM, kill_grace, KILL; recorded replaced, not retried)
// and waits for their record, which wakes the loop; the time then goes
// through catch-up. A run of another process is waited for as under
// forbid: nothing here can stop it.
//
// # Retries and leases
//
// A failed or timed-out attempt with attempts left runs again
// as attempt+1 after retry_backoff. A lost attempt does too under
// on_host_loss retry, even when it was the last max_attempts allows: a host
// loss earns one attempt beyond max_attempts (at most max_attempts+1 per
// scheduled time); with on_host_loss fail it is not retried. Manual runs
// (`coordd cron run`) are not retried.
// A task with history_limit 0 loses its failed runs at once and so is never
// retried.
//
// A run of a task with a semaphore takes a slot before its command starts
// and holds it to the end; the semaphore's max_hold, when shorter than the
// task's timeout, stops the command as a timeout would, so a hung command
// cannot keep the slot renewed forever.
//
// A run holds a run lease (run_lease, renewed every run_lease/3, and until
// its result is recorded); the child supervisor kills the command before a
// lease it failed to renew ends, and the run is then recorded as lost.
// Stopping Run never stops a command: Shutdown waits for them until its
// context ends, then stops them (TERM, then KILL after kill_grace); such
// runs are recorded as lost.
//
// # Bursts
//
// Many tasks due at once must not cost a store write, or a process, per run
// before the last one starts. Claims go a page at a time (above). Commands
// start through child's guard, one process for all of them, when coordd's
// main set child.DefaultShim. Results and lease renewals go through a
// coalescer per backend (batch.go): calls made while others are in flight
// leave together as one FinishOccurrences or ExtendOccurrences; and while
// claimed runs are still starting, results wait (at most 2 s), so that the
// starts get the store and the CPU first.
package scheduler
