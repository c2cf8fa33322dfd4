package group

import (
	"context"
	"runtime"
	"sync"
	"time"
)

// Batcher runs the concurrent requests of one store (acks) in batches: a
// request with none in flight goes at once; requests that arrive while a
// batch runs wait for it and then go together, up to Limit, in one backend
// call. Each caller still gets its own error. The zero value is ready to
// use (no limit, no gather, no timeout).
type Batcher[R any] struct {
	// Limit bounds a batch (0: no bound).
	Limit int
	// Gather makes the caller that starts a batch yield the processor until
	// no request arrived for GatherQuiet (at most GatherMax): jobs claimed
	// together tend to finish together, and their handlers' goroutines are
	// runnable now. A lone request pays GatherQuiet. It pays where one
	// backend call costs far more than that (a commit on MySQL).
	Gather bool
	// Timeout bounds one batch, which runs for several callers and so
	// follows none of their contexts (0: none besides the first caller's
	// values).
	Timeout time.Duration
	// Rounds bounds the batches in flight at once (0 or 1: one). A request
	// that finds fewer running starts one, so that it seldom waits for a
	// whole round trip before its own begins.
	Rounds int

	mu      sync.Mutex
	pending []*item[R]
	running int // batches running; pending waits for the next one
}

type item[R any] struct {
	req  R
	done chan error // buffered: the batch never blocks on a caller
}

// RunBatch carries out batch and returns each request's error, in order.
type RunBatch[R any] func(ctx context.Context, batch []R) []error

// Do queues req and waits for its result. The caller that finds no batch
// running runs one itself (with its own request in it), and if more
// arrived meanwhile, leaves the next batches to a goroutine that runs them
// until none is pending. A caller whose ctx ends while it waits gets ctx's
// error, and its request may be carried out anyway. Every caller of one
// Batcher passes the same run.
func (b *Batcher[R]) Do(ctx context.Context, req R, run RunBatch[R]) error {
	it := &item[R]{req: req, done: make(chan error, 1)}
	b.mu.Lock()
	b.pending = append(b.pending, it)
	lead := b.running < max(b.Rounds, 1)
	if lead {
		b.running++
	}
	b.mu.Unlock()
	if lead && b.Gather {
		b.gather()
	}
	if lead && b.round(ctx, run) {
		go func() {
			for b.round(ctx, run) {
			}
		}()
	}
	select {
	case err := <-it.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// gather lets the requests on their way join the batch (see Gather).
func (b *Batcher[R]) gather() {
	start := time.Now()
	last := start
	b.mu.Lock()
	n := len(b.pending)
	b.mu.Unlock()
	for {
		runtime.Gosched()
		now := time.Now()
		b.mu.Lock()
		m := len(b.pending)
		b.mu.Unlock()
		switch {
		case b.Limit > 0 && m >= b.Limit:
			return
		case m > n:
			n, last = m, now
		case now.Sub(last) >= GatherQuiet || now.Sub(start) >= GatherMax:
			return
		}
	}
}

// round runs one batch of the pending requests and reports whether more
// are pending; when none is, it marks the batcher idle.
func (b *Batcher[R]) round(ctx context.Context, run RunBatch[R]) bool {
	b.mu.Lock()
	n := len(b.pending)
	if b.Limit > 0 {
		n = min(n, b.Limit)
	}
	batch := b.pending[:n]
	b.pending = b.pending[n:]
	b.mu.Unlock()
	if len(batch) > 0 {
		bctx, cancel := context.WithoutCancel(ctx), context.CancelFunc(func() {})
		if b.Timeout > 0 {
			bctx, cancel = context.WithTimeout(bctx, b.Timeout)
		}
		reqs := make([]R, len(batch))
		for i, it := range batch {
			reqs[i] = it.req
		}
		errs := run(bctx, reqs)
		cancel()
		for i, it := range batch {
			it.done <- errs[i]
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.pending) == 0 {
		b.pending = nil // let the array go
		b.running--
		return false
	}
	return true
}
