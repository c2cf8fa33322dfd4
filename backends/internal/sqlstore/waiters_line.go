package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/coordd/coordd/backends"
)

// A semaphore's line is semaphore_waiters: EnterWait gives each waiter a
// ticket (seq) above every live waiter's, and an acquire grants a slot
// only while fewer live waiters are ahead of the caller than slots are
// free (Refusal). A waiter that stops renewing (it crashed) drops out of
// the count when its record expires: it holds the line for at most its
// waiter lease. EnterWait locks the semaphore's row, as an acquire does,
// so the count an acquire reads is that of the latest line.
var (
	// qWaitDeleteExpired drops waiter records whose lease expired: a
	// crashed waiter's place frees itself.
	qWaitDeleteExpired = Query{SQL: `DELETE FROM {p}semaphore_waiters WHERE name = ? AND expires_at <= {now}`}

	// qWaitRenew renews owner's live record, which keeps its place in
	// line. Arguments: lease µs, name, owner.
	qWaitRenew = Query{SQL: `UPDATE {p}semaphore_waiters SET expires_at = {now} + ?
WHERE name = ? AND owner = ? AND expires_at > {now}`}

	// qWaitRenewSeq is qWaitRenew returning the owner's ticket
	// (ReturningInt).
	qWaitRenewSeq = Query{
		SQL: qWaitRenew.SQL + ` RETURNING seq`,
		MySQL: `UPDATE {p}semaphore_waiters SET expires_at = {now} + ?, seq = LAST_INSERT_ID(seq)
WHERE name = ? AND owner = ? AND expires_at > {now}`,
	}

	// qWaitCount counts the waiters and finds the highest ticket. Run
	// after qWaitDeleteExpired in the same transaction, every row is live.
	qWaitCount = Query{SQL: `SELECT count(*), coalesce(max(seq), 0) FROM {p}semaphore_waiters WHERE name = ?`}

	// qWaitInsert queues owner behind every live waiter; host, pid and
	// since are for ListWaiters (waiters.go). Arguments: name, owner, seq,
	// lease µs, host, pid.
	qWaitInsert = Query{SQL: `INSERT INTO {p}semaphore_waiters (name, owner, seq, expires_at, host, pid, since)
VALUES (?, ?, ?, {now} + ?, ?, ?, {now})`}

	// qWaitLeave removes owner's record.
	qWaitLeave = Query{SQL: `DELETE FROM {p}semaphore_waiters WHERE name = ? AND owner = ?`}

	// qWaitFirst finds the oldest live waiter.
	qWaitFirst = Query{SQL: `SELECT owner FROM {p}semaphore_waiters WHERE name = ? AND expires_at > {now} ORDER BY seq LIMIT 1`}

	// qWaitMayAcquire is WaitSemaphore's poll: true when TryAcquire may
	// succeed for the owner: a free slot row exists and fewer live waiters
	// are ahead of the owner than slots are free (limit minus live
	// holders). No row: the semaphore is absent. Arguments: owner, name.
	qWaitMayAcquire = slotQuery(`SELECT EXISTS (SELECT 1 FROM {p}semaphore_slots WHERE name = s.name AND {free})
  AND ` + lineAhead + ` < s.lim - (SELECT count(*) FROM {p}semaphore_slots WHERE name = s.name AND {live})
FROM {p}semaphores s WHERE s.name = ?`)
)

// Poll backoff of WaitSemaphore: a store that cannot push a wake-up to
// another process has a waiter poll with a cheap read (a few microseconds
// on a local SQLite file), doubling the interval from waitPollMin up to
// waitPollMax. The cap bounds the cross-process wake-up latency (target:
// p99 within 50 ms, see docs/benchmarks.md) at the cost of at most 50
// reads a second per process that is actively waiting for a slot.
const (
	waitPollMin = 2 * time.Millisecond
	waitPollMax = 20 * time.Millisecond
)

