package queue

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/coordd/coordd/backends"
)

// Lease is the visibility lease of the job a handler works.
type Lease struct {
	Job backends.Job
	// ClaimedAt is when the claim was sent (monotonic). A child supervisor
	// counts the lease from RenewedAt, which is later once renewed.
	ClaimedAt time.Time
	// Visibility is the queue's visibility timeout, the length of the
	// lease.
	Visibility time.Duration

	mu       sync.Mutex
	deadline time.Time // monotonic: sentAt + visibility - margin
	lost     bool
	onRenew  []func(sentAt time.Time)
}

type leaseKey struct{}

// LeaseOf returns the lease of the job whose handler got ctx, nil outside a
// handler.
func LeaseOf(ctx context.Context) *Lease {
	l, _ := ctx.Value(leaseKey{}).(*Lease)
	return l
}

// OnRenew registers f to be called with the send time of each later
// successful renewal (child.Process.Renewed fits).
func (l *Lease) OnRenew(f func(sentAt time.Time)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.onRenew = append(l.onRenew, f)
}

// Deadline is the monotonic instant until which the lease is trusted.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// RenewedAt is the send time of the claim or of the latest renewal
// (monotonic): a child supervisor started now counts the lease from it.
func (l *Lease) RenewedAt() time.Time {
	return l.Deadline().Add(-(l.Visibility - Margin(l.Visibility)))
}

// Lost reports whether the lease was lost.
func (l *Lease) Lost() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost
}

func (l *Lease) renewed(sentAt time.Time) {
	l.mu.Lock()
	if d := sentAt.Add(l.Visibility - Margin(l.Visibility)); d.After(l.deadline) {
		l.deadline = d
	}
	fs := append([]func(time.Time){}, l.onRenew...)
	l.mu.Unlock()
	for _, f := range fs {
		f(sentAt)
	}
}

func (l *Lease) markLost() {
	l.mu.Lock()
	l.lost = true
	l.mu.Unlock()
}

// keeper renews one job's lease about every visibility/3 while its
// handler runs (keepAlive), and ends the handler's context with
// ErrLeaseLost when the lease is lost: an extend found another owner, or
// the deadline passed without a successful renewal. The renewals run on a
// timer's goroutine that starts only when the first one is due, so the
// many jobs that finish within a third of their visibility cost a timer
// and no goroutine or context. They go on after Work's ctx ends, until
// stop.
type keeper struct {
	w    *worker
	l    *Lease
	ctx  context.Context // Work's: its values, not its cancellation
	lost context.CancelCauseFunc
	t    *time.Timer

	mu      sync.Mutex
	stopped bool
	cancel  context.CancelFunc // ends the renewals, once they started
	done    chan struct{}      // closed when the renewals ended
}

// keepAlive starts the renewals of l; lost ends the handler's context.
func (w *worker) keepAlive(ctx context.Context, l *Lease, lost context.CancelCauseFunc) *keeper {
	k := &keeper{w: w, l: l, ctx: ctx, lost: lost}
	k.t = time.AfterFunc(w.renewEvery(), k.renew)
	return k
}

// renew runs the renewals, on the timer's goroutine, unless stop came
// first.
func (k *keeper) renew() {
	k.mu.Lock()
	if k.stopped {
		k.mu.Unlock()
		return
	}
	kctx, cancel := context.WithCancel(context.WithoutCancel(k.ctx))
	k.cancel, k.done = cancel, make(chan struct{})
	k.mu.Unlock()
	defer close(k.done)
	if k.w.keep(kctx, k.l) {
		k.lost(ErrLeaseLost)
	}
}

// stop ends the renewals and waits for one in progress.
func (k *keeper) stop() {
	if k.t.Stop() {
		return // they never started
	}
	k.mu.Lock()
	k.stopped = true
	cancel, done := k.cancel, k.done
	k.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// renewEvery is the pause between two renewals of a lease.
func (w *worker) renewEvery() time.Duration { return max(w.vis/3, 10*time.Millisecond) }

// keep renews l now and then every renewEvery until ctx ends. It reports
// true when the lease was lost.
func (w *worker) keep(ctx context.Context, l *Lease) bool {
	every := w.renewEvery()
	for {
		if ctx.Err() != nil {
			return false
		}
		err := w.extend(ctx, l)
		next := every
		switch {
		case err == nil:
		case errors.Is(err, backends.ErrLost):
			return true
		case ctx.Err() != nil:
			return false
		case !time.Now().Before(l.Deadline()):
			l.markLost()
			return true
		default:
			w.logf("queue %s: job %d: renewing the lease failed (retrying): %v", w.queue, l.Job.ID, err)
			next = max(every/4, 10*time.Millisecond)
		}
		if !sleep(ctx, nil, nil, next) {
			return false
		}
	}
}

// extend renews l once, within its trust window.
func (w *worker) extend(ctx context.Context, l *Lease) error {
	sentAt := time.Now()
	ectx, cancel := context.WithDeadline(ctx, l.Deadline())
	_, err := w.c.q.ExtendJob(ectx, l.Job)
	cancel()
	switch {
	case err == nil:
		l.renewed(sentAt)
	case errors.Is(err, backends.ErrLost):
		l.markLost()
	}
	return err
}

// renew renews l once before its handler starts. It reports true when
// the lease is lost: taken by another owner, or out of its trust window.
func (w *worker) renew(ctx context.Context, l *Lease) bool {
	if err := w.extend(ctx, l); err != nil && !errors.Is(err, backends.ErrLost) {
		w.logf("queue %s: job %d: renewing the lease before the start failed: %v", w.queue, l.Job.ID, err)
	}
	if !time.Now().Before(l.Deadline()) {
		l.markLost()
	}
	return l.Lost()
}
