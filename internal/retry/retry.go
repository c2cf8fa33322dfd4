// Package retry retries the last write of a piece of work: the release of
// a semaphore slot after `sem run` or a cron run, the record of a cron
// run's result. Such a write has no later chance: if it fails once, a slot
// stays taken, or a run stays "running", until its lease expires (minutes,
// for a long lease), although the backend is usually back within a second
// or two (a failover, a restart, a stalled disk). So it is retried for a
// few seconds with a growing backoff, and each failure is logged.
//
// backends.ErrLost ends the retries at once: the record belongs to someone
// else now (the lease expired and was taken), and trying again cannot
// change that.
package retry

import (
	"context"
	"errors"
	"time"

	"github.com/coordd/coordd/backends"
)

// Budget is how long Final keeps retrying after the first failure.
const Budget = 5 * time.Second

// Backoff bounds of Final: the first retry waits firstWait, each later one
// twice as long, at most maxWait.
const (
	firstWait = 100 * time.Millisecond
	maxWait   = time.Second
)

// Final calls op until it succeeds, fails with backends.ErrLost, ctx ends,
// or budget has passed since the first failure; it returns op's last
// error. Each attempt should bound itself (op makes its own timeout).
// failed, when not nil, is told about each failure: next is the wait
// before the next attempt, or 0 when Final gives up.
func Final(ctx context.Context, budget time.Duration, op func(ctx context.Context) error, failed func(err error, next time.Duration)) error {
	var giveUp time.Time
	wait := firstWait
	for {
		err := op(ctx)
		if err == nil {
			return nil
		}
		if giveUp.IsZero() {
			giveUp = time.Now().Add(budget)
		}
		left := time.Until(giveUp)
		if errors.Is(err, backends.ErrLost) || ctx.Err() != nil || left <= 0 {
			if failed != nil {
				failed(err, 0)
			}
			return err
		}
		wait = min(wait, left)
		if failed != nil {
			failed(err, wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
		wait = min(2*wait, maxWait)
	}
}
