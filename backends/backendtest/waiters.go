package backendtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/semaphore"
)

// firstWaiter is implemented by backends that can name the head of a
// semaphore's line, so that callers serve waiters FIFO. The suite requires
// it of every backend with Waiters.
type firstWaiter interface {
	FirstWaiter(ctx context.Context, ref backends.SemRef) (string, error)
}

// freshWaiters returns the semaphore and waiter views of a fresh store.
func freshWaiters(t *testing.T, h Harness) (*sem, backends.Waiters) {
	t.Helper()
	b, _ := fresh(t, h)
	return semOf(t, b), waitersOf(t, b)
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
		{"Line", testWaitLine},
		{"LineSeveralSlots", testWaitLineSeveral},
		{"LineCrashedWaiter", testWaitLineCrashed},
		{"LineOrder", testWaitLineOrder},
		{"LineCrashedWaiterWakes", testWaitLineCrashedWakes},
		{"WakeOnRelease", testWaitWake},
		{"Cancel", testWaitCancel},
		{"List", testWaiterList}, // waiters_list.go
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
	wantErr(t, w.EnterWait(ctx, backends.SemRef{Name: "absent"}, backends.AcquireRequest{Owner: newOwner("w"), Lease: time.Minute}), backends.ErrNotFound, "enter wait on an absent semaphore")

	s.put(h.waitConfig("build", 1))
	a, b := newOwner("wa"), newOwner("wb")
	ok(t, w.EnterWait(ctx, backends.SemRef{Name: "build"}, backends.AcquireRequest{Owner: a, Lease: time.Minute}), "enter a")
	ok(t, w.EnterWait(ctx, backends.SemRef{Name: "build"}, backends.AcquireRequest{Owner: a, Lease: time.Minute}), "enter a again (renew)")
	wantErr(t, w.EnterWait(ctx, backends.SemRef{Name: "build"}, backends.AcquireRequest{Owner: b, Lease: time.Minute}), backends.ErrTooManyWaiters, "enter b beyond max_waiting 1")
	if n := s.observe("build").Waiters; n != 1 {
		t.Errorf("observed %d waiters, want 1", n)
	}
	ok(t, w.LeaveWait(ctx, backends.SemRef{Name: "build"}, a), "leave a")
	if n := s.observe("build").Waiters; n != 0 {
		t.Errorf("observed %d waiters after leave, want 0", n)
	}
	ok(t, w.LeaveWait(ctx, backends.SemRef{Name: "build"}, a), "leave a twice")
	ok(t, w.EnterWait(ctx, backends.SemRef{Name: "build"}, backends.AcquireRequest{Owner: b, Lease: time.Minute}), "enter b after a left")
	wantErr(t, w.EnterWait(ctx, backends.SemRef{Name: "build"}, backends.AcquireRequest{Owner: a, Lease: time.Minute}), backends.ErrTooManyWaiters, "enter a while b waits")

	s.put(h.waitConfig("closed", 0))
	wantErr(t, w.EnterWait(ctx, backends.SemRef{Name: "closed"}, backends.AcquireRequest{Owner: a, Lease: time.Minute}), backends.ErrTooManyWaiters, "enter with max_waiting 0")
}

func testWaitUnbounded(t *testing.T, h Harness) {
	ctx := t.Context()
	s, w := freshWaiters(t, h)
	s.put(h.waitConfig("open", -1))
	for range 20 {
		ok(t, w.EnterWait(ctx, backends.SemRef{Name: "open"}, backends.AcquireRequest{Owner: newOwner("w"), Lease: time.Minute}), "enter with max_waiting -1")
	}
}

