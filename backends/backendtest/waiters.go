package backendtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
)

// firstWaiter is implemented by backends that can name the head of a
// semaphore's line, so that callers serve waiters FIFO. The suite requires
// it of every backend with Waiters.
type firstWaiter interface {
	FirstWaiter(ctx context.Context, name string) (string, error)
}

// freshWaiters returns the semaphore and waiter views of a fresh store.
func freshWaiters(t *testing.T, h Harness) (*sem, backends.Waiters) {
	t.Helper()
	b, _ := fresh(t, h)
	return semOf(t, b), as[backends.Waiters](t, b)
}

func testWaiters(t *testing.T, h Harness) {
	for _, c := range []struct {
		name string
		run  func(t *testing.T, h Harness)
	}{
		{"MaxWaiting", testWaitMax},
		{"Unbounded", testWaitUnbounded},
		{"Expiry", testWaitExpiry},
		{"FIFO", testWaitFIFO},
		{"WakeOnRelease", testWaitWake},
		{"Cancel", testWaitCancel},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, h)
		})
	}
}

// waitConfig is a semaphore of limit 1 with the given max_waiting.
func (h Harness) waitConfig(name string, maxWaiting int) backends.SemaphoreConfig {
	cfg := h.semConfig(name, 1)
	cfg.MaxWaiting = maxWaiting
	return cfg
}

func testWaitMax(t *testing.T, h Harness) {
	ctx := t.Context()
	s, w := freshWaiters(t, h)
	wantErr(t, w.EnterWait(ctx, "absent", newOwner("w"), time.Minute), backends.ErrNotFound, "enter wait on an absent semaphore")

	s.put(h.waitConfig("build", 1))
	a, b := newOwner("wa"), newOwner("wb")
	ok(t, w.EnterWait(ctx, "build", a, time.Minute), "enter a")
	ok(t, w.EnterWait(ctx, "build", a, time.Minute), "enter a again (renew)")
	wantErr(t, w.EnterWait(ctx, "build", b, time.Minute), backends.ErrTooManyWaiters, "enter b beyond max_waiting 1")
	if n := s.observe("build").Waiters; n != 1 {
		t.Errorf("observed %d waiters, want 1", n)
	}
	ok(t, w.LeaveWait(ctx, "build", a), "leave a")
	if n := s.observe("build").Waiters; n != 0 {
		t.Errorf("observed %d waiters after leave, want 0", n)
	}
	ok(t, w.LeaveWait(ctx, "build", a), "leave a twice")
	ok(t, w.EnterWait(ctx, "build", b, time.Minute), "enter b after a left")
	wantErr(t, w.EnterWait(ctx, "build", a, time.Minute), backends.ErrTooManyWaiters, "enter a while b waits")

	s.put(h.waitConfig("closed", 0))
	wantErr(t, w.EnterWait(ctx, "closed", a, time.Minute), backends.ErrTooManyWaiters, "enter with max_waiting 0")
}

func testWaitUnbounded(t *testing.T, h Harness) {
	ctx := t.Context()
	s, w := freshWaiters(t, h)
	s.put(h.waitConfig("open", -1))
	for range 20 {
		ok(t, w.EnterWait(ctx, "open", newOwner("w"), time.Minute), "enter with max_waiting -1")
	}
}

func testWaitExpiry(t *testing.T, h Harness) {
	ctx := t.Context()
	s, w := freshWaiters(t, h)
	s.put(h.waitConfig("build", 1))
	a, b := newOwner("wa"), newOwner("wb")
	ok(t, w.EnterWait(ctx, "build", a, time.Second), "enter a with a 1s lease")
	wantErr(t, w.EnterWait(ctx, "build", b, time.Minute), backends.ErrTooManyWaiters, "enter b while a waits")
	waitFor(t, "a's waiter lease to expire and free its place", func() (bool, error) {
		err := w.EnterWait(ctx, "build", b, time.Minute)
		if errors.Is(err, backends.ErrTooManyWaiters) {
			return false, nil
		}
		return err == nil, err
	})
	fw := as[firstWaiter](t, s.b)
	first, err := fw.FirstWaiter(ctx, "build")
	ok(t, err, "first waiter")
	if first != b {
		t.Fatalf("first waiter %q, want %q after a expired", first, b)
	}
}

