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

const (
	// qWaitDeleteExpired drops waiter records whose lease expired: a crashed
	// waiter's place frees itself.
	qWaitDeleteExpired = "DELETE FROM `{p}semaphore_waiters` WHERE name = ? AND expires_at <= " + nowSQL

	// qWaitRenew renews owner's live record and keeps its place in line.
	qWaitRenew = "UPDATE `{p}semaphore_waiters` SET expires_at = " + nowSQL + ` + ?
WHERE name = ? AND owner = ? AND expires_at > ` + nowSQL

	// qWaitSeq reads owner's ticket.
	qWaitSeq = "SELECT seq FROM `{p}semaphore_waiters` WHERE name = ? AND owner = ?"

	// qWaitCount counts the waiters and finds the highest ticket. Run after
	// qWaitDeleteExpired in the same transaction, every row is live.
	qWaitCount = "SELECT count(*), coalesce(max(seq), 0) FROM `{p}semaphore_waiters` WHERE name = ?"

	// qWaitInsert queues owner behind every live waiter.
	// host, pid and since are for ListWaiters (waiters_list.go).
	qWaitInsert = "INSERT INTO `{p}semaphore_waiters` (name, owner, seq, expires_at, host, pid, since)\n" +
		"VALUES (?, ?, ?, " + nowSQL + " + ?, ?, ?, " + nowSQL + ")"

	// qWaitLeave removes owner's record.
	qWaitLeave = "DELETE FROM `{p}semaphore_waiters` WHERE name = ? AND owner = ?"

	// qWaitFirst finds the oldest live waiter.
	qWaitFirst = "SELECT owner FROM `{p}semaphore_waiters` WHERE name = ? AND expires_at > " + nowSQL + " ORDER BY seq LIMIT 1"
)

// EnterWait registers owner as a waiter of semaphore name, leased for lease
// in backend time, behind every live waiter. If owner already waits, its
// lease is renewed and it keeps its place: one autocommit statement when
// this store registered it. It returns ErrTooManyWaiters when max_waiting
// live waiters exist, ErrNotFound when the semaphore is absent.
func (s *Store) EnterWait(ctx context.Context, name, owner string, lease time.Duration) error {
	return s.EnterWaitAs(ctx, name, backends.AcquireRequest{Owner: owner, Lease: lease})
}

// EnterWaitAs is EnterWait recording req.Host and req.PID for ListWaiters
// (backends.WaiterLister).
func (s *Store) EnterWaitAs(ctx context.Context, name string, req backends.AcquireRequest) error {
	owner, lease := req.Owner, req.Lease
	if err := backends.CheckAcquire(req); err != nil {
		return fmt.Errorf("enter wait %s: %w", backends.DescribeRef(name), err)
	}
	if parent, key, ok := backends.SplitInstance(name); ok {
		return s.instEnterWait(ctx, parent, key, req)
	}
	if owner == "" {
		return fmt.Errorf("enter wait %q: empty owner", name)
	}
	us, err := leaseMicros(lease)
	if err != nil {
		return fmt.Errorf("enter wait %q: %w", name, err)
	}
	if s.sess.ticket(name, owner) != unregisteredTicket {
		// A renewal: extending a live record changes neither the count nor
		// the order, so it needs no lock.
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
	err = s.write(ctx, func(c conn) error {
		var limit, maxWaiting int
		var fencing int64
		var keyed bool
		err := c.QueryRow(ctx, qSemLock, name).Scan(&limit, &fencing, &maxWaiting, &mode, &keyed)
		if errors.Is(err, sql.ErrNoRows) {
			return backends.ErrNotFound
		}
		if err != nil {
			return err
		}
		if keyed {
			return backends.ErrKeyRequired
		}
		if _, err := c.Exec(ctx, qWaitDeleteExpired, name); err != nil {
			return err
		}
		n, err := affected(c.Exec(ctx, qWaitRenew, us, name, owner))
		if err != nil {
			return err
		}
		if n > 0 {
			return c.QueryRow(ctx, qWaitSeq, name, owner).Scan(&seq)
		}
		var waiting int
		var last int64
		if err := c.QueryRow(ctx, qWaitCount, name).Scan(&waiting, &last); err != nil {
			return err
		}
		if maxWaiting >= 0 && waiting >= maxWaiting {
			return fmt.Errorf("%d of %d waiting: %w", waiting, maxWaiting, backends.ErrTooManyWaiters)
		}
		seq = last + 1
		_, err = c.Exec(ctx, qWaitInsert, name, owner, seq, us, req.Host, req.PID)
		return err
	})
	if err == nil {
		s.sess.rememberTicket(name, owner, seq)
	}
	if err == nil && mode == spec.ModeSession {
		s.sessionEnter(name, owner)
	}
	if err != nil {
		return fmt.Errorf("enter wait %q as %q: %w", name, owner, err)
	}
	return nil
}

// LeaveWait removes owner's waiter record, and frees what a session-mode
// wait holds (its connection and locks); absent is not an error. A waiter
// that leaves the line (it gave up; a grant already removed the record of
// one that got a slot) may make it another's turn: it wakes the first
// parked waiter, who looks again.
func (s *Store) LeaveWait(ctx context.Context, name, owner string) error {
	if parent, key, ok := backends.SplitInstance(name); ok {
		return s.instLeaveWait(ctx, parent, key, owner)
	}
	s.sessionLeave(ctx, owner)
	s.sess.forgetTicket(name, owner)
	var n int64
	err := s.write(ctx, func(c conn) error {
		var err error
		n, err = affected(c.Exec(ctx, qWaitLeave, name, owner))
		return err
	})
	if err != nil {
		return fmt.Errorf("leave wait %q as %q: %w", name, owner, err)
	}
	if n > 0 {
		s.wakeSemaphore(ctx, name, 1)
	}
	return nil
}

// FirstWaiter returns the owner at the head of semaphore name's line: the
// live waiter that entered first, "" when nobody waits. TryAcquire follows
// the line itself; FirstWaiter is for tests and status.
func (s *Store) FirstWaiter(ctx context.Context, name string) (string, error) {
	if parent, key, ok := backends.SplitInstance(name); ok {
		return s.instFirstWaiter(ctx, parent, key)
	}
	var owner string
	_, err := s.read(ctx, func(c conn) error {
		owner = ""
		err := c.QueryRow(ctx, qWaitFirst, name).Scan(&owner)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		return err
	})
	if err != nil {
		return "", fmt.Errorf("first waiter %q: %w", name, err)
	}
	return owner, nil
}

// WaitSemaphore waits as the semaphore's mode says: on owner's dedicated
// connection in mode session (sessionWait), else parked in the server
// until it may be owner's turn in line (leaseWait, sem_park.go), maxWait
// elapsed or ctx ended. It returns nil in the first two cases and ctx's
// error in the last; the caller retries TryAcquire either way. An absent
// semaphore (or a store never migrated) returns nil at once, so that
// TryAcquire reports it.
func (s *Store) WaitSemaphore(ctx context.Context, name, owner string, maxWait time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if parent, key, ok := backends.SplitInstance(name); ok {
		return s.instWait(ctx, parent, key, owner, maxWait)
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
