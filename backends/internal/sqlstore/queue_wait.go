package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// jobMayClaim is true, for queue row q, when a job is claimable now or a
// running job's visibility expired (Claim makes it ready again).
const jobMayClaim = `EXISTS (SELECT 1 FROM {p}queue_jobs j{index queue_jobs_ready}
  WHERE j.queue = q.name AND ` + jobClaimable + `)
  OR EXISTS (SELECT 1 FROM {p}queue_jobs
  WHERE queue = q.name AND state = 'running' AND expires_at <= {now})`

// qJobMayClaim is WaitQueue's poll: jobMayClaim. No row: the queue is
// absent. Argument: queue.
var qJobMayClaim = Query{SQL: `SELECT ` + jobMayClaim + `
FROM {p}queues q WHERE q.name = ?`}

// Poll backoff of WaitQueue: the interval doubles from queueWaitMin up to
// queueWaitMax.
const (
	queueWaitMin = 5 * time.Millisecond
	queueWaitMax = 100 * time.Millisecond
)

// WaitQueue polls, with a backoff from 5 ms to 100 ms, until a job may be
// claimable (one is ready and available, or a running job's visibility
// expired), maxWait elapsed or ctx ended: for a store that cannot push a
// wake-up to another process (SQLite). It returns nil in the first two
// cases and ctx's error in the last. An absent queue (or a store never
// migrated) returns nil at once, so that Claim reports it.
func (s *Core) WaitQueue(ctx context.Context, queue string, maxWait time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	deadline := time.Now().Add(maxWait)
	timer := time.NewTimer(queueWaitMax)
	timer.Stop()
	defer timer.Stop()
	for backoff := queueWaitMin; ; backoff = min(2*backoff, queueWaitMax) {
		may, err := s.mayClaim(ctx, queue)
		switch {
		case err != nil && ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			return fmt.Errorf("wait queue %q: %w", queue, err)
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

// mayClaim runs qJobMayClaim outside a transaction. An absent queue, or a
// store without its tables (never migrated), may: Claim then says why.
func (s *Core) mayClaim(ctx context.Context, queue string) (bool, error) {
	d := s.DB.Dialect()
	var may bool
	err := s.DB.Direct(ctx, func(c Conn) error {
		return c.QueryRow(ctx, d.Text(qJobMayClaim), queue).Scan(&may)
	})
	switch {
	case errors.Is(err, sql.ErrNoRows) || d.IsNoSuchTable(err):
		return true, nil
	case err != nil:
		return false, err
	}
	return may, nil
}

// qJobNextWake is jobMayClaim and, when nothing may be claimed yet, how
// long until something may without a push: the next delayed job comes due
// or a running job's visibility ends (µs; NULL: nothing pending). No row:
// the queue is absent. Argument: queue. least() skipping NULLs is
// PostgreSQL's, the one store that wakes this way.
var qJobNextWake = Query{SQL: `SELECT ` + jobMayClaim + `,
  least((SELECT min(available_at) FROM {p}queue_jobs WHERE queue = q.name AND state = 'ready' AND available_at > {now}),
        (SELECT min(expires_at) FROM {p}queue_jobs WHERE queue = q.name AND state = 'running')) - {now}
FROM {p}queues q WHERE q.name = ?`}

// NextWake reports whether a job of queue may be claimable now and, if
// not, how long until one may become so by the clock alone (a delayed job
// due, a visibility ending; 0: nothing is pending): for a store that
// learns of pushes from the database (PostgreSQL's LISTEN) and must wake
// by itself for the rest. An absent queue, or a store without its tables,
// may: Claim then says why.
func (s *Core) NextWake(ctx context.Context, queue string) (may bool, next time.Duration, err error) {
	d := s.DB.Dialect()
	var in sql.NullInt64
	err = s.DB.Direct(ctx, func(c Conn) error {
		return c.QueryRow(ctx, d.Text(qJobNextWake), queue).Scan(&may, &in)
	})
	switch {
	case errors.Is(err, sql.ErrNoRows) || d.IsNoSuchTable(err):
		return true, 0, nil
	case err != nil:
		return false, 0, err
	}
	if in.Valid {
		next = max(time.Duration(in.Int64)*time.Microsecond, time.Millisecond)
	}
	return may, next, nil
}
