package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/internal/retry"
)

// run works one claimed job: it runs the handler while renewing the lease,
// then acks or retries the job unless the lease was lost. It gives the
// job's handler slot (a token of slots) back as soon as the handler has
// returned and it holds a token of finishing for the ack or retry, so that
// the worker claims the next jobs while the backend records this one (an
// ack waits for a commit, which the backend's group commit then shares
// with the next claim's). The finishing tokens bound the acks and retries
// in flight to twice the concurrency (finishingPerSlot).
func (w *worker) run(ctx context.Context, j backends.Job, sentAt time.Time) {
	l := &Lease{Job: j, ClaimedAt: sentAt, Visibility: w.vis, deadline: sentAt.Add(w.vis - Margin(w.vis))}
	hctx, cancel := context.WithCancelCause(context.WithValue(ctx, leaseKey{}, l))
	defer cancel(nil)

	if herr := w.halted(); herr != nil {
		// Claimed while another handler found that none can start.
		w.finishing <- struct{}{}
		<-w.slots
		defer func() { <-w.finishing }()
		w.giveBack(ctx, j, herr)
		return
	}

	// A claim that hung in a stalled backend leaves the handler little of
	// its lease, and a command under it would be stopped at once: renew
	// first, so that the handler starts with a fresh lease.
	if left := time.Until(l.Deadline()); left < w.vis/2 && left > 0 {
		if w.renew(ctx, l) {
			<-w.slots
			w.stats.Lost.Add(1)
			w.logf("queue %s: job %d: lease lost before its handler started; left to its next owner", w.queue, j.ID)
			return
		}
	}
	// Renewals go on after ctx ends, as long as the handler runs.
	keeper := w.keepAlive(ctx, l, cancel)
	err := w.h(hctx, j)
	keeper.stop()

	cannotStart := errors.Is(err, ErrCannotStart)
	if cannotStart {
		// Stop claiming before this slot frees up: the job goes back
		// ready, and this worker must not take it (or any job) again.
		w.stopAll(fmt.Errorf("queue %s: job %d: %w", w.queue, j.ID, err))
	}
	if l.Lost() {
		<-w.slots
		w.stats.Lost.Add(1)
		w.logf("queue %s: job %d: lease lost while working it; left to its next owner", w.queue, j.ID)
		return
	}
	w.finishing <- struct{}{}
	<-w.slots
	defer func() { <-w.finishing }()
	if cannotStart {
		w.giveBack(ctx, j, err)
		return
	}
	w.record(ctx, j, err)
}

// giveBack returns a job no handler could start on to the queue, its
// attempt not counted (Queues.ReturnJob).
func (w *worker) giveBack(ctx context.Context, j backends.Job, why error) {
	ferr := retry.Final(context.WithoutCancel(ctx), retry.Budget, func(ctx context.Context) error {
		fctx, cancel := context.WithTimeout(ctx, finishTimeout)
		defer cancel()
		return w.c.q.ReturnJob(fctx, j)
	}, nil)
	switch {
	case ferr == nil:
		w.stats.Returned.Add(1)
		w.logf("queue %s: job %d returned to the queue unworked, attempt %d not counted: %v", w.queue, j.ID, j.Attempt, why)
		w.c.wake(w.queue)
	case errors.Is(ferr, backends.ErrLost):
		w.stats.Lost.Add(1)
		w.logf("queue %s: job %d could not be started (%v), and its lease was lost before it was returned: %v", w.queue, j.ID, why, ferr)
	default:
		w.logf("queue %s: job %d could not be started (%v); returning it failed too (it will run again after its visibility timeout, this attempt counted): %v", w.queue, j.ID, why, ferr)
	}
}

// record acks j (the handler returned nil) or retries it (err).
func (w *worker) record(ctx context.Context, j backends.Job, err error) {
	fctx := w.finishContext(ctx)
	if err == nil {
		ferr := w.c.q.Ack(fctx, j)
		switch {
		case ferr == nil:
			w.stats.Acked.Add(1)
			w.tally.processed.Add(1)
			if j.Key != "" {
				w.c.wake(w.queue) // the next job of its key may start
			}
		case errors.Is(ferr, backends.ErrLost):
			w.stats.Lost.Add(1)
			w.logf("queue %s: job %d done, but its lease was lost before the ack: %v", w.queue, j.ID, ferr)
		default:
			w.logf("queue %s: job %d done, but the ack failed (it will run again after its visibility timeout): %v", w.queue, j.ID, ferr)
		}
		return
	}
	reason := err.Error()
	if len(reason) > maxReason {
		reason = reason[:maxReason]
	}
	ferr := w.c.q.Retry(fctx, j, reason)
	// The log gets one line: a reason of several (a command's stderr) was
	// printed as it came, and is recorded whole with the job.
	if i := strings.IndexByte(reason, '\n'); i >= 0 {
		reason = reason[:i] + " ..."
	}
	switch {
	case ferr == nil:
		w.stats.Retried.Add(1)
		w.tally.failed.Add(1)
		w.logf("queue %s: job %d attempt %d failed: %s", w.queue, j.ID, j.Attempt, reason)
		w.c.wake(w.queue) // with no retry_backoff the job is ready at once
	case errors.Is(ferr, backends.ErrLost):
		w.stats.Lost.Add(1)
		w.logf("queue %s: job %d failed (%s), and its lease was lost before the retry: %v", w.queue, j.ID, reason, ferr)
	default:
		w.logf("queue %s: job %d failed (%s); the retry failed too (it will run again after its visibility timeout): %v", w.queue, j.ID, reason, ferr)
	}
}

// finishCtx is the context that the acks and retries of a worker share
// for up to finishTimeout (finishContext).
type finishCtx struct {
	ctx      context.Context
	deadline time.Time
	cancel   context.CancelFunc
}

// fresh reports whether f (nil: none yet) still leaves an ack
// finishTimeout.
func (f *finishCtx) fresh() bool { return f != nil && time.Until(f.deadline) >= finishTimeout }

// finishContext is the context of an ack or retry: Work's values, not its
// cancellation (a job done as Work stops is still recorded), and a
// deadline between finishTimeout and twice that away. The acks and
// retries of up to finishTimeout share one, so that an ack costs no
// context and timer of its own; a replaced one expires by itself, after
// the acks that hold it.
func (w *worker) finishContext(ctx context.Context) context.Context {
	if f := w.records.cur.Load(); f.fresh() {
		return f.ctx
	}
	w.records.mu.Lock()
	defer w.records.mu.Unlock()
	if f := w.records.cur.Load(); f.fresh() { // another ack replaced it
		return f.ctx
	}
	d := time.Now().Add(2 * finishTimeout)
	fctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), d)
	w.records.cur.Store(&finishCtx{ctx: fctx, deadline: d, cancel: cancel})
	return fctx
}