func testWaitExpiry(t *testing.T, h Harness) {
	ctx := t.Context()
	s, w := freshWaiters(t, h)
	s.put(h.waitConfig("build", 1))
	a, b := newOwner("wa"), newOwner("wb")
	ok(t, w.EnterWait(ctx, backends.SemRef{Name: "build"}, backends.AcquireRequest{Owner: a, Lease: time.Second}), "enter a with a 1s lease")
	wantErr(t, w.EnterWait(ctx, backends.SemRef{Name: "build"}, backends.AcquireRequest{Owner: b, Lease: time.Minute}), backends.ErrTooManyWaiters, "enter b while a waits")
	waitFor(t, "a's waiter lease to expire and free its place", func() (bool, error) {
		err := w.EnterWait(ctx, backends.SemRef{Name: "build"}, backends.AcquireRequest{Owner: b, Lease: time.Minute})
		if errors.Is(err, backends.ErrTooManyWaiters) {
			return false, nil
		}
		return err == nil, err
	})
	fw := as[firstWaiter](t, s.b)
	first, err := fw.FirstWaiter(ctx, backends.SemRef{Name: "build"})
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
		got, err := fw.FirstWaiter(ctx, backends.SemRef{Name: "line"})
		ok(t, err, "first waiter "+what)
		if got != want {
			t.Fatalf("first waiter %s: got %q, want %q", what, got, want)
		}
	}
	wantFirst("", "of an empty line")
	a, b, c := newOwner("wa"), newOwner("wb"), newOwner("wc")
	for _, o := range []string{a, b, c} {
		ok(t, w.EnterWait(ctx, backends.SemRef{Name: "line"}, backends.AcquireRequest{Owner: o, Lease: time.Minute}), "enter "+o)
	}
	wantFirst(a, "after a, b, c entered")
	ok(t, w.LeaveWait(ctx, backends.SemRef{Name: "line"}, a), "leave a")
	wantFirst(b, "after a left")
	// Renewing keeps the place in line.
	ok(t, w.EnterWait(ctx, backends.SemRef{Name: "line"}, backends.AcquireRequest{Owner: c, Lease: time.Minute}), "renew c")
	ok(t, w.EnterWait(ctx, backends.SemRef{Name: "line"}, backends.AcquireRequest{Owner: b, Lease: time.Minute}), "renew b")
	wantFirst(b, "after c and b renewed")
	// A newcomer queues behind everyone, even one who left earlier.
	ok(t, w.EnterWait(ctx, backends.SemRef{Name: "line"}, backends.AcquireRequest{Owner: a, Lease: time.Minute}), "a enters again")
	ok(t, w.LeaveWait(ctx, backends.SemRef{Name: "line"}, b), "leave b")
	wantFirst(c, "after b left")
	ok(t, w.LeaveWait(ctx, backends.SemRef{Name: "line"}, c), "leave c")
	wantFirst(a, "after c left")
	ok(t, w.LeaveWait(ctx, backends.SemRef{Name: "line"}, a), "leave a again")
	wantFirst("", "after everyone left")
}

// testWaitWake checks that WaitSemaphore returns once a holder releases,
// before its max. It does not time how fast.
func testWaitWake(t *testing.T, h Harness) {
	ctx := t.Context()
	s, w := freshWaiters(t, h)
	s.put(h.waitConfig("build", -1))
	holder := newOwner("holder")
	s.acquire(backends.SemRef{Name: "build"}, holder, time.Minute)
	// Releases wake the waiters of the line: WaitSemaphore is for an owner
	// registered with EnterWait.
	waiter := newOwner("waiter")
	ok(t, w.EnterWait(ctx, backends.SemRef{Name: "build"}, backends.AcquireRequest{Owner: waiter, Lease: time.Minute}), "enter wait")

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
		err := w.WaitSemaphore(ctx, backends.SemRef{Name: "build"}, waiter, maxWait)
		done <- result{err, time.Since(t0)}
	}()
	<-started
	time.Sleep(50 * time.Millisecond) // let the waiter block; not an assertion
	s.release(backends.SemRef{Name: "build"}, holder)
	r := <-done
	ok(t, r.err, "wait semaphore")
	if r.elapsed >= maxWait {
		t.Fatalf("wait semaphore returned after %v, not before its max %v although the holder released", r.elapsed, maxWait)
	}
	// The slot is free now: WaitSemaphore has nothing to wait for.
	ok(t, w.WaitSemaphore(ctx, backends.SemRef{Name: "build"}, waiter, maxWait), "wait on a free semaphore")
}