func testWaitFIFO(t *testing.T, h Harness) {
	ctx := t.Context()
	s, w := freshWaiters(t, h)
	fw := as[firstWaiter](t, s.b)
	s.put(h.waitConfig("line", -1))
	wantFirst := func(want, what string) {
		t.Helper()
		got, err := fw.FirstWaiter(ctx, "line")
		ok(t, err, "first waiter "+what)
		if got != want {
			t.Fatalf("first waiter %s: got %q, want %q", what, got, want)
		}
	}
	wantFirst("", "of an empty line")
	a, b, c := newOwner("wa"), newOwner("wb"), newOwner("wc")
	for _, o := range []string{a, b, c} {
		ok(t, w.EnterWait(ctx, "line", o, time.Minute), "enter "+o)
	}
	wantFirst(a, "after a, b, c entered")
	ok(t, w.LeaveWait(ctx, "line", a), "leave a")
	wantFirst(b, "after a left")
	// Renewing keeps the place in line.
	ok(t, w.EnterWait(ctx, "line", c, time.Minute), "renew c")
	ok(t, w.EnterWait(ctx, "line", b, time.Minute), "renew b")
	wantFirst(b, "after c and b renewed")
	// A newcomer queues behind everyone, even one who left earlier.
	ok(t, w.EnterWait(ctx, "line", a, time.Minute), "a enters again")
	ok(t, w.LeaveWait(ctx, "line", b), "leave b")
	wantFirst(c, "after b left")
	ok(t, w.LeaveWait(ctx, "line", c), "leave c")
	wantFirst(a, "after c left")
	ok(t, w.LeaveWait(ctx, "line", a), "leave a again")
	wantFirst("", "after everyone left")
}

// testWaitWake checks that WaitSemaphore returns once a holder releases,
// before its max. It does not time how fast.
func testWaitWake(t *testing.T, h Harness) {
	ctx := t.Context()
	s, w := freshWaiters(t, h)
	s.put(h.waitConfig("build", -1))
	holder := newOwner("holder")
	s.acquire("build", holder, time.Minute)

	const maxWait = 10 * time.Second
	started := make(chan struct{})
	type result struct {
		err     error
		elapsed time.Duration
	}
	done := make(chan result, 1)
	go func() {
		close(started)
		t0 := time.Now()
		err := w.WaitSemaphore(ctx, "build", "waiter", maxWait)
		done <- result{err, time.Since(t0)}
	}()
	<-started
	time.Sleep(50 * time.Millisecond) // let the waiter block; not an assertion
	s.release("build", holder)
	r := <-done
	ok(t, r.err, "wait semaphore")
	if r.elapsed >= maxWait {
		t.Fatalf("wait semaphore returned after %v, not before its max %v although the holder released", r.elapsed, maxWait)
	}
	// The slot is free now: WaitSemaphore has nothing to wait for.
	ok(t, w.WaitSemaphore(ctx, "build", "waiter", maxWait), "wait on a free semaphore")
}

func testWaitCancel(t *testing.T, h Harness) {
	s, w := freshWaiters(t, h)
	s.put(h.waitConfig("build", -1))
	s.acquire("build", newOwner("holder"), time.Minute)

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := w.WaitSemaphore(ctx, "build", "waiter", 10*time.Second)
	wantErr(t, err, context.Canceled, "wait with a cancelled context")

	// Cancelled while waiting on a full semaphore.
	ctx, cancel = context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.WaitSemaphore(ctx, "build", "waiter", time.Minute) }()
	time.Sleep(50 * time.Millisecond) // let the waiter block; not an assertion
	cancel()
	select {
	case err := <-done:
		wantErr(t, err, context.Canceled, "wait cancelled while blocked")
	case <-time.After(waitTimeout):
		t.Fatalf("wait semaphore ignored cancellation for %v", waitTimeout)
	}
}
