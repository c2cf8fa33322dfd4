package scheduler

import (
	"context"
	"fmt"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// overlapReason is the reason recorded for a time skipped under overlap
// forbid.
const overlapReason = "overlap: previous run still running"

// due handles one due task: overlap, catch-up, claim. It returns how soon
// the task must be looked at again when a time waits for a run this
// scheduler supervises (zero: no particular time).
func (s *Scheduler) due(ctx context.Context, cb *cronBackend, d backends.DueTask, now time.Time) time.Duration {
	t, err := parseTask(d.Name, d.Def)
	if err != nil {
		s.log.Error("cannot schedule task", "task", d.Name, "error", err)
		return 0
	}
	dt := s.dueTimesOf(ctx, cb, t, d.NextExec, now)
	forbid := t.def.Overlap != spec.OverlapAllow
	if forbid {
		if wake, decided := dt.overlap(now); decided {
			return wake
		}
	}
	delete(s.waitingFor, t.name)
	first, ok := dt.catchUp(now)
	if !ok {
		return 0
	}
	if first, ok = dt.startingDeadline(first, now); !ok {
		return 0
	}
	dt.claimFrom(first, forbid)
	return 0
}

// dueTimes is one due task's due times, as due decides them: overlap
// (skip or wait), catch-up (skip the missed ones its policy drops), then
// claim the rest in order.
type dueTimes struct {
	s   *Scheduler
	ctx context.Context
	cb  *cronBackend
	t   *task
	// times are t1 = next_exec < t2 < ... <= now (at most maxEnumerate).
	times []time.Time
}

// dueTimesOf enumerates the due times of t from nextExec up to now.
func (s *Scheduler) dueTimesOf(ctx context.Context, cb *cronBackend, t *task, nextExec, now time.Time) *dueTimes {
	times := []time.Time{nextExec}
	for len(times) < maxEnumerate {
		n := t.sched.Next(times[len(times)-1])
		if n.IsZero() || n.After(now) {
			break
		}
		times = append(times, n)
	}
	return &dueTimes{s: s, ctx: ctx, cb: cb, t: t, times: times}
}

// next is next_exec after claiming times[i].
func (dt *dueTimes) next(i int) time.Time {
	if i+1 < len(dt.times) {
		return dt.times[i+1]
	}
	return dt.t.sched.Next(dt.times[i])
}

// skip records one skip for times[i], moving next_exec to times[j] (or
// after the last). It reports whether the skip was recorded.
func (dt *dueTimes) skip(i, j int, reason string) bool {
	s, t := dt.s, dt.t
	nx := dt.next(j - 1)
	_, err := dt.cb.ClaimOccurrence(dt.ctx, backends.ClaimRequest{
		Task: t.name, ScheduledAt: dt.times[i], Next: nx, Attempt: 1,
		Owner: newOwner(), Host: s.cfg.Host, Skip: reason,
	})
	if err != nil {
		if !refused(err) && dt.ctx.Err() == nil {
			s.log.Warn("recording a skipped occurrence failed", "task", t.name, "error", err)
		}
		return false
	}
	s.log.Info("skipped", "task", t.name, "scheduled_at", dt.times[i], "reason", reason)
	return true
}

// overlap decides, under overlap forbid, the times of a task with live
// runs: wait, or skip what the running command overlaps. decided is false
// when no run is live (the times go on to catch-up); otherwise wake is
// how soon to look again (zero: no particular time).
func (dt *dueTimes) overlap(now time.Time) (wake time.Duration, decided bool) {
	s, t, times := dt.s, dt.t, dt.times
	running, err := dt.cb.Running(dt.ctx, t.name)
	if err != nil {
		if dt.ctx.Err() == nil {
			s.log.Warn("reading the running occurrences failed", "task", t.name, "error", err)
		}
		return 0, true
	}
	if len(running) == 0 {
		return 0, false
	}
	s.reapWhenExpired(running, now)
	o, ok, commands := s.classify(running)
	if ok {
		// Its host may have died or frozen: nothing is known to
		// run, so nothing is skipped. The times wait (next_exec
		// stays) until the run ends or its lease runs out and it
		// is reaped; then catch_up decides.
		if s.waitingFor[t.name] != o.RunID {
			s.waitingFor[t.name] = o.RunID
			s.log.Info("due times wait for a run of another process, which may have died", "task", t.name,
				"next_exec", times[0], "run_host", o.Host, "run_id", o.RunID, "run_scheduled_at", o.ScheduledAt,
				"lease_expires_at", o.ExpiresAt)
		}
		return 0, true
	}
	// Only a command that still runs can overlap; a run whose
	// command ended is being recorded: the times wait for it (its
	// end wakes the loop).
	if t.def.Overlap == spec.OverlapReplace {
		// Stop the runs this scheduler supervises; the due time waits
		// for their record (which wakes the loop), then starts.
		if len(commands) > 0 {
			reason := "overlap replace: stopped for the next scheduled time"
			s.log.Info("stopping the running run for the next one (overlap replace)", "task", t.name, "next_exec", times[0])
			s.replaceRuns(commands, reason)
		}
		return 0, true
	}
	n, wake := overlapDecision(commands, times, now)
	if n > 0 {
		reason := overlapReason
		if n > 1 {
			reason = fmt.Sprintf("%s: skipped %d", overlapReason, n)
		}
		if !dt.skip(0, n, reason) {
			return 0, true
		}
	}
	return wake, true
}

// catchUp skips the missed times the task's catch_up policy drops and
// returns the index of the first time to claim. It reports false when
// nothing is to be claimed: a skip failed, or under catch_up none the
// last time is more than noneLate late (and skipped).
func (dt *dueTimes) catchUp(now time.Time) (first int, ok bool) {
	t, times := dt.t, dt.times
	k := len(times)
	switch t.def.CatchUp {
	case spec.CatchUpAll:
		if limit := max(t.def.CatchUpLimit, 1); k > limit {
			if !dt.skip(0, k-limit, fmt.Sprintf("catch_up_limit: skipped %d", k-limit)) {
				return 0, false
			}
			first = k - limit
		}
	case spec.CatchUpNone:
		if k > 1 {
			if !dt.skip(0, k-1, fmt.Sprintf("catch_up none: skipped %d missed", k-1)) {
				return 0, false
			}
			first = k - 1
		}
		if now.Sub(times[k-1]) > noneLate {
			dt.skip(k-1, k, fmt.Sprintf("catch_up none: more than %s late", noneLate))
			return 0, false
		}
	default: // once
		if k > 1 {
			if !dt.skip(0, k-1, fmt.Sprintf("catch_up once: skipped %d missed", k-1)) {
				return 0, false
			}
			first = k - 1
		}
	}
	return first, true
}

// missedReason starts the reason recorded for times past the task's
// starting_deadline.
const missedReason = "missed: starting_deadline"

// startingDeadline records as one skip the times from times[first] on
// that are later than the task's starting_deadline (they would start too
// late to be of use) and returns the index of the first one still in time.
// It reports false when none is, or the skip failed.
func (dt *dueTimes) startingDeadline(first int, now time.Time) (int, bool) {
	d := dt.t.def.StartingDeadline
	if d <= 0 {
		return first, true
	}
	k := first
	for k < len(dt.times) && now.Sub(dt.times[k]) > d {
		k++
	}
	if k == first {
		return first, true
	}
	reason := fmt.Sprintf("%s %s passed (%s late)", missedReason, d, now.Sub(dt.times[first]).Round(time.Millisecond))
	if k-first > 1 {
		reason = fmt.Sprintf("%s: skipped %d", reason, k-first)
	}
	if !dt.skip(first, k, reason) || k == len(dt.times) {
		return 0, false
	}
	return k, true
}

// claimFrom claims and starts times[first:] in order while this scheduler
// leads; with forbid only the first, since the next one waits for it.
func (dt *dueTimes) claimFrom(first int, forbid bool) {
	t := dt.t
	for i := first; i < len(dt.times); i++ {
		if !dt.s.leading() {
			return
		}
		// With forbid the claim itself checks that no run is live: one
		// started since Running was read (a manual run) refuses it, and
		// the next pass decides again.
		ok := dt.s.claimAndStart(dt.ctx, dt.cb, t, backends.ClaimRequest{
			Task: t.name, ScheduledAt: dt.times[i], Next: dt.next(i), Attempt: 1, Lease: t.def.RunLease, Exclusive: forbid,
		})
		if !ok || forbid {
			return // with forbid, the next one waits for this one
		}
	}
}

// overlapDecision decides, under overlap forbid, the due times of a task
// whose live runs are all this scheduler's own; running are those whose
// command has not ended (it supervises them, so they are known to run;
// none: every time waits). It returns how many of the earliest times are
// skipped, and how soon the first of the others must be decided again
// (zero: none left); now is backend time.
//
// A time t is skipped when a run r has been running for at least
// t - r.ScheduledAt: r would have overlapped t even had it started at its
// own scheduled time, as a command longer than the period does. A later
// time waits for r and runs when r ends, as catch_up says: r started late
// (a catch-up run, a retry after a host loss), and the lateness is not
// the command's. A manual run is scheduled at its start, so it skips every
// time that falls due while it runs.
func overlapDecision(running []backends.Occurrence, times []time.Time, now time.Time) (skipped int, wake time.Duration) {
	overlaps := func(at time.Time) bool {
		for _, r := range running {
			if now.Sub(r.StartedAt) >= at.Sub(r.ScheduledAt) {
				return true
			}
		}
		return false
	}
	for skipped < len(times) && overlaps(times[skipped]) {
		skipped++
	}
	if skipped == len(times) {
		return skipped, 0
	}
	at := times[skipped]
	for _, r := range running {
		w := at.Sub(r.ScheduledAt) - now.Sub(r.StartedAt) + reapMargin
		if wake == 0 || w < wake {
			wake = w
		}
	}
	return skipped, wake
}