func testWaitCancel(t *testing.T, h Harness) {
	s, w := freshWaiters(t, h)
	s.put(h.waitConfig("build", -1))
	s.acquire(backends.SemRef{Name: "build"}, newOwner("holder"), time.Minute)

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := w.WaitSemaphore(ctx, backends.SemRef{Name: "build"}, "waiter", 10*time.Second)
	wantErr(t, err, context.Canceled, "wait with a cancelled context")

	// Cancelled while waiting on a full semaphore.
	ctx, cancel = context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.WaitSemaphore(ctx, backends.SemRef{Name: "build"}, "waiter", time.Minute) }()
	time.Sleep(50 * time.Millisecond) // let the waiter block; not an assertion
	cancel()
	select {
	case err := <-done:
		wantErr(t, err, context.Canceled, "wait cancelled while blocked")
	case <-time.After(waitTimeout):
		t.Fatalf("wait semaphore ignored cancellation for %v", waitTimeout)
	}
}

// The line: waiters are served first come, first served. A slot is granted
// only to a caller with fewer live waiters ahead of it than there are free
// slots: a newcomer (and a --no-wait caller), who is not in the line, has
// every live waiter ahead of it. A waiter whose record expired (it crashed)
// loses its place, so it holds the line for at most its waiter lease.

// refused asserts that owner is not granted a slot of ref now.
func (s *sem) refused(ref backends.SemRef, owner, who string) {
	s.t.Helper()
	_, err := s.TryAcquire(s.t.Context(), ref, backends.AcquireRequest{Owner: owner, Host: "h", PID: 1, Lease: time.Minute})
	wantErr(s.t, err, backends.ErrNoSlot, who+" tries to acquire while the line is ahead of it")
}

// wantWaiters checks the number of live waiter records.
func (s *sem) wantWaiters(name string, n int, when string) {
	s.t.Helper()
	if got := s.observe(name).Waiters; got != n {
		s.t.Fatalf("%s: %d waiters, want %d", when, got, n)
	}
}

// testWaitLine: with limit 1, waiters W1, W2, W3 in line and the slot
// freed, neither a newcomer nor W2 nor W3 gets it; W1 does, and its grant
// takes it out of the line. And so on down the line; once the line is
// empty, anyone.
func testWaitLine(t *testing.T, h Harness) {
	ctx := t.Context()
	s, w := freshWaiters(t, h)
	fw := as[firstWaiter](t, s.b)
	s.put(h.waitConfig("line", -1))
	holder := newOwner("holder")
	s.acquire(backends.SemRef{Name: "line"}, holder, time.Minute)
	w1, w2, w3 := newOwner("w1"), newOwner("w2"), newOwner("w3")
	for _, o := range []string{w1, w2, w3} {
		ok(t, w.EnterWait(ctx, backends.SemRef{Name: "line"}, backends.AcquireRequest{Owner: o, Lease: time.Minute}), "enter "+o)
	}
	s.release(backends.SemRef{Name: "line"}, holder)

	s.refused(backends.SemRef{Name: "line"}, newOwner("newcomer"), "a newcomer")
	s.refused(backends.SemRef{Name: "line"}, w3, "the third waiter")
	s.refused(backends.SemRef{Name: "line"}, w2, "the second waiter")
	s.acquire(backends.SemRef{Name: "line"}, w1, time.Minute)
	s.wantWaiters("line", 2, "after the first waiter's grant")
	first, err := fw.FirstWaiter(ctx, backends.SemRef{Name: "line"})
	ok(t, err, "first waiter")
	if first != w2 {
		t.Fatalf("first waiter after w1's grant: %q, want %q", first, w2)
	}

	s.release(backends.SemRef{Name: "line"}, w1)
	s.refused(backends.SemRef{Name: "line"}, newOwner("newcomer"), "a newcomer")
	s.refused(backends.SemRef{Name: "line"}, w3, "the third waiter")
	s.acquire(backends.SemRef{Name: "line"}, w2, time.Minute)
	s.release(backends.SemRef{Name: "line"}, w2)
	s.refused(backends.SemRef{Name: "line"}, newOwner("newcomer"), "a newcomer")
	s.acquire(backends.SemRef{Name: "line"}, w3, time.Minute)
	s.wantWaiters("line", 0, "after the last waiter's grant")
	s.release(backends.SemRef{Name: "line"}, w3)
	s.acquire(backends.SemRef{Name: "line"}, newOwner("newcomer"), time.Minute)
}

