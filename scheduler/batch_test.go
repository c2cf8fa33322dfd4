package scheduler

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/sqlite"
	"github.com/coordd/coordd/leadership"
)

// gate is a coalescer flush that records its batches and, until open is
// closed, blocks: the calls made meanwhile queue up.
type gate struct {
	open    chan struct{}
	mu      sync.Mutex
	batches [][]int
	sent    atomic.Int64 // calls handed to flush so far
	err     error
}

func (g *gate) flush(ctx context.Context, qs []int) ([]int, error) {
	g.mu.Lock()
	g.batches = append(g.batches, qs)
	g.mu.Unlock()
	g.sent.Add(int64(len(qs)))
	<-g.open
	out := make([]int, len(qs))
	for i, q := range qs {
		out[i] = 2 * q
	}
	return out, g.err
}

// waitQueued waits until n calls are in flight or queued in c.
func waitQueued(t *testing.T, c *coalescer[int, int], g *gate, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c.mu.Lock()
		queued := len(c.queue)
		c.mu.Unlock()
		if queued+int(g.sent.Load()) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls queued or sent, want %d", queued+int(g.sent.Load()), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// Calls made while batches are in flight go out together, and each caller
// gets its own result.
func TestCoalescerBatches(t *testing.T) {
	g := &gate{open: make(chan struct{})}
	c := &coalescer[int, int]{max: 1000, flush: g.flush}
	const n = 200
	results := make([]int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { results[i], errs[i] = c.do(context.Background(), i) })
	}
	waitQueued(t, c, g, n)
	close(g.open)
	wg.Wait()
	for i := range n {
		if errs[i] != nil || results[i] != 2*i {
			t.Fatalf("call %d: %d, %v; want %d", i, results[i], errs[i], 2*i)
		}
	}
	// At most coalesceParallel batches were in flight when the gate
	// opened; the rest went in one more batch each loop took.
	if len(g.batches) > 2*coalesceParallel {
		t.Fatalf("%d calls in %d batches, want at most %d", n, len(g.batches), 2*coalesceParallel)
	}
	seen := map[int]bool{}
	for _, b := range g.batches {
		for _, q := range b {
			if seen[q] {
				t.Fatalf("call %d sent twice", q)
			}
			seen[q] = true
		}
	}
	if len(seen) != n {
		t.Fatalf("%d calls sent, want %d", len(seen), n)
	}
}

// A batch's error reaches each of its callers; a caller that gave up
// before its batch formed is not sent.
func TestCoalescerErrorsAndCancel(t *testing.T) {
	var held atomic.Bool
	held.Store(true)
	g := &gate{open: make(chan struct{}), err: errors.New("store down")}
	close(g.open)
	c := &coalescer[int, int]{max: 1000, flush: g.flush, hold: held.Load, maxHold: time.Hour}
	var wg sync.WaitGroup
	errs := make([]error, 10)
	for i := range 10 {
		wg.Go(func() { _, errs[i] = c.do(context.Background(), i) })
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := c.do(ctx, 99)
		done <- err
	}()
	waitQueued(t, c, g, 11)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v", err)
	}
	held.Store(false)
	wg.Wait()
	for i, err := range errs {
		if err == nil || err.Error() != "store down" {
			t.Fatalf("call %d: %v, want the batch's error", i, err)
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, b := range g.batches {
		for _, q := range b {
			if q == 99 {
				t.Fatal("a call whose caller gave up was sent")
			}
		}
	}
}

// hold keeps batches back while it reports true.
func TestCoalescerHold(t *testing.T) {
	var held atomic.Bool
	held.Store(true)
	g := &gate{open: make(chan struct{})}
	close(g.open)
	c := &coalescer[int, int]{max: 10, flush: g.flush, hold: held.Load, maxHold: time.Hour}
	done := make(chan int)
	go func() {
		r, _ := c.do(context.Background(), 21)
		done <- r
	}()
	time.Sleep(50 * time.Millisecond)
	if g.sent.Load() != 0 {
		t.Fatal("a batch went out while held")
	}
	held.Store(false)
	if r := <-done; r != 42 {
		t.Fatalf("result %d, want 42", r)
	}
}

// countingStore is the embedded store, counting the claim calls the
// scheduler makes.
type countingStore struct {
	*sqlite.Store
	one, many, running atomic.Int64
}

// Crons hands out the counting store itself, so that the scheduler's calls
// go through the methods below rather than straight to the store.
func (c *countingStore) Crons() backends.Crons { return c }

func (c *countingStore) ClaimOccurrence(ctx context.Context, req backends.ClaimRequest) (backends.Occurrence, error) {
	c.one.Add(1)
	return c.Store.ClaimOccurrence(ctx, req)
}

func (c *countingStore) ClaimOccurrences(ctx context.Context, reqs []backends.ClaimRequest) ([]backends.ClaimResult, error) {
	c.many.Add(1)
	return c.Store.ClaimOccurrences(ctx, reqs)
}

func (c *countingStore) Running(ctx context.Context, task string) ([]backends.Occurrence, error) {
	c.running.Add(1)
	return c.Store.Running(ctx, task)
}

// A burst of tasks due together is claimed a page at a time, overlap
// forbid checked in the claim itself: no claim, and no read of running
// occurrences, per task.
func TestBurstClaimedTogether(t *testing.T) {
	const n = 150
	path := filepath.Join(t.TempDir(), "c.db")
	st := openStore(t, path)
	at := now(t, st).Add(-time.Second)
	// Leases long enough for a slow machine (-race) to start them all.
	def := newDef("@every 1h", "true")
	def.RunLease = 30 * time.Second
	for i := range n {
		put(t, st, fmt.Sprintf("t%03d", i), def, at)
	}
	cs := &countingStore{Store: openStore(t, path)}
	el, err := leadership.New(leadership.Config{Leader: cs.Store, Host: "a", Lease: 10 * time.Second, Log: logger(t, "a.leader")})
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{
		Host: "a", Elector: el,
		Backends: func() map[string]backends.Backend { return map[string]backends.Backend{"embedded": cs} },
		Log:      logger(t, "a"), Stdout: testWriter{t}, Poll: time.Second, Sweep: time.Second,
	})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { el.Run(ctx) })
	wg.Go(func() { _ = s.Run(ctx) })
	defer func() {
		sctx, c := context.WithTimeout(context.Background(), 10*time.Second)
		defer c()
		_ = s.Shutdown(sctx)
		cancel()
		wg.Wait()
	}()
	for i := range n {
		waitRuns(t, st, fmt.Sprintf("t%03d", i), 30*time.Second, func(r []backends.Run) bool {
			return len(r) == 1 && r[0].Status == backends.RunSucceeded
		})
	}
	if one, running := cs.one.Load(), cs.running.Load(); one != 0 || running != 0 {
		t.Fatalf("%d single claims and %d reads of running occurrences for %d tasks due together, want none", one, running, n)
	}
	if many := cs.many.Load(); many > n/batch+1 {
		t.Fatalf("%d batch claims for %d tasks, want at most %d", many, n, n/batch+1)
	}
}
