package scheduler

import (
	"context"
	"sync"
	"time"

	"github.com/coordd/coordd/backends"
)

// coalescer sends the calls made while others are in flight together, as
// one backend call: when a burst of runs renew their run leases or record
// their results at about the same time, that costs a few store writes
// instead of one each (and, on MySQL, a few connections instead of one per
// run). A lone call goes out at once: nothing waits for company. Up to
// coalesceParallel batches are in flight, so that one held up (a row lock,
// a slow reply) does not hold up the others; each caller still gives up at
// its own deadline.
type coalescer[Q, R any] struct {
	max   int
	flush func(ctx context.Context, qs []Q) ([]R, error)
	// hold, if not nil, holds each batch back while it reports true, for
	// at most maxHold.
	hold    func() bool
	maxHold time.Duration

	mu      sync.Mutex
	queue   []*coalesced[Q, R]
	running int // loops sending batches
}

// coalesceParallel bounds the batches of one coalescer in flight.
const coalesceParallel = 4

// coalesced is one call waiting for its batch.
type coalesced[Q, R any] struct {
	ctx  context.Context
	q    Q
	res  R
	err  error
	done chan struct{}
}

// do queues q and waits for its result, or for ctx to end (the call may
// still be sent then, like a request whose answer was lost).
func (c *coalescer[Q, R]) do(ctx context.Context, q Q) (R, error) {
	cl := &coalesced[Q, R]{ctx: ctx, q: q, done: make(chan struct{})}
	c.mu.Lock()
	c.queue = append(c.queue, cl)
	if c.running < coalesceParallel {
		c.running++
		go c.loop()
	}
	c.mu.Unlock()
	select {
	case <-cl.done:
		return cl.res, cl.err
	case <-ctx.Done():
		var zero R
		return zero, ctx.Err()
	}
}

// loop sends batches until the queue is empty.
func (c *coalescer[Q, R]) loop() {
	for {
		if c.hold != nil {
			for end := time.Now().Add(c.maxHold); c.hold() && time.Now().Before(end); {
				time.Sleep(holdPoll)
			}
		}
		c.mu.Lock()
		var batch []*coalesced[Q, R]
		for len(c.queue) > 0 && len(batch) < c.max {
			cl := c.queue[0]
			c.queue[0] = nil
			c.queue = c.queue[1:]
			if cl.ctx.Err() == nil { // its caller gave up: not sent
				batch = append(batch, cl)
			}
		}
		if len(batch) == 0 {
			c.running--
			if len(c.queue) == 0 {
				c.queue = nil
			}
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		c.send(batch)
	}
}

// send makes one backend call for batch, bounded by the latest deadline
// among its calls (none: unbounded, as for a call without one).
func (c *coalescer[Q, R]) send(batch []*coalesced[Q, R]) {
	qs := make([]Q, len(batch))
	var deadline time.Time
	bounded := true
	for i, cl := range batch {
		qs[i] = cl.q
		d, ok := cl.ctx.Deadline()
		bounded = bounded && ok
		if ok && d.After(deadline) {
			deadline = d
		}
	}
	ctx, cancel := context.Background(), context.CancelFunc(func() {})
	if bounded {
		ctx, cancel = context.WithDeadline(ctx, deadline)
	}
	res, err := c.flush(ctx, qs)
	cancel()
	for i, cl := range batch {
		if err != nil {
			cl.err = err
		} else {
			cl.res = res[i]
		}
		close(cl.done)
	}
}

// Batch sizes of the coalescers: a finish carries up to 64 KiB of output.
const (
	maxFinishBatch = 100
	maxExtendBatch = 500
)

// While runs claimed are still starting (a burst), results wait at most
// maxFinishHold to be recorded, looking every holdPoll: starting the due
// runs on time comes first, and the store's time, and this host's, go to
// the starts. The run lease is renewed until the result is recorded.
const (
	maxFinishHold = 2 * time.Second
	holdPoll      = 10 * time.Millisecond
)

// cronBatchers are one backend's coalescers.
type cronBatchers struct {
	extend coalescer[backends.Extension, backends.ExtendResult]
	finish coalescer[backends.Finish, error]
}

// batchers returns cb's coalescers, made on first use.
func (s *Scheduler) batchers(cb *cronBackend) *cronBatchers {
	s.mu.Lock()
	defer s.mu.Unlock()
	if bt := s.batch[cb.Crons]; bt != nil {
		return bt
	}
	c := cb.Crons
	bt := &cronBatchers{
		extend: coalescer[backends.Extension, backends.ExtendResult]{max: maxExtendBatch, flush: c.ExtendOccurrences},
		finish: coalescer[backends.Finish, error]{max: maxFinishBatch, flush: c.FinishOccurrences,
			hold: func() bool { return s.starting.Load() > 0 }, maxHold: maxFinishHold},
	}
	s.batch[c] = bt
	return bt
}

// extendOccurrence renews one run lease, coalesced with the other runs' (ExtendOccurrences).
func (s *Scheduler) extendOccurrence(ctx context.Context, cb *cronBackend, occ backends.Occurrence, lease time.Duration) (time.Time, error) {
	r, err := s.batchers(cb).extend.do(ctx, backends.Extension{Occurrence: occ, Lease: lease})
	if err != nil {
		return time.Time{}, err
	}
	return r.ExpiresAt, r.Err
}

// finishOccurrence records one result, coalesced with the other runs' (FinishOccurrences).
func (s *Scheduler) finishOccurrence(ctx context.Context, cb *cronBackend, occ backends.Occurrence, res backends.RunResult) error {
	err, callErr := s.batchers(cb).finish.do(ctx, backends.Finish{Occurrence: occ, Result: res})
	if callErr != nil {
		return callErr
	}
	return err
}
