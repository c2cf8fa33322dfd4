package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// reapMargin is how long after a blocking run's lease expiry (backend
// time, estimated here) the loop sweeps for it.
const reapMargin = 50 * time.Millisecond

// reapWhenExpired asks for a sweep when the earliest of running's leases
// expires; now is backend time.
func (s *Scheduler) reapWhenExpired(running []backends.Occurrence, now time.Time) {
	for _, o := range running {
		at := time.Now().Add(o.ExpiresAt.Sub(now) + reapMargin)
		if s.reapAt.IsZero() || at.Before(s.reapAt) {
			s.reapAt = at
		}
	}
}

// clockOffset is a backend clock's offset from this host's.
type clockOffset struct {
	d  time.Duration
	at time.Time
}

// cronBackend is one backend with its cron tasks.
type cronBackend struct {
	backends.Backend
	backends.Crons
}

func asCron(b backends.Backend) (*cronBackend, error) {
	c := b.Crons()
	if c == nil {
		return nil, fmt.Errorf("backend %q (%s) cannot hold cron tasks: %w", b.Name(), b.Type(), backends.ErrUnsupported)
	}
	return &cronBackend{Backend: b, Crons: c}, nil
}

// pass does one round on backend bn: with sweep, reap and retries first;
// then the due tasks. It returns how long the loop may sleep as far as b is
// concerned and, with sweep, how long until the next pending retry is due.
func (s *Scheduler) pass(ctx context.Context, bn string, b backends.Backend, sweep bool) (sleep, retryIn time.Duration) {
	sleep, retryIn = s.cfg.Poll, s.cfg.Sweep
	cb, err := asCron(b)
	if err != nil {
		return sleep, retryIn
	}
	if sweep {
		s.reap(ctx, cb)
		retryIn = s.retries(ctx, cb)
		// Before the due tasks: a task armed here is claimed in this pass.
		s.triggerAfter(ctx, bn, cb)
	}
	due, nextAt, err := cb.DueTasks(ctx, batch)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("reading due cron tasks failed", "backend", b.Name(), "error", err)
		}
		return sleep, retryIn
	}
	var now time.Time
	if len(due) > 0 {
		if now, err = s.now(ctx, bn, cb); err != nil {
			return sleep, retryIn
		}
	}
	// Tasks with one on-time due time, the burst case, are claimed
	// together in one call; catch-up goes one task at a time.
	var items []claimItem
	// wake: how soon a task that waits for a run of its own must be
	// looked at again (overlapDecision); zero: no such task.
	var wake time.Duration
	dueOne := func(d backends.DueTask) {
		if w := s.due(ctx, cb, d, now); w > 0 && (wake == 0 || w < wake) {
			wake = w
		}
	}
	for _, d := range due {
		if !s.leading() {
			return sleep, retryIn
		}
		t, err := parseTask(d.Name, d.Def)
		if err != nil {
			s.log.Error("cannot schedule task", "task", d.Name, "error", err)
			continue
		}
		next := t.sched.Next(d.NextExec)
		// A task whose times wait for a run of another process takes the
		// one-task path, which reads the live runs before any claim: while
		// it waits, a pass costs it one read, not a refused claim.
		_, waiting := s.waitingFor[d.Name]
		if !waiting && (next.IsZero() || next.After(now)) && (t.def.CatchUp != spec.CatchUpNone || now.Sub(d.NextExec) <= noneLate) {
			items = append(items, claimItem{t: t, due: d, req: backends.ClaimRequest{
				Task: t.name, ScheduledAt: d.NextExec, Next: next, Attempt: 1, Lease: t.def.RunLease,
				Exclusive: t.def.Overlap != spec.OverlapAllow,
			}})
			continue
		}
		dueOne(d)
	}
	for _, it := range s.claimAndStartMany(ctx, cb, items) {
		// A run of the task is live (overlap forbid): the one-task path
		// reads it and decides whether the time waits or is skipped.
		if !s.leading() {
			return sleep, retryIn
		}
		dueOne(it.due)
	}
	switch {
	case len(due) == batch:
		return 0, retryIn
	case len(due) > 0:
		// next_exec moved (or a task waits for a running one): look again
		// soon, as nextAt was read before the claims.
		sleep = busyPoll
	}
	if wake > 0 {
		sleep = min(sleep, wake)
	}
	if !nextAt.IsZero() {
		if now, err = s.estimateNow(ctx, bn, cb); err == nil {
			sleep = min(sleep, nextAt.Sub(now))
		}
	}
	return sleep, retryIn
}

