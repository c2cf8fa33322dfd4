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

// keep renews l about every visibility/3 until ctx ends. It reports true
// when the lease was lost: an extend found another owner, or the deadline
// passed without a successful renewal.
func (w *worker) keep(ctx context.Context, l *Lease) bool {
	every := max(w.vis/3, 10*time.Millisecond)
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
		err := w.extend(ctx, l)
		switch {
		case err == nil:
			t.Reset(every)
		case errors.Is(err, backends.ErrLost):
			return true
		case ctx.Err() != nil:
			return false
		case !time.Now().Before(l.Deadline()):
			l.markLost()
			return true
		default:
			w.logf("queue %s: job %d: renewing the lease failed (retrying): %v", w.queue, l.Job.ID, err)
			t.Reset(max(every/4, 10*time.Millisecond))
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