// EnterLine queues req.Owner in semaphore name's line, or renews its live
// record (it keeps its place), in a write transaction, and returns the
// semaphore's mode and, with ticket, the owner's ticket (a renewal reads
// it back in the same statement, which costs a Standard store a RETURNING
// and MySQL nothing). ErrNotFound: the semaphore is absent; ErrKeyRequired:
// it is keyed; ErrTooManyWaiters: max_waiting live waiters wait already.
func EnterLine(ctx context.Context, c Conn, d *Dialect, name string, req backends.AcquireRequest, lease int64, ticket bool) (seq int64, mode string, err error) {
	r, found, err := LockSemaphore(ctx, c, d, name)
	switch {
	case err != nil:
		return 0, "", err
	case !found:
		return 0, "", backends.ErrNotFound
	case r.Keyed:
		return 0, "", backends.ErrKeyRequired
	}
	if _, err := c.Exec(ctx, d.Text(qWaitDeleteExpired), name); err != nil {
		return 0, "", err
	}
	seq, renewed, err := renew(ctx, c, d, ticket, qWaitRenew, qWaitRenewSeq, lease, name, req.Owner)
	if err != nil || renewed {
		return seq, r.Mode, err
	}
	var waiting int
	if err := c.QueryRow(ctx, d.Text(qWaitCount), name).Scan(&waiting, &seq); err != nil {
		return 0, "", err
	}
	if r.MaxWaiting >= 0 && waiting >= r.MaxWaiting {
		return 0, "", fmt.Errorf("%d of %d waiting: %w", waiting, r.MaxWaiting, backends.ErrTooManyWaiters)
	}
	seq++
	_, err = c.Exec(ctx, d.Text(qWaitInsert), name, req.Owner, seq, lease, req.Host, req.PID)
	return seq, r.Mode, err
}

// renew sends a waiter's renewal: q, or with ticket qSeq, which returns
// the waiter's ticket.
func renew(ctx context.Context, c Conn, d *Dialect, ticket bool, q, qSeq Query, args ...any) (seq int64, ok bool, err error) {
	if ticket {
		return ReturningInt(ctx, c, d, qSeq, args...)
	}
	n, err := Affected(c.Exec(ctx, d.Text(q), args...))
	return 0, n > 0, err
}

// CheckEnterWait checks a waiter's request and returns its lease in
// microseconds.
func CheckEnterWait(ref backends.SemRef, req backends.AcquireRequest) (int64, error) {
	if err := backends.CheckAcquire(req); err != nil {
		return 0, fmt.Errorf("enter wait %s: %w", ref, err)
	}
	if ref.IsInstance() {
		if err := backends.CheckInstanceKey(ref.Key); err != nil {
			return 0, fmt.Errorf("enter wait %s: %w", ref, err)
		}
	}
	if req.Owner == "" {
		return 0, fmt.Errorf("enter wait %s: empty owner", ref)
	}
	us, err := LeaseMicros(req.Lease)
	if err != nil {
		return 0, fmt.Errorf("enter wait %s: %w", ref, err)
	}
	return us, nil
}

// EnterWait registers req.Owner as a waiter of semaphore name, leased for
// req.Lease in the store's time, behind every live waiter, recording
// req.Host and req.PID for ListWaiters. If it already waits, its lease is
// renewed and it keeps its place. It returns ErrTooManyWaiters when
// max_waiting live waiters exist, ErrNotFound when the semaphore is
// absent. An instance reference queues in the instance's line, creating
// the instance.
func (s *Core) EnterWait(ctx context.Context, ref backends.SemRef, req backends.AcquireRequest) error {
	us, err := CheckEnterWait(ref, req)
	if err != nil {
		return err
	}
	d := s.DB.Dialect()
	err = s.DB.Write(ctx, func(c Conn) error {
		if ref.IsInstance() {
			_, err := EnterInstanceLine(ctx, c, d, ref.Name, ref.Key, req, us, false)
			return err
		}
		_, _, err := EnterLine(ctx, c, d, ref.Name, req, us, false)
		return err
	})
	if err != nil {
		return fmt.Errorf("enter wait %s as %q: %w", ref, req.Owner, err)
	}
	return nil
}

