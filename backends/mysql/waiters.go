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

	// qWaitCount counts the waiters and finds the highest ticket. Run after
	// qWaitDeleteExpired in the same transaction, every row is live.
	qWaitCount = "SELECT count(*), coalesce(max(seq), 0) FROM `{p}semaphore_waiters` WHERE name = ?"

	// qWaitInsert queues owner behind every live waiter.
	qWaitInsert = "INSERT INTO `{p}semaphore_waiters` (name, owner, seq, expires_at) VALUES (?, ?, ?, " + nowSQL + " + ?)"

	// qWaitLeave removes owner's record.
	qWaitLeave = "DELETE FROM `{p}semaphore_waiters` WHERE name = ? AND owner = ?"

	// qWaitFirst finds the oldest live waiter.
	qWaitFirst = "SELECT owner FROM `{p}semaphore_waiters` WHERE name = ? AND expires_at > " + nowSQL + " ORDER BY seq LIMIT 1"

	// qWaitMayAcquire is WaitSemaphore's poll: true when the live holders are
	// below the limit and a free or expired slot row exists, i.e. when
	// TryAcquire may succeed. No row: the semaphore is absent.
	qWaitMayAcquire = "SELECT\n" +
		"  (SELECT count(*) FROM `{p}semaphore_slots` WHERE name = s.name AND " + liveSQL + ") < s.lim\n" +
		"  AND EXISTS (SELECT 1 FROM `{p}semaphore_slots` WHERE name = s.name AND " + freeSQL + ")\n" +
		"FROM `{p}semaphores` s WHERE s.name = ?"
)

// Poll backoff of WaitSemaphore: until the push wake-up arrives (a later
// release), a waiter polls a cheap read, doubling the interval from
// waitPollMin up to waitPollMax.
const (
	waitPollMin = 2 * time.Millisecond
	waitPollMax = 20 * time.Millisecond
)

// EnterWait registers owner as a waiter of semaphore name, leased for lease
// in backend time, behind every live waiter. If owner already waits, its
// lease is renewed and it keeps its place. It returns ErrTooManyWaiters when
// max_waiting live waiters exist, ErrNotFound when the semaphore is absent.
func (s *Store) EnterWait(ctx context.Context, name, owner string, lease time.Duration) error {
	if owner == "" {
		return fmt.Errorf("enter wait %q: empty owner", name)
	}
	us, err := leaseMicros(lease)
	if err != nil {
		return fmt.Errorf("enter wait %q: %w", name, err)
	}
	var mode string
	err = s.write(ctx, func(c conn) error {
		var limit, maxWaiting int
		var fencing int64
		err := c.row(ctx, qSemLock, name).Scan(&limit, &fencing, &maxWaiting, &mode)
		if errors.Is(err, sql.ErrNoRows) {
			return backends.ErrNotFound
		}
		if err != nil {
			return err
		}
		if _, err := c.exec(ctx, qWaitDeleteExpired, name); err != nil {
			return err
		}
		n, err := affected(c.exec(ctx, qWaitRenew, us, name, owner))
		if err != nil {
			return err
		}
		if n > 0 {
			return nil
		}
		var waiting int
		var last int64
		if err := c.row(ctx, qWaitCount, name).Scan(&waiting, &last); err != nil {
			return err
		}
		if maxWaiting >= 0 && waiting >= maxWaiting {
			return fmt.Errorf("%d of %d waiting: %w", waiting, maxWaiting, backends.ErrTooManyWaiters)
		}
		_, err = c.exec(ctx, qWaitInsert, name, owner, last+1, us)
		return err
	})
	if err == nil && mode == spec.ModeSession {
		s.sessionEnter(name, owner)
	}
	if err != nil {
		return fmt.Errorf("enter wait %q as %q: %w", name, owner, err)
	}
	return nil
}

// LeaveWait removes owner's waiter record, and frees what a session-mode
// wait holds (its connection and locks); absent is not an error.
func (s *Store) LeaveWait(ctx context.Context, name, owner string) error {
	s.sessionLeave(ctx, owner)
	err := s.write(ctx, func(c conn) error {
		_, err := c.exec(ctx, qWaitLeave, name, owner)
		return err
	})
	if err != nil {
		return fmt.Errorf("leave wait %q as %q: %w", name, owner, err)
	}
	return nil
}

// FirstWaiter returns the owner at the head of semaphore name's line: the
// live waiter that entered first, "" when nobody waits. A caller serving
// waiters FIFO lets only the head of the line call TryAcquire.
func (s *Store) FirstWaiter(ctx context.Context, name string) (string, error) {
	var owner string
	_, err := s.read(ctx, func(c conn) error {
		owner = ""
		err := c.row(ctx, qWaitFirst, name).Scan(&owner)
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
// connection in mode session (sessionWait), else it polls, with a backoff
// from waitPollMin to waitPollMax, until TryAcquire may succeed (live holders below the limit and a free or expired
// slot), maxWait elapsed or ctx ended. It returns nil in the first two cases
// and ctx's error in the last; the caller retries TryAcquire either way. An
// absent semaphore (or a store never migrated) returns nil at once, so that
// TryAcquire reports it.
func (s *Store) WaitSemaphore(ctx context.Context, name, owner string, maxWait time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if session, err := s.isSessionMode(ctx, name); err != nil {
		return s.waitErr(ctx, name, err)
	} else if session {
		return s.sessionWait(ctx, name, owner, maxWait)
	}
	ok, err := s.hasSchema(ctx)
	if err != nil {
		return s.waitErr(ctx, name, err)
	}
	if !ok {
		return nil
	}
	deadline := time.Now().Add(maxWait)
	timer := time.NewTimer(waitPollMax)
	timer.Stop() // Go 1.23+: a stopped timer holds no stale tick
	defer timer.Stop()
	for backoff := waitPollMin; ; backoff = min(2*backoff, waitPollMax) {
		var may bool
		err := s.on(nil).row(ctx, qWaitMayAcquire, name).Scan(&may)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return nil
		case err != nil:
			return s.waitErr(ctx, name, err)
		case may:
			return nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil
		}
		timer.Reset(min(backoff, left))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
		}
	}
}

// waitErr reports ctx's error when the poll failed because ctx ended.
func (s *Store) waitErr(ctx context.Context, name string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("wait semaphore %q: %w", name, err)
}