// testWaitLineSeveral: with limit 2, a waiter is granted a slot while
// fewer waiters are ahead of it than slots are free: the second in line
// gets one of two free slots, never the only one.
func testWaitLineSeveral(t *testing.T, h Harness) {
	ctx := t.Context()
	s, w := freshWaiters(t, h)
	cfg := h.semConfig("pool", 2)
	cfg.MaxWaiting = -1
	s.put(cfg)
	h1, h2 := newOwner("h1"), newOwner("h2")
	s.acquire(backends.SemRef{Name: "pool"}, h1, time.Minute)
	s.acquire(backends.SemRef{Name: "pool"}, h2, time.Minute)
	w1, w2, w3 := newOwner("w1"), newOwner("w2"), newOwner("w3")
	for _, o := range []string{w1, w2, w3} {
		ok(t, w.EnterWait(ctx, backends.SemRef{Name: "pool"}, backends.AcquireRequest{Owner: o, Lease: time.Minute}), "enter "+o)
	}
	s.release(backends.SemRef{Name: "pool"}, h1)
	s.refused(backends.SemRef{Name: "pool"}, w2, "the second waiter, one slot free")
	s.refused(backends.SemRef{Name: "pool"}, newOwner("newcomer"), "a newcomer, one slot free")
	s.release(backends.SemRef{Name: "pool"}, h2)
	s.acquire(backends.SemRef{Name: "pool"}, w2, time.Minute)
	s.refused(backends.SemRef{Name: "pool"}, w3, "the third waiter, the first still ahead")
	s.refused(backends.SemRef{Name: "pool"}, newOwner("newcomer"), "a newcomer, two waiters ahead")
	s.acquire(backends.SemRef{Name: "pool"}, w1, time.Minute)
	s.wantWaiters("pool", 1, "after two grants")
}

// testWaitLineCrashed: a waiter that stopped renewing (crashed) keeps its
// place only until its waiter lease ends; then the next in line is served.
func testWaitLineCrashed(t *testing.T, h Harness) {
	ctx := t.Context()
	s, w := freshWaiters(t, h)
	s.put(h.waitConfig("line", -1))
	holder := newOwner("holder")
	s.acquire(backends.SemRef{Name: "line"}, holder, time.Minute)
	const lease = 2 * time.Second
	before, err := s.b.Now(ctx)
	ok(t, err, "now")
	crashed := newOwner("crashed")
	ok(t, w.EnterWait(ctx, backends.SemRef{Name: "line"}, backends.AcquireRequest{Owner: crashed, Lease: lease}), "enter the waiter that will crash")
	after, err := s.b.Now(ctx)
	ok(t, err, "now")
	next := newOwner("next")
	ok(t, w.EnterWait(ctx, backends.SemRef{Name: "line"}, backends.AcquireRequest{Owner: next, Lease: time.Minute}), "enter the next waiter")
	s.release(backends.SemRef{Name: "line"}, holder)

	_, err = s.TryAcquire(ctx, backends.SemRef{Name: "line"}, backends.AcquireRequest{Owner: next, Host: "h", PID: 1, Lease: time.Minute})
	switch {
	case errors.Is(err, backends.ErrNoSlot):
		waitPast(t, s.b, after.Add(lease))
		s.acquire(backends.SemRef{Name: "line"}, next, time.Minute)
	case err == nil:
		// Only once the crashed waiter's record may have expired.
		now, nerr := s.b.Now(ctx)
		ok(t, nerr, "now")
		if now.Before(before.Add(lease)) {
			t.Fatalf("the next waiter overtook a live waiter record (now %v, record live until at least %v)", now, before.Add(lease))
		}
	default:
		t.Fatalf("acquire as the next waiter: %v", err)
	}
	s.wantWaiters("line", 0, "after the crashed record expired and the next waiter's grant")
}