// now reads backend bn's clock (one query) and records its offset from
// this host's.
func (s *Scheduler) now(ctx context.Context, bn string, cb *cronBackend) (time.Time, error) {
	sent := time.Now()
	now, err := cb.Now(ctx)
	if err != nil {
		return time.Time{}, err
	}
	recv := time.Now()
	s.offsets[bn] = clockOffset{d: now.Sub(sent.Add(recv.Sub(sent) / 2)), at: recv}
	return now, nil
}

// estimateNow is backend bn's clock as this host's plus the recorded
// offset, measured again (one query) when older than offsetEvery. It only
// decides how long the loop sleeps: whether a task is due is always the
// backend's decision (DueTasks), so an error in the estimate wakes the loop
// early or late, never runs a task early.
func (s *Scheduler) estimateNow(ctx context.Context, bn string, cb *cronBackend) (time.Time, error) {
	if o, ok := s.offsets[bn]; ok && time.Since(o.at) < offsetEvery {
		return time.Now().Add(o.d), nil
	}
	return s.now(ctx, bn, cb)
}

// reap marks occurrences whose run lease expired as lost; on_host_loss is
// then applied by retries.
func (s *Scheduler) reap(ctx context.Context, cb *cronBackend) {
	exp, err := cb.ExpiredOccurrences(ctx, batch)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("reading expired occurrences failed", "backend", cb.Name(), "error", err)
		}
		return
	}
	for _, o := range exp {
		if err := cb.ReapOccurrence(ctx, o); err != nil {
			if !errors.Is(err, backends.ErrConflict) && ctx.Err() == nil {
				s.log.Warn("reaping failed", "task", o.Task, "error", err)
			}
			continue
		}
		s.log.Warn("occurrence lost: its host stopped renewing the run lease", "task", o.Task,
			"scheduled_at", o.ScheduledAt, "attempt", o.Attempt, "host", o.Host, "run_id", o.RunID)
	}
}

// retries claims the next attempt of failed runs whose backoff elapsed. It
// returns how long until the next pending retry is due (Sweep when none
// is).
func (s *Scheduler) retries(ctx context.Context, cb *cronBackend) time.Duration {
	sleep := s.cfg.Sweep
	pend, err := cb.PendingRetries(ctx, batch)
	if err != nil || len(pend) == 0 {
		if err != nil && ctx.Err() == nil {
			s.log.Warn("reading pending retries failed", "backend", cb.Name(), "error", err)
		}
		return sleep
	}
	var names []string
	for _, r := range pend {
		names = append(names, r.Task)
	}
	states, err := cb.ObserveCrons(ctx, names)
	if err != nil {
		return sleep
	}
	now, err := cb.Now(ctx)
	if err != nil {
		return sleep
	}
	var items []claimItem
	for _, r := range pend {
		st := states[r.Task]
		if st == nil || r.Manual {
			continue // deleted task; manual runs are retried by whoever ran them
		}
		if st.IsPaused() {
			continue // retried once resumed, if its backoff allows (the claim refuses it meanwhile)
		}
		t, err := parseTask(r.Task, st.Def)
		if err != nil || !t.retryable(r) {
			continue
		}
		if at := r.FinishedAt.Add(t.def.RetryBackoff); at.After(now) {
			sleep = min(sleep, at.Sub(now))
			continue
		}
		// With overlap forbid a retry waits for the running one: its
		// claim is refused (ErrHeld) and the next sweep tries again.
		items = append(items, claimItem{t: t, req: backends.ClaimRequest{
			Task: r.Task, ScheduledAt: r.ScheduledAt, Attempt: r.Attempt + 1, Lease: t.def.RunLease,
			Exclusive: t.def.Overlap != spec.OverlapAllow,
		}})
	}
	if !s.leading() {
		return sleep
	}
	s.claimAndStartMany(ctx, cb, items)
	return sleep
}
