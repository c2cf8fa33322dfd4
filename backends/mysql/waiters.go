package mysql

import (
	"context"
	"fmt"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/internal/sqlstore"
	"github.com/coordd/coordd/spec"
)

// The lines of waiters are sqlstore's (waiters_line.go); MySQL adds the
// tickets this store remembers (a renewal of a known waiter is one
// autocommit statement), the wake-up of parked waiters (sem_park.go) and
// the connection a session-mode waiter holds (session_wait.go).
const (
	// qWaitRenew renews owner's live record and keeps its place in line:
	// extending a live record changes neither the count nor the order, so
	// it needs no lock.
	qWaitRenew = "UPDATE `{p}semaphore_waiters` SET expires_at = " + nowSQL + ` + ?
WHERE name = ? AND owner = ? AND expires_at > ` + nowSQL

	// qWaitLeave removes owner's record (a session-mode grant, on the
	// holder's connection).
	qWaitLeave = "DELETE FROM `{p}semaphore_waiters` WHERE name = ? AND owner = ?"
)

// EnterWait registers req.Owner as a waiter of semaphore name, leased for
// req.Lease in backend time, behind every live waiter, recording req.Host
// and req.PID for ListWaiters. If it already waits, its lease is renewed
// and it keeps its place: one autocommit statement when this store
// registered it. It returns ErrTooManyWaiters when max_waiting live
// waiters exist, ErrNotFound when the semaphore is absent.
func (s *Store) EnterWait(ctx context.Context, ref backends.SemRef, req backends.AcquireRequest) error {
	name := ref.Name
	us, err := sqlstore.CheckEnterWait(ref, req)
	if err != nil {
		return err
	}
	owner := req.Owner
	if ref.IsInstance() {
		return s.instEnterWait(ctx, name, ref.Key, req, us)
	}
	if s.sess.ticket(name, owner) != unregisteredTicket {
		n, err := affected(s.autocommit(ctx, qWaitRenew, us, name, owner))
		if err != nil {
			return fmt.Errorf("enter wait %q as %q: %w", name, owner, err)
		}
		if n > 0 {
			return nil
		}
		s.sess.forgetTicket(name, owner) // expired: it queues again, at the tail
	}
	var mode string
	var seq int64
	err = s.write(ctx, func(c conn) (err error) {
		seq, mode, err = sqlstore.EnterLine(ctx, c, s.dialect, name, req, us, true)
		return err
	})
	if err != nil {
		return fmt.Errorf("enter wait %q as %q: %w", name, owner, err)
	}
	s.sess.rememberTicket(name, owner, seq)
	if mode == spec.ModeSession {
		s.sessionEnter(name, owner)
	}
	return nil
}

// LeaveWait removes owner's waiter record, and frees what a session-mode
// wait holds (its connection and locks); absent is not an error. A waiter
// that leaves the line (it gave up; a grant already removed the record of
// one that got a slot) may make it another's turn: it wakes the first
// parked waiter, who looks again.
func (s *Store) LeaveWait(ctx context.Context, ref backends.SemRef, owner string) error {
	name := ref.Name
	if ref.IsInstance() {
		return s.instLeaveWait(ctx, name, ref.Key, owner)
	}
	s.sessionLeave(ctx, owner)
	s.sess.forgetTicket(name, owner)
	var left bool
	err := s.write(ctx, func(c conn) (err error) {
		left, err = sqlstore.LeaveLine(ctx, c, s.dialect, ref, owner)
		return err
	})
	if err != nil {
		return fmt.Errorf("leave wait %q as %q: %w", name, owner, err)
	}
	if left {
		s.wakeSemaphore(ctx, name, 1)
	}
	return nil
}

// WaitSemaphore waits as the semaphore's mode says: on owner's dedicated
// connection in mode session (sessionWait), else parked in the server
// until it may be owner's turn in line (leaseWait, sem_park.go), maxWait
// elapsed or ctx ended. It returns nil in the first two cases and ctx's
// error in the last; the caller retries TryAcquire either way. An absent
// semaphore (or a store never migrated) returns nil at once, so that
// TryAcquire reports it.
func (s *Store) WaitSemaphore(ctx context.Context, ref backends.SemRef, owner string, maxWait time.Duration) error {
	name := ref.Name
	if err := ctx.Err(); err != nil {
		return err
	}
	if ref.IsInstance() {
		return s.instWait(ctx, name, ref.Key, owner, maxWait)
	}
	if session, err := s.isSessionMode(ctx, name); err != nil {
		return s.waitErr(ctx, name, err)
	} else if session {
		return s.sessionWait(ctx, name, owner, maxWait)
	}
	return s.leaseWait(ctx, name, owner, maxWait)
}

// waitErr reports ctx's error when the poll failed because ctx ended.
func (s *Store) waitErr(ctx context.Context, name string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("wait semaphore %q: %w", name, err)
}
