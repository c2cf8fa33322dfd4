package queue_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/sqlite"
	"github.com/coordd/coordd/queue"
)

// recording is a real SQLite store whose Claim and Ack go through hooks:
// Claim counts the claims that got jobs and the jobs they got; Ack, when
// hold is set, waits for it before acking.
type recording struct {
	*sqlite.Store
	claims, claimed atomic.Int64
	hold            chan struct{} // nil: acks go through at once
	acking          chan int64    // receives each job id whose ack was called (buffered)

	mu    sync.Mutex
	asked []int // the max of every claim
}

func (r *recording) Claim(ctx context.Context, queue, owner string, max int) ([]backends.Job, error) {
	r.mu.Lock()
	r.asked = append(r.asked, max)
	r.mu.Unlock()
	js, err := r.Store.Claim(ctx, queue, owner, max)
	if len(js) > 0 {
		r.claims.Add(1)
		r.claimed.Add(int64(len(js)))
	}
	return js, err
}

// Queues hands out the recording itself, so that the client's calls go
// through the methods above rather than straight to the store.
func (r *recording) Queues() backends.Queues { return r }

func (r *recording) Ack(ctx context.Context, j backends.Job) error {
	if r.acking != nil {
		r.acking <- j.ID
	}
	if r.hold != nil {
		<-r.hold
	}
	return r.Store.Ack(ctx, j)
}

// TestAckDoesNotHoldTheSlot: a handler's slot is free once the handler
// has returned, while its ack is still on its way, so the worker claims
// and starts the next job meanwhile (the ack's commit and the next claim's
// overlap); the ack is still done before Work returns.
func TestAckDoesNotHoldTheSlot(t *testing.T) {
	st := newStore(t, queueConfig("q"))
	r := &recording{Store: st, hold: make(chan struct{}), acking: make(chan int64, 4)}
	c := newClient(t, r)
	ctx := context.Background()
	pushNumbered(t, c, "q", 2)
	started := make(chan string, 2)
	var stats queue.Stats
	wait := work(ctx, c, "q", queue.WorkerOptions{Concurrency: 1, Drain: true, Stats: &stats}, func(_ context.Context, j backends.Job) error {
		started <- string(j.Payload)
		return nil
	})
	first := <-started
	<-r.acking // the first job's ack waits on hold
	select {
	case second := <-started:
		if second == first {
			t.Fatalf("job %s ran twice", first)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the second job did not start while the first one's ack was held")
	}
	close(r.hold)
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if stats.Acked.Load() != 2 {
		t.Fatalf("acked %d, want 2", stats.Acked.Load())
	}
	if st := observe(t, st, "q"); st.Jobs() != 0 {
		t.Fatalf("queue not empty: %+v", st)
	}
}

// TestAcksInFlightAreBounded: while acks wait on the backend, a worker
// keeps claiming until twice Concurrency acks are on their way, and no
// further: the next handler to return keeps its slot until an ack is done.
func TestAcksInFlightAreBounded(t *testing.T) {
	st := newStore(t, queueConfig("q"))
	r := &recording{Store: st, hold: make(chan struct{}), acking: make(chan int64, 4)}
	c := newClient(t, r)
	ctx := context.Background()
	pushNumbered(t, c, "q", 4)
	started := make(chan string, 4)
	var stats queue.Stats
	wait := work(ctx, c, "q", queue.WorkerOptions{Concurrency: 1, Drain: true, Stats: &stats}, func(_ context.Context, j backends.Job) error {
		started <- string(j.Payload)
		return nil
	})
	for i := range 3 {
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d jobs started while acks were held, want 3", i)
		}
	}
	for range 2 {
		<-r.acking // two acks wait on hold
	}
	select {
	case p := <-started:
		t.Fatalf("job %s started with two acks held and a third waiting to be sent", p)
	case id := <-r.acking:
		t.Fatalf("a third ack (job %d) was sent while two were held", id)
	case <-time.After(300 * time.Millisecond):
	}
	close(r.hold)
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if n := len(started); n != 1 {
		t.Fatalf("%d more jobs started after the acks went through, want 1", n)
	}
	if stats.Acked.Load() != 4 {
		t.Fatalf("acked %d, want 4", stats.Acked.Load())
	}
}

// TestClaimsGatherABatch: with a backlog, a worker whose handlers finish
// together claims them a batch at a time, not one job per freed slot.
func TestClaimsGatherABatch(t *testing.T) {
	st := newStore(t, queueConfig("q"))
	r := &recording{Store: st}
	c := newClient(t, r)
	ctx := context.Background()
	const jobs = 400
	pushNumbered(t, c, "q", jobs)
	var mu sync.Mutex
	seen := map[string]bool{}
	err := c.Work(ctx, "q", queue.WorkerOptions{Concurrency: 8, Batch: 8, Drain: true}, func(_ context.Context, j backends.Job) error {
		mu.Lock()
		defer mu.Unlock()
		if seen[string(j.Payload)] {
			return fmt.Errorf("job %s ran twice", j.Payload)
		}
		seen[string(j.Payload)] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != jobs {
		t.Fatalf("ran %d jobs, want %d", len(seen), jobs)
	}
	avg := float64(r.claimed.Load()) / float64(r.claims.Load())
	t.Logf("%d claims, %.1f jobs each", r.claims.Load(), avg)
	if avg < 5 {
		t.Fatalf("claims took %.1f jobs each, want batches of about 8", avg)
	}
}

// TestDefaultClaimTakesFreeSlots: without WorkerOptions.Batch, an idle
// worker's first claim takes a job for each of its free handler slots, and
// every job starts at once; no claim asks for more jobs than there are
// slots.
func TestDefaultClaimTakesFreeSlots(t *testing.T) {
	st := newStore(t, queueConfig("q"))
	r := &recording{Store: st}
	c := newClient(t, r)
	ctx := context.Background()
	pushNumbered(t, c, "q", 6)
	started := make(chan string, 6)
	release := make(chan struct{}, 6)
	wait := work(ctx, c, "q", queue.WorkerOptions{Concurrency: 4, Drain: true}, func(_ context.Context, j backends.Job) error {
		started <- string(j.Payload)
		<-release
		return nil
	})
	for range 4 {
		<-started
	}
	if n := r.claims.Load(); n != 1 {
		t.Fatalf("4 handlers started after %d claims with jobs, want 1 claim of 4 (asked: %v)", n, r.asks())
	}
	release <- struct{}{} // one slot frees: the fifth job starts
	<-started
	release <- struct{}{}
	release <- struct{}{}
	<-started
	for range 3 {
		release <- struct{}{}
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	asked := r.asks()
	if asked[0] != 4 {
		t.Fatalf("the first claim asked for %d jobs, want 4 (asked: %v)", asked[0], asked)
	}
	for _, n := range asked {
		if n > 4 {
			t.Fatalf("a claim asked for %d jobs with 4 slots (asked: %v)", n, asked)
		}
	}
}

func (r *recording) asks() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int(nil), r.asked...)
}

// pushNumbered pushes n jobs to queue q whose payloads are "0" to n-1.
func pushNumbered(t *testing.T, c *queue.Client, q string, n int) {
	t.Helper()
	for i := range n {
		if _, err := c.Push(context.Background(), q, fmt.Appendf(nil, "%d", i), queue.PushOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}
