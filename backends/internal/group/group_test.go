package group

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestClaimerGroups: claims that arrive while one runs go together in the
// next group, each gets exactly what run returned for it, and Limit splits
// groups.
func TestClaimerGroups(t *testing.T) {
	var c Claimer[string]
	c.Limit = 4
	release := make(chan struct{})
	var calls atomic.Int64
	var mu sync.Mutex
	var sizes []int
	run := func(ctx context.Context, queue string, group []*Claim[string]) ([][]string, error) {
		if calls.Add(1) == 1 {
			<-release // the first group holds the queue while the others queue up
		}
		mu.Lock()
		sizes = append(sizes, len(group))
		mu.Unlock()
		out := make([][]string, len(group))
		for i, r := range group {
			out[i] = []string{fmt.Sprintf("%s:%s:%d", queue, r.Owner, r.Max)}
		}
		return out, nil
	}
	var wg sync.WaitGroup
	got := make([][]string, 7)
	errs := make([]error, 7)
	wg.Add(1)
	go func() { defer wg.Done(); got[0], errs[0] = c.Claim(context.Background(), "q", "o0", 1, run) }()
	for calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	for i := 1; i < 7; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = c.Claim(context.Background(), "q", fmt.Sprintf("o%d", i), 1, run)
		}()
	}
	time.Sleep(50 * time.Millisecond) // all six queued behind the first
	close(release)
	wg.Wait()
	for i := range got {
		if errs[i] != nil || len(got[i]) != 1 || got[i][0] != fmt.Sprintf("q:o%d:1", i) {
			t.Errorf("claim %d: %v %v", i, got[i], errs[i])
		}
	}
	if len(sizes) != 3 || sizes[0] != 1 || sizes[1] != 4 || sizes[2] != 2 {
		t.Errorf("group sizes %v, want [1 4 2] (limit 4)", sizes)
	}
}

// TestClaimerCancelBeforeSent: a claim whose ctx ends before its group is
// sent leaves without being claimed for.
func TestClaimerCancelBeforeSent(t *testing.T) {
	var c Claimer[int]
	release := make(chan struct{})
	var seen sync.Map
	run := func(ctx context.Context, queue string, group []*Claim[int]) ([][]int, error) {
		for _, r := range group {
			seen.Store(r.Owner, true)
		}
		if _, ok := seen.Load("first"); ok && len(group) == 1 && group[0].Owner == "first" {
			<-release
		}
		return make([][]int, len(group)), nil
	}
	done := make(chan struct{})
	go func() { defer close(done); _, _ = c.Claim(context.Background(), "q", "first", 1, run) }()
	time.Sleep(20 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := c.Claim(ctx, "q", "gone", 1, run); errc <- err }()
	time.Sleep(20 * time.Millisecond)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled claim: %v", err)
	}
	close(release)
	<-done
	if _, ok := seen.Load("gone"); ok {
		t.Fatal("a claim that left was still sent")
	}
}

// TestBatcherPerCallerErrors: requests that arrive while a batch runs go in
// the next batch, and each caller gets its own error.
func TestBatcherPerCallerErrors(t *testing.T) {
	var b Batcher[int]
	release := make(chan struct{})
	var calls atomic.Int64
	var mu sync.Mutex
	var sizes []int
	run := func(ctx context.Context, batch []int) []error {
		if calls.Add(1) == 1 {
			<-release
		}
		mu.Lock()
		sizes = append(sizes, len(batch))
		mu.Unlock()
		errs := make([]error, len(batch))
		for i, n := range batch {
			if n%2 == 1 {
				errs[i] = fmt.Errorf("odd %d", n)
			}
		}
		return errs
	}
	var wg sync.WaitGroup
	errs := make([]error, 6)
	wg.Add(1)
	go func() { defer wg.Done(); errs[0] = b.Do(context.Background(), 0, run) }()
	for calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	for i := 1; i < 6; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = b.Do(context.Background(), i, run) }()
	}
	time.Sleep(50 * time.Millisecond)
	close(release)
	wg.Wait()
	for i, err := range errs {
		if (err != nil) != (i%2 == 1) {
			t.Errorf("request %d: %v", i, err)
		}
	}
	if len(sizes) != 2 || sizes[1] != 5 {
		t.Errorf("batch sizes %v, want [1 5]", sizes)
	}
}

// TestBatcherRounds: with Rounds 2, a request that finds one batch in
// flight starts a second at once, a third waits, and no more than two
// batches ever run together.
func TestBatcherRounds(t *testing.T) {
	b := Batcher[int]{Rounds: 2}
	release := make(chan struct{})
	var inFlight, most atomic.Int64
	started := make(chan int, 16)
	run := func(ctx context.Context, batch []int) []error {
		n := inFlight.Add(1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		started <- len(batch)
		<-release
		inFlight.Add(-1)
		return make([]error, len(batch))
	}
	var wg sync.WaitGroup
	do := func(i int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := b.Do(context.Background(), i, run); err != nil {
				t.Errorf("request %d: %v", i, err)
			}
		}()
	}
	do(0)
	<-started
	do(1)
	select {
	case n := <-started:
		if n != 1 {
			t.Fatalf("second batch of %d, want 1", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a request that found one batch in flight did not start a second")
	}
	for i := 2; i < 6; i++ {
		do(i)
	}
	time.Sleep(50 * time.Millisecond)
	if n := len(started); n != 0 {
		t.Fatalf("%d batches started beyond the two in flight", n)
	}
	close(release)
	wg.Wait()
	if m := most.Load(); m != 2 {
		t.Errorf("at most %d batches ran together, want 2", m)
	}
}
