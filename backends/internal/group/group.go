// Package group runs the concurrent claims of one process on one queue as
// one backend call. A claim costs the backend about as much for one job as
// for a batch (a transaction and its commit on MySQL, a script on Redis),
// so claims that arrive while one is on its way wait for it and then go
// together, each member still getting jobs leased to its own owner token.
// A lone claimer pays nothing: it goes at once.
package group

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Claim is one member of a group.
type Claim[J any] struct {
	Ctx   context.Context
	Owner string
	Max   int

	sent bool           // under Claimer.mu: its group was taken
	done chan result[J] // buffered: the group never blocks on a member
}

type result[J any] struct {
	jobs []J
	err  error
}

// Run claims for every member of a group in one backend call and returns
// each member's jobs, in the order of group. ctx ends when every member's
// context has ended.
type Run[J any] func(ctx context.Context, queue string, group []*Claim[J]) ([][]J, error)

// Claimer groups the claims of one store, per queue. The zero value is
// ready to use.
type Claimer[J any] struct {
	// Limit bounds the summed Max of one group (0: no bound); a claim
	// asking for more goes alone.
	Limit int
	// Gather makes a group wait briefly for claims on their way when the
	// last group had several members (several workers claim from this
	// store): their jobs were claimed together, so their handlers finish,
	// and the workers claim again, at about the same time. It yields the
	// processor until no claim arrived for GatherQuiet, at most GatherMax.
	Gather bool

	mu     sync.Mutex
	queues map[string]*queueClaims[J]
}

// Bounds of Gather.
const (
	GatherQuiet = 50 * time.Microsecond
	GatherMax   = 500 * time.Microsecond
)

// queueClaims is one queue's claims waiting for the next group.
type queueClaims[J any] struct {
	pending []*Claim[J]
	running bool // a group is running; pending waits for the next one
	shared  bool // the last group had several members
}

// Claim queues a claim and waits for its result. The caller that finds no
// group of the queue running runs one itself (with its own claim in it),
// and if more claims arrived meanwhile, leaves the next groups to a
// goroutine that runs them until none is pending. Once its group is sent,
// a claim waits for the reply even if ctx ends, so that no job is leased to
// a caller that left. Every caller of one Claimer passes the same run.
func (c *Claimer[J]) Claim(ctx context.Context, queue, owner string, max int, run Run[J]) ([]J, error) {
	r := &Claim[J]{Ctx: ctx, Owner: owner, Max: max, done: make(chan result[J], 1)}
	c.mu.Lock()
	if c.queues == nil {
		c.queues = map[string]*queueClaims[J]{}
	}
	q := c.queues[queue]
	if q == nil {
		q = &queueClaims[J]{}
		c.queues[queue] = q
	}
	q.pending = append(q.pending, r)
	lead := !q.running
	q.running = true
	c.mu.Unlock()
	if lead && c.round(queue, q, run) {
		go func() {
			for c.round(queue, q, run) {
			}
		}()
	}
	select {
	case res := <-r.done:
		return res.jobs, res.err
	case <-ctx.Done():
	}
	c.mu.Lock()
	sent := r.sent
	if !sent {
		q.pending = slices.DeleteFunc(q.pending, func(p *Claim[J]) bool { return p == r })
	}
	c.mu.Unlock()
	if !sent {
		return nil, ctx.Err()
	}
	res := <-r.done
	return res.jobs, res.err
}

// round runs one group of the queue's pending claims and reports whether
// more are pending; when none is, it marks the queue idle.
func (c *Claimer[J]) round(queue string, q *queueClaims[J], run Run[J]) bool {
	c.mu.Lock()
	shared := q.shared
	c.mu.Unlock()
	if c.Gather && shared {
		c.gather(q)
	}
	c.mu.Lock()
	var group []*Claim[J]
	total := 0
	for len(q.pending) > 0 {
		r := q.pending[0]
		if len(group) > 0 && c.Limit > 0 && total+r.Max > c.Limit {
			break
		}
		q.pending = q.pending[1:]
		r.sent = true
		group = append(group, r)
		total += r.Max
	}
	q.shared = len(group) > 1
	c.mu.Unlock()
	if len(group) > 0 {
		ctx, stop := groupContext(group)
		jobs, err := run(ctx, queue, group)
		stop()
		for i, r := range group {
			res := result[J]{err: err}
			switch {
			case err == nil:
				res.jobs = jobs[i]
			case r.Ctx.Err() != nil:
				res.err = r.Ctx.Err()
			}
			r.done <- res
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(q.pending) == 0 {
		q.running = false
		delete(c.queues, queue) // the next claim starts a new queueClaims
		return false
	}
	return true
}

// gather lets the claims on their way join the next group (see Gather).
func (c *Claimer[J]) gather(q *queueClaims[J]) {
	start := time.Now()
	last := start
	c.mu.Lock()
	n := len(q.pending)
	c.mu.Unlock()
	for {
		runtime.Gosched()
		now := time.Now()
		c.mu.Lock()
		m := len(q.pending)
		c.mu.Unlock()
		switch {
		case m > n:
			n, last = m, now
		case now.Sub(last) >= GatherQuiet || now.Sub(start) >= GatherMax:
			return
		}
	}
}

// groupContext returns a context that ends when every member's context has
// ended, and a function that releases it.
func groupContext[J any](group []*Claim[J]) (context.Context, func()) {
	if len(group) == 1 {
		return group[0].Ctx, func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var left atomic.Int64
	left.Store(int64(len(group)))
	stops := make([]func() bool, len(group))
	for i, r := range group {
		stops[i] = context.AfterFunc(r.Ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}
