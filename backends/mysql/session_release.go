package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// Extend and release of a session-mode holder (see session.go): a ping of
// its connection, and the release of its slot lock that wakes the first
// parked waiter (wake kill).

const (
	// qSessPing checks that the connection still holds its slot lock.
	qSessPing = "SELECT IS_USED_LOCK(?) = CONNECTION_ID(), " + nowSQL

	// qSessReleaseWake takes the check lock and frees the slot, in this
	// order, before the releaser wakes a parked waiter.
	qSessReleaseWake = "SELECT GET_LOCK(?, ?), RELEASE_LOCK(?)"
)

// releaseSlot frees w's slot lock (ErrLost when the connection no longer
// held it).
func (s *Store) releaseSlot(ctx context.Context, w *session) error {
	v, err := s.dint(ctx, w.d, noDeadline, qSessRelease, s.slotLock(w.name, w.slot))
	if err != nil {
		return err
	}
	w.slot = -1
	if v.Int64 != 1 {
		return backends.ErrLost
	}
	return nil
}

// sessionExtend pings the holder's connection: the slot is still held while
// the connection holds its lock. The lease only says when the holder must
// ping again.
func (s *Store) sessionExtend(ctx context.Context, h *session, lease time.Duration) (time.Time, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.d == nil || h.slot < 0 {
		return time.Time{}, fmt.Errorf("extend %q: %w", h.name, backends.ErrLost)
	}
	var ok sql.NullBool
	var now int64
	var err error
	// A KILL QUERY meant for a statement this connection ran while it was
	// parked (a waker that read the processlist just before the park ended;
	// possible on MySQL, which has no KILL QUERY ID) can end the ping. It
	// frees no lock, so the ping is simply sent again.
	for try := 0; try < 3; try++ {
		s.pool.CountTrip()
		err = s.interruptible(ctx, h.d, pingDeadline, func(rctx context.Context) error {
			return h.d.conn.QueryRowContext(rctx, qSessPing, s.slotLock(h.name, h.slot)).Scan(&ok, &now)
		})
		if !errors.Is(err, errInterruptedStmt) {
			break
		}
	}
	if ctx.Err() != nil {
		return time.Time{}, fmt.Errorf("extend %q: %w", h.name, ctx.Err())
	}
	if err != nil || !ok.Bool {
		// The session is gone (and the slot with it), or the lock is not
		// ours: either way this hold is over.
		s.forget(h)
		cause := "the slot lock is held by another session"
		if err != nil {
			cause = "connection lost: " + err.Error()
		}
		return time.Time{}, fmt.Errorf("extend %q: %s: %w", h.name, cause, backends.ErrLost)
	}
	return fromMicros(now + lease.Microseconds()), nil
}

// forget drops a hold whose session is gone.
func (s *Store) forget(h *session) {
	s.sess.mu.Lock()
	if s.sess.held[h.owner] == h {
		delete(s.sess.held, h.owner)
	}
	s.sess.mu.Unlock()
	s.dropSession(h)
}

// sessionRelease frees the holder's slot lock and returns its connection.
// With wake kill and a limit above 1 it wakes the oldest parked waiter,
// holding the check lock (see the package comment above).
func (s *Store) sessionRelease(ctx context.Context, h *session) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	s.sess.mu.Lock()
	if s.sess.held[h.owner] == h {
		delete(s.sess.held, h.owner)
	}
	s.sess.mu.Unlock()
	if h.d == nil || h.slot < 0 {
		return fmt.Errorf("release %q: %w", h.name, backends.ErrLost)
	}
	slot := s.slotLock(h.name, h.slot)
	var released sql.NullInt64
	var err error
	if h.wake == spec.WakeKill && h.limit > 1 {
		check := s.checkLock(h.name)
		var got sql.NullInt64
		s.pool.CountTrip()
		err = s.interruptible(ctx, h.d, helperLockWait+time.Minute, func(rctx context.Context) error {
			return h.d.conn.QueryRowContext(rctx, qSessReleaseWake, check, sleepSeconds(helperLockWait), slot).Scan(&got, &released)
		})
		if err == nil && got.Int64 == 1 {
			// A failed wake-up leaves the waiter to its SLEEP's end.
			_, _ = s.wakeParked(ctx, s.channel("semaphore", h.name), 1)
			_, err = s.dint(ctx, h.d, noDeadline, qSessRelease, check)
		}
	} else {
		released, err = s.dint(ctx, h.d, noDeadline, qSessRelease, slot)
	}
	h.slot = -1
	if err != nil {
		s.dropSession(h)
		return fmt.Errorf("release %q: %w", h.name, err)
	}
	s.undedicate(h.d)
	h.d = nil
	if released.Int64 != 1 {
		return fmt.Errorf("release %q: the slot lock was no longer held: %w", h.name, backends.ErrLost)
	}
	return nil
}
