package queue_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/sqlite"
	"github.com/coordd/coordd/queue"
	"github.com/coordd/coordd/spec"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func queueConfig(name string) backends.QueueConfig {
	return backends.QueueConfig{
		Name: name, Partitions: 2, VisibilityTimeout: time.Minute, MaxAttempts: 5,
		RetryBackoff: 0, Unique: spec.UniqueNone, MaxPayload: 1 << 20, Claim: spec.ClaimPartition,
	}
}

// newStore opens a migrated SQLite store holding cfg's queue.
func newStore(t testing.TB, cfg backends.QueueConfig) *sqlite.Store {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, "db", filepath.Join(t.TempDir(), "db.sqlite"), backends.Options{Version: "0.1.0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutQueue(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	return st
}

func newClient(t testing.TB, b backends.Backend) *queue.Client {
	t.Helper()
	c, err := queue.New(b)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func observe(t *testing.T, st *sqlite.Store, name string) *backends.QueueState {
	t.Helper()
	m, err := st.ObserveQueues(context.Background(), []string{name})
	if err != nil || m[name] == nil {
		t.Fatalf("observe %s: %v %v", name, m, err)
	}
	return m[name]
}

// work runs Work in the background and returns a function that waits for
// its result.
func work(ctx context.Context, c *queue.Client, name string, opts queue.WorkerOptions, h queue.Handler) func() error {
	done := make(chan error, 1)
	go func() { done <- c.Work(ctx, name, opts, h) }()
	return func() error {
		select {
		case err := <-done:
			return err
		case <-time.After(60 * time.Second):
			return errors.New("Work did not return within 60s")
		}
	}
}

func TestPushWorkAckDrain(t *testing.T) {
	st := newStore(t, queueConfig("q"))
	c := newClient(t, st)
	ctx := context.Background()
	want := map[string]bool{}
	for i := range 20 {
		p := fmt.Sprintf("job-%d", i)
		want[p] = true
		if _, err := c.Push(ctx, "q", []byte(p), queue.PushOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// A delayed job counts for drain: Work must wait for it.
	want["late"] = true
	if _, err := c.Push(ctx, "q", []byte("late"), queue.PushOptions{Delay: 300 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	var stats queue.Stats
	err := c.Work(ctx, "q", queue.WorkerOptions{Concurrency: 4, Batch: 3, Drain: true, Owner: "test", Stats: &stats}, func(ctx context.Context, j backends.Job) error {
		if l := queue.LeaseOf(ctx); l == nil || l.Job.ID != j.ID || l.Visibility != time.Minute || l.ClaimedAt.IsZero() {
			return fmt.Errorf("lease %+v", l)
		}
		mu.Lock()
		seen[string(j.Payload)]++
		mu.Unlock()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for p := range want {
		if seen[p] != 1 {
			t.Errorf("job %q ran %d times", p, seen[p])
		}
	}
	if len(seen) != len(want) || stats.Acked.Load() != int64(len(want)) || stats.Lost.Load() != 0 {
		t.Fatalf("seen %d jobs, stats acked %d lost %d", len(seen), stats.Acked.Load(), stats.Lost.Load())
	}
	if st := observe(t, st, "q"); st.Jobs() != 0 {
		t.Fatalf("queue not empty: %+v", st)
	}
}

func TestRetryThenDead(t *testing.T) {
	cfg := queueConfig("q")
	cfg.MaxAttempts = 3
	st := newStore(t, cfg)
	c := newClient(t, st)
	ctx := context.Background()
	j, err := c.Push(ctx, "q", []byte("x"), queue.PushOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	var stats queue.Stats
	err = c.Work(ctx, "q", queue.WorkerOptions{Drain: true, Stats: &stats}, func(ctx context.Context, got backends.Job) error {
		if n := calls.Add(1); int(n) != got.Attempt {
			return fmt.Errorf("call %d has attempt %d", n, got.Attempt)
		}
		return errors.New("boom")
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 3 || stats.Retried.Load() != 3 {
		t.Fatalf("handler ran %d times, %d retries; want 3", calls.Load(), stats.Retried.Load())
	}
	dead, err := st.Dead(ctx, "q", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 || dead[0].ID != j.ID || dead[0].Attempt != 3 || dead[0].LastError != "boom" {
		t.Fatalf("dead: %+v", dead)
	}
}

func TestDuplicatePassesThrough(t *testing.T) {
	cfg := queueConfig("q")
	cfg.Unique = spec.UniquePending
	st := newStore(t, cfg)
	c := newClient(t, st)
	ctx := context.Background()
	a, err := c.Push(ctx, "q", []byte("1"), queue.PushOptions{Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Push(ctx, "q", []byte("2"), queue.PushOptions{Key: "k"})
	if !errors.Is(err, backends.ErrDuplicate) || b.ID != a.ID {
		t.Fatalf("second push: %+v %v", b, err)
	}
}

// TestIdleWakeUp: an idle worker makes few round trips, and a push through
// the same Client wakes it.
func TestIdleWakeUp(t *testing.T) {
	st := newStore(t, queueConfig("q"))
	c := newClient(t, st)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan int64, 1)
	wait := work(ctx, c, "q", queue.WorkerOptions{Concurrency: 2}, func(ctx context.Context, j backends.Job) error {
		got <- j.ID
		return nil
	})
	time.Sleep(200 * time.Millisecond) // let it go idle
	before := st.RoundTrips()
	time.Sleep(time.Second)
	if d := st.RoundTrips() - before; d >= 100 {
		t.Errorf("an idle worker made %d round trips in 1s", d)
	} else {
		t.Logf("an idle worker made %d round trips in 1s", d)
	}
	j, err := c.Push(ctx, "q", []byte("wake"), queue.PushOptions{})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-got:
		if id != j.ID {
			t.Fatalf("worked job %d, pushed %d", id, j.ID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the idle worker did not pick up the pushed job within 10s")
	}
	cancel()
	if err := wait(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Work after cancel: %v", err)
	}
}

// TestLeaseKeptByExtend: a handler that runs three visibility timeouts
// keeps its job: nobody else can claim it, and the ack succeeds.
func TestLeaseKeptByExtend(t *testing.T) {
	cfg := queueConfig("q")
	cfg.VisibilityTimeout = time.Second
	st := newStore(t, cfg)
	c := newClient(t, st)
	ctx := context.Background()
	if _, err := c.Push(ctx, "q", []byte("slow"), queue.PushOptions{}); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	var stats queue.Stats
	wait := work(ctx, c, "q", queue.WorkerOptions{Drain: true, Stats: &stats}, func(ctx context.Context, j backends.Job) error {
		close(started)
		select {
		case <-time.After(3 * time.Second):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	<-started
	for range 10 {
		stolen, err := st.Claim(ctx, "q", "thief", 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(stolen) > 0 {
			t.Fatalf("claimed %+v while its handler was running", stolen)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if stats.Acked.Load() != 1 || stats.Lost.Load() != 0 {
		t.Fatalf("acked %d lost %d", stats.Acked.Load(), stats.Lost.Load())
	}
}

// TestLeaseLostCancelsHandler: when another owner takes the job, the next
// extend fails, the handler's ctx ends with ErrLeaseLost, and the job is not
// acked over the new owner.
func TestLeaseLostCancelsHandler(t *testing.T) {
	cfg := queueConfig("q")
	cfg.VisibilityTimeout = time.Second
	st := newStore(t, cfg)
	c := newClient(t, st)
	ctx := context.Background()
	j, err := c.Push(ctx, "q", []byte("x"), queue.PushOptions{})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	cause := make(chan error, 1)
	var stats queue.Stats
	var logs atomic.Int32
	wait := work(ctx, c, "q", queue.WorkerOptions{Stats: &stats, Logf: func(string, ...any) { logs.Add(1) }, Stop: started}, func(ctx context.Context, _ backends.Job) error {
		close(started) // also stops claiming
		select {
		case <-ctx.Done():
			cause <- context.Cause(ctx)
		case <-time.After(20 * time.Second):
			cause <- errors.New("not cancelled")
		}
		return nil // would ack, were the lease not lost
	})
	<-started
	if _, err := st.DB().Exec(`UPDATE queue_jobs SET owner = 'thief' WHERE id = ?`, j.ID); err != nil {
		t.Fatal(err)
	}
	if err := <-cause; !errors.Is(err, queue.ErrLeaseLost) || !errors.Is(err, backends.ErrLost) {
		t.Fatalf("handler's ctx cause: %v", err)
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if stats.Lost.Load() != 1 || stats.Acked.Load() != 0 || logs.Load() == 0 {
		t.Fatalf("lost %d acked %d logs %d", stats.Lost.Load(), stats.Acked.Load(), logs.Load())
	}
	var owner string
	if err := st.DB().QueryRow(`SELECT owner FROM queue_jobs WHERE id = ?`, j.ID).Scan(&owner); err != nil || owner != "thief" {
		t.Fatalf("the new owner's job: owner %q, %v", owner, err)
	}
}

// TestStopLetsHandlersFinish: closing Stop ends claiming, but the running
// handler keeps its context and its job is acked.
func TestStopLetsHandlersFinish(t *testing.T) {
	st := newStore(t, queueConfig("q"))
	c := newClient(t, st)
	ctx := context.Background()
	for range 3 {
		if _, err := c.Push(ctx, "q", []byte("x"), queue.PushOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	var stats queue.Stats
	wait := work(ctx, c, "q", queue.WorkerOptions{Stop: stop, Stats: &stats}, func(hctx context.Context, _ backends.Job) error {
		close(stop)
		time.Sleep(100 * time.Millisecond)
		return hctx.Err()
	})
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if stats.Acked.Load() != 1 || stats.Claimed.Load() != 1 {
		t.Fatalf("claimed %d acked %d", stats.Claimed.Load(), stats.Acked.Load())
	}
	if st := observe(t, st, "q"); st.Ready != 2 {
		t.Fatalf("ready %d, want 2", st.Ready)
	}
}

func TestWorkAbsentQueue(t *testing.T) {
	st := newStore(t, queueConfig("q"))
	c := newClient(t, st)
	err := c.Work(context.Background(), "nope", queue.WorkerOptions{}, func(context.Context, backends.Job) error { return nil })
	if !errors.Is(err, backends.ErrNotFound) {
		t.Fatalf("Work on an absent queue: %v", err)
	}
}
