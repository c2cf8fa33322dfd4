package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/coordd/coordd/backends"
)

const (
	// qWaitDeleteExpired drops waiter records whose lease expired: a crashed
	// waiter's place frees itself.
	qWaitDeleteExpired = `DELETE FROM semaphore_waiters WHERE name = ? AND expires_at <= ` + nowSQL

	// qWaitMax reads the semaphore's max_waiting (< 0: unbounded).
	qWaitMax = `SELECT max_waiting, keyed FROM semaphores WHERE name = ?`

	// qWaitRenew renews owner's live record and keeps its place in line.
	qWaitRenew = `UPDATE semaphore_waiters SET expires_at = ` + nowSQL + ` + ?
WHERE name = ? AND owner = ? AND expires_at > ` + nowSQL

	// qWaitCount counts the waiters and finds the highest ticket. Run after
	// qWaitDeleteExpired in the same transaction, every row is live.
	qWaitCount = `SELECT count(*), coalesce(max(seq), 0) FROM semaphore_waiters WHERE name = ?`

	// qWaitInsert queues owner behind every live waiter.
	// host, pid and since are for ListWaiters (waiters_list.go).
	qWaitInsert = `INSERT INTO semaphore_waiters (name, owner, seq, expires_at, host, pid, since)
VALUES (?, ?, ?, ` + nowSQL + ` + ?, ?, ?, ` + nowSQL + `)`

	// qWaitLeave removes owner's record.
	qWaitLeave = `DELETE FROM semaphore_waiters WHERE name = ? AND owner = ?`

	// qWaitFirst finds the oldest live waiter.
	qWaitFirst = `SELECT owner FROM semaphore_waiters WHERE name = ? AND expires_at > ` + nowSQL + ` ORDER BY seq LIMIT 1`

	// qWaitMayAcquire is WaitSemaphore's poll: true when TryAcquire may
	// succeed for the owner (first argument): a free or expired slot row
	// exists and fewer live waiters are ahead of the owner than slots are
	// free (limit minus live holders). No row: the semaphore is absent.
	qWaitMayAcquire = `SELECT EXISTS (SELECT 1 FROM semaphore_slots WHERE name = s.name AND ` + freeSQL + `)
  AND ` + lineAheadSQL + ` < s.lim - (SELECT count(*) FROM semaphore_slots WHERE name = s.name AND ` + liveSQL + `)
FROM semaphores s WHERE s.name = ?`
)

// Poll backoff of WaitSemaphore: SQLite cannot push a wake-up to another
// process, so a waiter polls with a cheap read (a few microseconds on a
// local file), doubling the interval from waitPollMin up to waitPollMax.
// The cap bounds the cross-process wake-up latency (target: p99 within
// 50 ms, see docs/benchmarks.md) at the cost of at most 50 reads a second
// per process that is actively waiting for a slot.
const (
	waitPollMin = 2 * time.Millisecond
	waitPollMax = 20 * time.Millisecond
)

// EnterWait registers owner as a waiter of semaphore name, leased for lease
// in backend time, behind every live waiter. If owner already waits, its
// lease is renewed and it keeps its place. It returns ErrTooManyWaiters when
// max_waiting live waiters exist, ErrNotFound when the semaphore is absent.
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
	err = s.write(ctx, func(c conn) error {
		if _, err := c.Exec(ctx, qWaitDeleteExpired, name); err != nil {
			return err
		}
		var maxWaiting int
		var keyed bool
		err := c.QueryRow(ctx, qWaitMax, name).Scan(&maxWaiting, &keyed)
		if errors.Is(err, sql.ErrNoRows) {
			return backends.ErrNotFound
		}
		if err != nil {
			return err
		}
		if keyed {
			return backends.ErrKeyRequired
		}
		res, err := c.Exec(ctx, qWaitRenew, us, name, owner)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n > 0 {
			return nil
		}
		var waiting int
		var last int64
		if err := c.QueryRow(ctx, qWaitCount, name).Scan(&waiting, &last); err != nil {
			return err
		}
		if maxWaiting >= 0 && waiting >= maxWaiting {
			return fmt.Errorf("%d of %d waiting: %w", waiting, maxWaiting, backends.ErrTooManyWaiters)
		}
		_, err = c.Exec(ctx, qWaitInsert, name, owner, last+1, us, req.Host, req.PID)
		return err
	})
	if err != nil {
		return fmt.Errorf("enter wait %q as %q: %w", name, owner, err)
	}
	return nil
}

// LeaveWait removes owner's waiter record; absent is not an error.
func (s *Store) LeaveWait(ctx context.Context, name, owner string) error {
	if parent, key, ok := backends.SplitInstance(name); ok {
		return s.instLeaveWait(ctx, parent, key, owner)
	}
	err := s.write(ctx, func(c conn) error {
		_, err := c.Exec(ctx, qWaitLeave, name, owner)
		return err
	})
	if err != nil {
		return fmt.Errorf("leave wait %q as %q: %w", name, owner, err)
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

// WaitSemaphore polls, with a backoff from waitPollMin to waitPollMax,
// until TryAcquire may succeed for owner (a free or expired slot, and fewer
// live waiters ahead of owner in line than free slots), maxWait elapsed or
// ctx ended. It returns nil in the first two cases and ctx's error in the
// last; the caller retries TryAcquire either way. An absent semaphore (or a
// store never migrated) returns nil at once, so that TryAcquire reports it.
// Since the check follows the line, a waiter behind a crashed waiter's
// record is let through as soon as that record expires.
func (s *Store) WaitSemaphore(ctx context.Context, name, owner string, maxWait time.Duration) error {
	if parent, key, ok := backends.SplitInstance(name); ok {
		return s.instWait(ctx, parent, key, owner, maxWait)
	}
	return s.pollWait(ctx, name, maxWait, func() (may, absent bool, err error) {
		err = s.pool.On(nil).QueryRow(ctx, qWaitMayAcquire, owner, name).Scan(&may)
		if errors.Is(err, sql.ErrNoRows) {
			return false, true, nil
		}
		return may, false, err
	})
}

// pollWait runs poll with WaitSemaphore's backoff until it says TryAcquire
// may succeed or the semaphore is absent, maxWait elapsed or ctx ended.
func (s *Store) pollWait(ctx context.Context, name string, maxWait time.Duration, poll func() (may, absent bool, err error)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	ok, err := s.pool.HasSchema(ctx)
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
		may, absent, err := poll()
		switch {
		case absent:
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
	return fmt.Errorf("wait semaphore %s: %w", backends.DescribeRef(name), err)
}