// lineClient is a semaphore client on a handle of its own, as a host of
// its own would have.
func lineClient(t *testing.T, b backends.Backend, host string) *semaphore.Client {
	t.Helper()
	c, err := semaphore.New(b, host)
	ok(t, err, "semaphore client")
	return c
}

// testWaitLineOrder is the promise as `sem run` users see it, through the
// Go API: waiters that came one after the other, each from its own handle,
// get the slot in that order, and a newcomer that comes just as the slot is
// freed does not take it from them.
func testWaitLineOrder(t *testing.T, h Harness) {
	ctx := t.Context()
	b, open := fresh(t, h)
	s := semOf(t, b)
	s.put(h.waitConfig("line", -1))
	holder := newOwner("holder")
	s.acquire(backends.SemRef{Name: "line"}, holder, time.Minute)

	const n = 4
	type grant struct {
		i int
		l *semaphore.Lease
	}
	granted := make(chan grant, n)
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() }) // before the handles close
	for i := range n {
		c := lineClient(t, open(), fmt.Sprintf("waiter-%d", i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.Acquire(wctx, "line", semaphore.AcquireOptions{Lease: time.Minute, WaiterLease: time.Minute})
			if err != nil {
				if wctx.Err() == nil {
					t.Errorf("waiter %d: %v", i, err)
				}
				return
			}
			granted <- grant{i, l}
		}()
		waitFor(t, fmt.Sprintf("waiter %d in line", i), func() (bool, error) {
			return s.observe("line").Waiters == i+1, nil
		})
	}
	newcomer := lineClient(t, open(), "newcomer")
	release := func() error { return s.Release(ctx, backends.SemRef{Name: "line"}, holder) }
	for i := range n {
		ok(t, release(), "release the slot")
		_, err := newcomer.Acquire(ctx, "line", semaphore.AcquireOptions{Lease: time.Minute, NoWait: true})
		wantErr(t, err, semaphore.ErrNotAcquired, fmt.Sprintf("a newcomer without waiting, as the slot for waiter %d is freed", i))
		select {
		case g := <-granted:
			if g.i != i {
				t.Fatalf("waiter %d got the slot, want waiter %d: waiters are served in arrival order", g.i, i)
			}
			release = func() error { return g.l.Release(ctx) }
		case <-time.After(waitTimeout):
			t.Fatalf("waiter %d did not get the freed slot within %v", i, waitTimeout)
		}
	}
	ok(t, release(), "release the last waiter's slot")
}

// testWaitLineCrashedWakes: a waiter behind a crashed waiter's record is
// served once the record expires, without a release to wake it and well
// before its own periodic renewal (a third of its waiter lease) would
// have looked again.
func testWaitLineCrashedWakes(t *testing.T, h Harness) {
	ctx := t.Context()
	b, open := fresh(t, h)
	s := semOf(t, b)
	w := waitersOf(t, b)
	s.put(h.waitConfig("line", -1))
	const lease = 2 * time.Second
	before, err := b.Now(ctx)
	ok(t, err, "now")
	ok(t, w.EnterWait(ctx, backends.SemRef{Name: "line"}, backends.AcquireRequest{Owner: newOwner("crashed"), Lease: lease}), "enter the waiter that will crash")

	c := lineClient(t, open(), "waiter")
	l, err := c.Acquire(ctx, "line", semaphore.AcquireOptions{Lease: time.Minute, WaiterLease: 3 * time.Minute, Wait: waitTimeout})
	ok(t, err, "acquire behind a crashed waiter's record")
	now, err := b.Now(ctx)
	ok(t, err, "now")
	if now.Before(before.Add(lease)) {
		t.Fatalf("granted at %v while the crashed waiter's record was live until at least %v", now, before.Add(lease))
	}
	ok(t, l.Release(ctx), "release")
}
