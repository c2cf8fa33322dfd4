package scheduler

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// RunManual runs task now in the caller (`coordd cron run`): the run is
// recorded as manual; overlap and the semaphore apply. It returns the exit
// code: the child's, 75 when overlap forbids it (recorded as skipped),
// 122 when the run lease was lost, 126/127 when the command cannot start.
func (s *Scheduler) RunManual(ctx context.Context, b backends.Backend, name string, stdout, stderr io.Writer) (int, error) {
	cb, err := asCron(b)
	if err != nil {
		return exitCoorddFailed, err
	}
	states, err := cb.ObserveCrons(ctx, []string{name})
	if err != nil {
		return exitCoorddFailed, err
	}
	st := states[name]
	if st == nil {
		return exitCoorddFailed, notAppliedError{task: name, backend: b.Name()}
	}
	t, err := parseTask(name, st.Def)
	if err != nil {
		return exitCoorddFailed, err
	}
	// With overlap forbid the claim is refused while any run of the task
	// is live, checked in the claim itself: an operator's run does not
	// wait (exit 75), whether that run is known to run or not.
	req := backends.ClaimRequest{Task: name, Attempt: 1, Owner: newOwner(), Host: s.cfg.Host, Lease: t.def.RunLease, Manual: true,
		Exclusive: t.def.Overlap != spec.OverlapAllow}
	s.supervise(req.Owner)
	defer s.release(req.Owner)
	sent := time.Now()
	occ, err := cb.ClaimOccurrence(ctx, req)
	if errors.Is(err, backends.ErrHeld) {
		req.Skip, req.Exclusive = overlapReason, false
		if _, err := cb.ClaimOccurrence(ctx, req); err != nil {
			return exitCoorddFailed, err
		}
		return exitNotAcquired, nil
	}
	if err != nil {
		return exitCoorddFailed, err
	}
	res, code := s.execute(ctx, cb, t, occ, sent, stdout, stderr, nil)
	if res.Status == statusNotRecorded {
		return exitCoorddFailed, errors.New(res.Error)
	}
	return code, nil
}

// notAppliedError is RunManual's error for a task the backend does not
// hold. It matches backends.ErrNotFound without appending its text: "not
// applied" says it already, once.
type notAppliedError struct{ task, backend string }

func (e notAppliedError) Error() string {
	return fmt.Sprintf("cron task %q is not applied on backend %q; run coordd apply", e.task, e.backend)
}

func (e notAppliedError) Unwrap() error { return backends.ErrNotFound }