// LeaveLine removes owner's waiter record of ref, and reports whether
// there was one.
func LeaveLine(ctx context.Context, c Conn, d *Dialect, ref backends.SemRef, owner string) (bool, error) {
	q, args := qWaitLeave, []any{ref.Name, owner}
	if ref.IsInstance() {
		q, args = qInstWaitLeave, []any{ref.Name, ref.Key, owner}
	}
	n, err := Affected(c.Exec(ctx, d.Text(q), args...))
	return n > 0, err
}

// LeaveWait removes owner's waiter record (an instance is gone with it
// when it was its last row); absent is not an error.
func (s *Core) LeaveWait(ctx context.Context, ref backends.SemRef, owner string) error {
	err := s.DB.Write(ctx, func(c Conn) error {
		_, err := LeaveLine(ctx, c, s.DB.Dialect(), ref, owner)
		return err
	})
	if err != nil {
		return fmt.Errorf("leave wait %s as %q: %w", ref, owner, err)
	}
	return nil
}

// FirstWaiter returns the owner at the head of ref's line: the live
// waiter that entered first, "" when nobody waits. TryAcquire follows the
// line itself; FirstWaiter is for tests and status.
func (s *Core) FirstWaiter(ctx context.Context, ref backends.SemRef) (string, error) {
	q, args := qWaitFirst, []any{ref.Name}
	if ref.IsInstance() {
		q, args = qInstWaitFirst, []any{ref.Name, ref.Key}
	}
	var owner string
	_, err := s.DB.ReadOne(ctx, func(c Conn) error {
		owner = ""
		err := c.QueryRow(ctx, s.DB.Dialect().Text(q), args...).Scan(&owner)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		return err
	})
	if err != nil {
		return "", fmt.Errorf("first waiter %s: %w", ref, err)
	}
	return owner, nil
}

// WaitSemaphore polls, with a backoff from waitPollMin to waitPollMax,
// until TryAcquire may succeed for owner (a free slot, and fewer live
// waiters ahead of owner in line than free slots), maxWait elapsed or ctx
// ended. It returns nil in the first two cases and ctx's error in the
// last; the caller retries TryAcquire either way. An absent semaphore (or
// a store never migrated) returns nil at once, so that TryAcquire reports
// it. Since the check follows the line, a waiter behind a crashed waiter's
// record is let through as soon as that record expires.
func (s *Core) WaitSemaphore(ctx context.Context, ref backends.SemRef, owner string, maxWait time.Duration) error {
	q, args := qWaitMayAcquire, []any{owner, ref.Name}
	if ref.IsInstance() {
		q, args = qInstMayAcquire, []any{ref.Key, ref.Key, owner, ref.Key, ref.Name}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	ok, err := s.DB.HasSchema(ctx)
	if err != nil {
		return s.waitErr(ctx, ref, err)
	}
	if !ok {
		return nil
	}
	text := s.DB.Dialect().Text(q)
	var may bool
	poll := func(c Conn) error {
		err := c.QueryRow(ctx, text, args...).Scan(&may)
		if errors.Is(err, sql.ErrNoRows) {
			may, err = true, nil // absent: TryAcquire says so
		}
		return err
	}
	deadline := time.Now().Add(maxWait)
	timer := time.NewTimer(waitPollMax)
	timer.Stop() // Go 1.23+: a stopped timer holds no stale tick
	defer timer.Stop()
	for backoff := waitPollMin; ; backoff = min(2*backoff, waitPollMax) {
		err := s.DB.Direct(ctx, poll)
		switch {
		case err != nil:
			return s.waitErr(ctx, ref, err)
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
func (s *Core) waitErr(ctx context.Context, ref backends.SemRef, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("wait semaphore %s: %w", ref, err)
}
