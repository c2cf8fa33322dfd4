package mysql

import (
	"context"
	"time"

	"github.com/coordd/coordd/spec"
)

// Waiting for a slot of a session-mode semaphore (see session.go): blocked
// in GET_LOCK (limit 1), parked (wake kill) or polling under the wait lock
// (wake poll), on the connection the waiter keeps until it gets a slot or
// leaves the line.

const (
	// qSessReleaseAll frees every named lock of the session (a waiter that
	// gives up).
	qSessReleaseAll = "SELECT RELEASE_ALL_LOCKS()"

	// qSessParkBody is a parked waiter's statement after its tag: release
	// the check lock and sleep, in one statement.
	qSessParkBody = "RELEASE_LOCK(?), SLEEP(?)"
)

// sessionWait blocks owner until a slot of a session-mode semaphore may be
// free, maxWait elapsed or ctx ended; it may take the slot already (see the
// package comment), which owner's next TryAcquire completes. The wait's
// connection and locks stay with owner until its TryAcquire succeeds or
// LeaveWait.
func (s *Store) sessionWait(ctx context.Context, name, owner string, maxWait time.Duration) error {
	w := s.sess.takeWaiter(owner)
	if w != nil && w.name != name {
		s.dropSession(w)
		w = nil
	}
	if w == nil {
		w = &session{name: name, owner: owner, slot: -1}
	}
	defer s.sess.putWaiter(w)
	if w.d == nil {
		d, err := s.dedicate(ctx)
		if err != nil {
			return s.waitErr(ctx, name, err)
		}
		w.d = d
	}
	if err := s.sessionWaitOn(ctx, w, maxWait); err != nil {
		if ctx.Err() == nil {
			s.dropSession(w)
		}
		return s.waitErr(ctx, name, err)
	}
	return ctx.Err()
}

func (s *Store) sessionWaitOn(ctx context.Context, w *session, maxWait time.Duration) error {
	if w.slot >= 0 {
		return nil
	}
	if w.behind > 0 {
		// The line refused the last grant: let the waiters ahead take
		// their slots before taking one again.
		return sleepCtx(ctx, min(w.behind, maxWait))
	}
	deadline := time.Now().Add(maxWait)
	block := min(maxWait, sessionSleepMax)
	info := s.sess.info(w.name)
	switch {
	case info.limit == 0 || info.slots > info.limit:
		// Deleted, replaced or draining after a lower limit: nothing to
		// block on until holders leave; look again after a short while.
		return sleepCtx(ctx, min(block, pollMax))

	case info.limit == 1:
		// Limit 1: a plain GET_LOCK that waits in the server.
		got, err := s.dint(ctx, w.d, block+time.Minute, qSessGetLock, s.slotLock(w.name, 0), sleepSeconds(block))
		if err == nil && got.Int64 == 1 {
			w.slot = 0
		}
		return err

	case info.wake == spec.WakeKill:
		check := s.checkLock(w.name)
		got, err := s.dint(ctx, w.d, block+time.Minute, qSessGetLock, check, sleepSeconds(block))
		if err != nil || got.Int64 != 1 {
			return err
		}
		r, err := s.takeSlot(ctx, w.d, w.name)
		if err != nil {
			return err
		}
		if r.slot >= 0 || !r.tried || r.notFound || r.mode != spec.ModeSession {
			w.slot = r.slot
			_, err := s.dint(ctx, w.d, noDeadline, qSessRelease, check)
			return err
		}
		sleep := min(max(time.Until(deadline), 0), sessionSleepMax)
		// The ticket in line orders parked waiters: the first is woken first.
		return s.park(ctx, w.d, parkTag(s.channel("semaphore", w.name), s.sess.ticket(w.name, w.owner)), qSessParkBody, sleep, check, sleepSeconds(sleep))

	default:
		// wake poll: only the holder of the wait lock polls.
		if !w.waitLock {
			got, err := s.dint(ctx, w.d, block+time.Minute, qSessGetLock, s.waitLock(w.name), sleepSeconds(block))
			if err != nil || got.Int64 != 1 {
				return err
			}
			w.waitLock = true
		}
		for backoff := pollMin; ; backoff = min(2*backoff, pollMax) {
			r, err := s.takeSlot(ctx, w.d, w.name)
			if err != nil {
				return err
			}
			if r.slot >= 0 || !r.tried || r.notFound || r.mode != spec.ModeSession || r.wake != spec.WakePoll {
				w.slot = r.slot
				if w.slot >= 0 {
					if _, err := s.dint(ctx, w.d, noDeadline, qSessRelease, s.waitLock(w.name)); err != nil {
						return err
					}
					w.waitLock = false
				}
				return nil
			}
			left := time.Until(deadline)
			if left <= 0 {
				return nil
			}
			if err := sleepCtx(ctx, min(backoff, left)); err != nil {
				return nil
			}
		}
	}
}

// sleepCtx sleeps d or until ctx ends (its error).
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Poll backoff of the wait-lock holder (wake poll).
const (
	pollMin = 10 * time.Millisecond
	pollMax = 250 * time.Millisecond
)

// sessionEnter registers owner's wait on a session-mode semaphore: its
// connection is taken at the first try or wait.
func (s *Store) sessionEnter(name, owner string) {
	s.sess.mu.Lock()
	defer s.sess.mu.Unlock()
	if _, ok := s.sess.waiting[owner]; !ok {
		s.sess.waiting[owner] = &session{name: name, owner: owner, slot: -1}
	}
}

// sessionLeave releases what owner's wait holds (the wait lock, or a slot
// taken while waiting that TryAcquire never completed).
func (s *Store) sessionLeave(ctx context.Context, owner string) {
	w := s.sess.takeWaiter(owner)
	if w == nil || w.d == nil {
		return
	}
	if w.slot < 0 && !w.waitLock {
		s.undedicate(w.d)
		return
	}
	if _, err := s.dint(ctx, w.d, noDeadline, qSessReleaseAll); err != nil {
		s.dropSession(w)
		return
	}
	s.undedicate(w.d)
}
