package scheduler

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	"github.com/coordd/coordd/backends"
)

// claimAndStart claims req and starts the occurrence in its own goroutine.
func (s *Scheduler) claimAndStart(ctx context.Context, cb *cronBackend, t *task, req backends.ClaimRequest) bool {
	if !s.addRuns(1) {
		return false
	}
	req.Owner, req.Host = newOwner(), s.cfg.Host
	s.supervise(req.Owner)
	sent := time.Now()
	occ, err := cb.ClaimOccurrence(ctx, req)
	if err != nil {
		s.release(req.Owner)
		s.runs.Done()
		s.claimFailed(ctx, t, req, err)
		return false
	}
	s.start(cb, t, occ, sent)
	return true
}

// claimItem is one claim of a batch: its task and request, and the due
// task it claims (zero for a retry).
type claimItem struct {
	t   *task
	req backends.ClaimRequest
	due backends.DueTask
}

// claimAndStartMany claims items in one ClaimOccurrences call and starts
// each occurrence claimed in its own goroutine, without waiting for any
// other store write. It returns the items whose claim found a live run of
// their task (ErrHeld).
func (s *Scheduler) claimAndStartMany(ctx context.Context, cb *cronBackend, items []claimItem) []claimItem {
	if len(items) == 0 || !s.addRuns(len(items)) {
		return nil
	}
	reqs := make([]backends.ClaimRequest, len(items))
	for i, it := range items {
		reqs[i] = it.req
		reqs[i].Owner, reqs[i].Host = newOwner(), s.cfg.Host
		s.supervise(reqs[i].Owner)
	}
	sent := time.Now()
	res, err := cb.ClaimOccurrences(ctx, reqs)
	if err != nil {
		// A claim made anyway is not this scheduler's to supervise: it is
		// reaped when its lease runs out.
		for _, r := range reqs {
			s.release(r.Owner)
		}
		s.runs.Add(-len(items))
		if ctx.Err() == nil {
			s.log.Warn("claim failed", "claims", len(items), "error", err)
		}
		return nil
	}
	s.log.Debug("claimed due occurrences", "backend", cb.Name(), "claims", len(items), "took", time.Since(sent))
	var held []claimItem
	for i, r := range res {
		if r.Err != nil {
			s.release(reqs[i].Owner)
			s.runs.Done()
			if errors.Is(r.Err, backends.ErrHeld) {
				held = append(held, items[i])
			} else {
				s.claimFailed(ctx, items[i].t, reqs[i], r.Err)
			}
			continue
		}
		s.start(cb, items[i].t, r.Occurrence, sent)
	}
	return held
}

// addRuns counts n runs about to be claimed, unless Shutdown began.
func (s *Scheduler) addRuns(n int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.runs.Add(n) // under mu, so that Shutdown's Wait never races an Add
	return true
}

// refused reports whether a claim was refused in the ordinary course:
// another host (or pass) claimed first, or the task was paused after it
// was read.
func refused(err error) bool {
	return errors.Is(err, backends.ErrConflict) || errors.Is(err, backends.ErrPaused)
}

// claimFailed logs a claim that failed for another reason than another
// host (or pass) having claimed it first, the task being paused (the
// backend refuses those in the claim; DueTasks no longer lists it) or,
// with overlap forbid, a run of the task being live (the next pass
// decides again).
func (s *Scheduler) claimFailed(ctx context.Context, t *task, req backends.ClaimRequest, err error) {
	if errors.Is(err, backends.ErrPaused) {
		s.log.Debug("not claimed: the task is paused", "task", t.name, "scheduled_at", req.ScheduledAt, "attempt", req.Attempt)
		return
	}
	if errors.Is(err, backends.ErrHeld) {
		s.log.Debug("not claimed: a run of the task is live", "task", t.name, "scheduled_at", req.ScheduledAt, "attempt", req.Attempt)
		return
	}
	if !errors.Is(err, backends.ErrConflict) && ctx.Err() == nil {
		s.log.Warn("claim failed", "task", t.name, "scheduled_at", req.ScheduledAt, "attempt", req.Attempt, "error", err)
	}
}

// start runs a claimed occurrence in its own goroutine; sent is when its
// claim was sent (its run lease started no earlier). addRuns counted it.
func (s *Scheduler) start(cb *cronBackend, t *task, occ backends.Occurrence, sent time.Time) {
	s.starting.Add(1)
	go func() {
		defer s.runs.Done()
		defer s.Wake()
		defer s.release(occ.Owner)
		pw := &prefixer{mu: &s.outMu, w: s.cfg.Stdout, prefix: []byte("[" + t.name + " " + occ.RunID + "] ")}
		s.execute(s.runCtx, cb, t, occ, sent, pw, pw, func() { s.starting.Add(-1) })
		pw.Close()
	}()
}

func newOwner() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
