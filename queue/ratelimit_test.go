package queue_test

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/sqlite"
	"github.com/coordd/coordd/queue"
)

// limitedStore is a store holding queue q limited by rate limit r.
func limitedStore(t *testing.T, r backends.RateLimitConfig) *sqlite.Store {
	t.Helper()
	cfg := queueConfig("q")
	cfg.RateLimit = r.Name
	st := newStore(t, cfg)
	if err := st.PutRateLimit(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestWorkStartsJobsAtTheRate: two workers of a queue with a rate limit
// start its jobs no faster than rate × window + burst over any window,
// and drain it.
func TestWorkStartsJobsAtTheRate(t *testing.T) {
	r := backends.RateLimitConfig{Name: "r", Count: 10, Per: time.Second, Burst: 2} // one per 100ms
	st := limitedStore(t, r)
	ctx := context.Background()
	const jobs = 16
	for range jobs {
		if _, err := newClient(t, st).Push(ctx, "q", []byte("x"), queue.PushOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var starts []time.Time
	h := func(context.Context, backends.Job) error {
		mu.Lock()
		starts = append(starts, time.Now())
		mu.Unlock()
		return nil
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := newClient(t, st).Work(ctx, "q", queue.WorkerOptions{Concurrency: 4, Drain: true}, h); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if len(starts) != jobs {
		t.Fatalf("%d jobs started, want %d", len(starts), jobs)
	}
	sort.Slice(starts, func(i, j int) bool { return starts[i].Before(starts[j]) })
	// 100 ms for the claim between a permit and its job's start, which a
	// loaded machine (a -race run beside others) can stretch.
	const slack = 100 * time.Millisecond
	for i := range starts {
		for j := i; j < len(starts); j++ {
			w := starts[j].Sub(starts[i])
			if n, allowed := j-i+1, int((w+slack)/r.Interval())+r.Burst; n > allowed {
				t.Fatalf("%d jobs started within %v: more than rate × window + burst = %d", n, w, allowed)
			}
		}
	}
}

// TestIdleWorkerSpendsNoPermits: a worker that waits on an empty queue
// takes no permit (its first claim and each idle wait that ends with no
// job look first), so a job pushed after a long idle time starts at once
// with a limit of one permit an hour.
func TestIdleWorkerSpendsNoPermits(t *testing.T) {
	st := limitedStore(t, backends.RateLimitConfig{Name: "r", Count: 1, Per: time.Hour, Burst: 1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		done <- newClient(t, st).Work(ctx, "q", queue.WorkerOptions{}, func(context.Context, backends.Job) error {
			started <- struct{}{}
			return nil
		})
	}()
	time.Sleep(6 * time.Second) // past one idle wait (5 s)
	// Another client pushes: no in-process wake-up, the worker's own
	// wait must see it.
	if _, err := newClient(t, st).Push(context.Background(), "q", []byte("x"), queue.PushOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		m, _ := st.ObserveRateLimits(context.Background(), []string{"r"})
		t.Fatalf("the job did not start: the idle worker spent the permit (%+v)", m["r"])
	}
	cancel()
	if err := <-done; err != nil && ctx.Err() == nil {
		t.Fatal(err)
	}
}
