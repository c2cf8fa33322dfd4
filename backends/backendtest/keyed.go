package backendtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/semaphore"
	"github.com/coordd/coordd/spec"
)

// Keyed semaphores (backends/instance.go): each key given at run time is an
// instance with the semaphore's limit and max_waiting, its own holders and
// line, and nothing left in the store once it is idle.

// keyedConfig is a keyed semaphore of the given limit and max_waiting.
func (h Harness) keyedConfig(name string, limit, maxWaiting int) backends.SemaphoreConfig {
	cfg := h.semConfig(name, limit)
	cfg.Keyed, cfg.MaxWaiting = true, maxWaiting
	return cfg
}

// testKeyed checks keyed semaphores; a backend that cannot hold them
// (Harness.NoKeyed) must refuse them.
func testKeyed(t *testing.T, h Harness) {
	if h.NoKeyed {
		t.Run("Refused", func(t *testing.T) {
			t.Parallel()
			testKeyedRefused(t, h)
		})
		return
	}
	if h.InstanceRows == nil {
		t.Fatal("backendtest: Harness.InstanceRows is nil; a backend that holds keyed semaphores must let the suite read their rows")
	}
	for _, c := range []struct {
		name string
		run  func(t *testing.T, h Harness)
	}{
		{"OneRunsOneWaits", testKeyedOneRunsOneWaits},
		{"LeavesNothingBehind", testKeyedNothingLeft},
		{"CrashedHolderReclaimed", testKeyedCrashedHolder},
		{"ExpiredWaiterLeavesNothing", testKeyedExpiredWaiter},
		{"LimitFromSemaphore", testKeyedLimit},
		{"DeleteDrains", testKeyedDelete},
		{"Fencing", testKeyedFencing},
		{"KeyRules", testKeyedRules},
		{"Observe", testKeyedObserve},
		{"LineRule", testKeyedLineRule},
		{"LineOrder", testKeyedLineOrder},
		{"Concurrent", testKeyedConcurrent},
		{"RefusedModes", testKeyedRefusedModes},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, h)
		})
	}
}

// noRows fails when the store holds any row or key of an instance of
// keyed semaphore name.
func (h Harness) noRows(t *testing.T, b backends.Backend, name, when string) {
	t.Helper()
	if rows := h.InstanceRows(t, b, name); len(rows) > 0 {
		t.Fatalf("%s: the store still holds %d row(s)/key(s) of instances of %s:\n  %s", when, len(rows), name, strings.Join(rows, "\n  "))
	}
}

// waitNoRows waits until the store holds no row or key of an instance of
// name (a backend may remove what a crashed caller left by expiry).
func (h Harness) waitNoRows(t *testing.T, b backends.Backend, name, when string, poke func()) {
	t.Helper()
	waitFor(t, when+": no instance rows", func() (bool, error) {
		if poke != nil {
			poke()
		}
		return len(h.InstanceRows(t, b, name)) == 0, nil
	})
}

func keyedClient(t *testing.T, b backends.Backend, host string) *semaphore.Client {
	t.Helper()
	return lineClient(t, b, host)
}

// testKeyedOneRunsOneWaits is one runs, one waits, the rest are refused,
// per key: limit 1, max_waiting 1. Of three callers of one key one runs,
// one waits and the third is refused at once with ErrTooManyWaiters;
// another key is independent. When the first releases, the waiter runs;
// once all release, nothing of either instance is left.
func testKeyedOneRunsOneWaits(t *testing.T, h Harness) {
	ctx := t.Context()
	b, open := fresh(t, h)
	s := semOf(t, b)
	s.put(h.keyedConfig("reindex", 1, 1))

	first := keyedClient(t, open(), "first")
	l1, err := first.Acquire(ctx, "reindex", semaphore.AcquireOptions{Lease: time.Minute, NoWait: true, Key: "user-7"})
	ok(t, err, "first caller of user-7")
	if l1.Key != "user-7" || l1.Name != "reindex" || l1.Slot != 0 {
		t.Fatalf("lease %q key %q slot %d, want reindex key user-7 slot 0", l1.Name, l1.Key, l1.Slot)
	}

	second := keyedClient(t, open(), "second")
	got2 := make(chan *semaphore.Lease, 1)
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		l, err := second.Acquire(wctx, "reindex", semaphore.AcquireOptions{Lease: time.Minute, WaiterLease: time.Minute, Key: "user-7"})
		if err != nil {
			if wctx.Err() == nil {
				t.Errorf("second caller of user-7: %v", err)
			}
			close(got2)
			return
		}
		got2 <- l
	}()
	waitFor(t, "the second caller of user-7 in line", func() (bool, error) {
		return instanceWaiters(s.observe("reindex"), "user-7") == 1, nil
	})

	third := keyedClient(t, open(), "third")
	_, err = third.Acquire(ctx, "reindex", semaphore.AcquireOptions{Lease: time.Minute, Wait: time.Hour, Key: "user-7"})
	wantErr(t, err, backends.ErrTooManyWaiters, "third caller of user-7, with one running and one waiting")

	// Another key: its own instance, free although user-7's line is full.
	other := keyedClient(t, open(), "other")
	l8, err := other.Acquire(ctx, "reindex", semaphore.AcquireOptions{Lease: time.Minute, NoWait: true, Key: "user-8"})
	ok(t, err, "first caller of user-8")
	w8 := newOwner("w8")
	ok(t, waitersOf(t, b).EnterWait(ctx, backends.SemRef{Name: "reindex", Key: "user-8"}, backends.AcquireRequest{Owner: w8, Lease: time.Minute}), "a waiter of user-8 beside user-7's")

	select {
	case l := <-got2:
		t.Fatalf("the second caller of user-7 got a slot (%v) while the first holds it", l)
	default:
	}
	ok(t, l1.Release(ctx), "the first caller of user-7 ends")
	var l2 *semaphore.Lease
	select {
	case l2 = <-got2:
	case <-time.After(waitTimeout):
		t.Fatalf("the waiter of user-7 did not get the slot within %v of its release", waitTimeout)
	}
	if l2 == nil {
		t.Fatal("the waiter of user-7 failed")
	}
	if l2.Fencing <= l1.Fencing {
		t.Errorf("fencing %d after %d: want strictly increasing", l2.Fencing, l1.Fencing)
	}
	ok(t, l2.Release(ctx), "the second caller of user-7 ends")
	ok(t, waitersOf(t, b).LeaveWait(ctx, backends.SemRef{Name: "reindex", Key: "user-8"}, w8), "the waiter of user-8 leaves")
	ok(t, l8.Release(ctx), "the caller of user-8 ends")
	h.noRows(t, b, "reindex", "after every caller released or left")
}

// instanceWaiters is the number of waiters an observation shows for key.
func instanceWaiters(st *backends.SemaphoreState, key string) int {
	if st == nil {
		return -1
	}
	for _, i := range st.Instances {
		if i.Key == key {
			return i.Waiters
		}
	}
	return 0
}

// testKeyedNothingLeft: an instance is gone once it is idle, whatever made
// it so: the last release, a waiter that leaves, a grant that takes the
// last waiter out of line.
func testKeyedNothingLeft(t *testing.T, h Harness) {
	ctx := t.Context()
	b, _ := fresh(t, h)
	s := semOf(t, b)
	w := waitersOf(t, b)
	s.put(h.keyedConfig("k", 2, -1))
	ref := backends.SemRef{Name: "k", Key: "file/α 1.txt"}
	h.noRows(t, b, "k", "before any acquire")

	a, c := newOwner("a"), newOwner("c")
	s.acquire(ref, a, time.Minute)
	s.acquire(ref, c, time.Minute)
	if rows := h.InstanceRows(t, b, "k"); len(rows) == 0 {
		t.Fatal("InstanceRows finds nothing while the instance has two holders: it does not read the instance's rows")
	}
	s.release(ref, a)
	s.release(ref, c)
	h.noRows(t, b, "k", "after the last release")

	waiter := newOwner("w")
	ok(t, w.EnterWait(ctx, ref, backends.AcquireRequest{Owner: waiter, Lease: time.Minute}), "enter wait")
	ok(t, w.EnterWait(ctx, ref, backends.AcquireRequest{Owner: waiter, Lease: time.Minute}), "renew wait")
	ok(t, w.LeaveWait(ctx, ref, waiter), "leave wait")
	h.noRows(t, b, "k", "after the only waiter left")

	// A waiter granted: the grant removes its record; its release the rest.
	holders := []string{newOwner("h1"), newOwner("h2")}
	for _, o := range holders {
		s.acquire(ref, o, time.Minute)
	}
	ok(t, w.EnterWait(ctx, ref, backends.AcquireRequest{Owner: waiter, Lease: time.Minute}), "enter wait behind two holders")
	s.release(ref, holders[0])
	s.acquire(ref, waiter, time.Minute)
	s.wantWaiters("k", 0, "after the waiter's grant")
	s.release(ref, holders[1])
	s.release(ref, waiter)
	h.noRows(t, b, "k", "after the granted waiter released")
}

// testKeyedCrashedHolder: a holder that never releases keeps its instance
// until its lease expires; the next caller of the key reclaims the slot,
// and once it releases nothing is left. The crashed holder's own release
// is ErrLost.
func testKeyedCrashedHolder(t *testing.T, h Harness) {
	ctx := t.Context()
	b, _ := fresh(t, h)
	s := semOf(t, b)
	s.put(h.keyedConfig("k", 1, -1))
	ref := backends.SemRef{Name: "k", Key: "user-1"}
	crashed := newOwner("crashed")
	g := s.acquire(ref, crashed, time.Second)
	s.full(ref, g.ExpiresAt)
	waitPast(t, b, g.ExpiresAt)

	next := newOwner("next")
	g2 := s.acquire(ref, next, time.Minute)
	if g2.Fencing <= g.Fencing {
		t.Errorf("fencing %d after the crashed holder's %d", g2.Fencing, g.Fencing)
	}
	wantErr(t, s.Release(ctx, ref, crashed), backends.ErrLost, "release by the crashed holder after the reclaim")
	s.release(ref, next)
	h.noRows(t, b, "k", "after the reclaiming holder released")

	// A crashed holder of a key nobody uses again: its row goes once its
	// lease expired, by itself or with the next call on any instance.
	g3 := s.acquire(backends.SemRef{Name: "k", Key: "user-2"}, newOwner("crashed"), time.Second)
	waitPast(t, b, g3.ExpiresAt)
	poke := backends.SemRef{Name: "k", Key: "user-3"}
	h.waitNoRows(t, b, "k", "after a crashed holder's lease expired", func() {
		o := newOwner("poke")
		s.acquire(poke, o, time.Minute)
		s.release(poke, o)
	})
}

// testKeyedExpiredWaiter: a waiter that crashed holds its place until its
// record expires; then nothing of it is left.
func testKeyedExpiredWaiter(t *testing.T, h Harness) {
	ctx := t.Context()
	b, _ := fresh(t, h)
	s := semOf(t, b)
	w := waitersOf(t, b)
	s.put(h.keyedConfig("k", 1, 1))
	ref := backends.SemRef{Name: "k", Key: "user-1"}
	before, err := b.Now(ctx)
	ok(t, err, "now")
	ok(t, w.EnterWait(ctx, ref, backends.AcquireRequest{Owner: newOwner("crashed"), Lease: time.Second}), "enter the waiter that will crash")
	wantErr(t, w.EnterWait(ctx, ref, backends.AcquireRequest{Owner: newOwner("late"), Lease: time.Minute}), backends.ErrTooManyWaiters, "a second waiter while the first's record is live")
	waitPast(t, b, before.Add(2*time.Second))
	poke := backends.SemRef{Name: "k", Key: "other"}
	h.waitNoRows(t, b, "k", "after the crashed waiter's record expired", func() {
		o := newOwner("poke")
		s.acquire(poke, o, time.Minute)
		s.release(poke, o)
	})
	ok(t, w.EnterWait(ctx, ref, backends.AcquireRequest{Owner: newOwner("late"), Lease: time.Minute}), "a waiter after the crashed one's record expired")
}

// testKeyedLimit: instances obey the semaphore's limit as applied now: a
// higher limit admits more at once, a lower one evicts nobody and admits
// nobody above it.
func testKeyedLimit(t *testing.T, h Harness) {
	b, _ := fresh(t, h)
	s := semOf(t, b)
	s.put(h.keyedConfig("k", 2, -1))
	ref := backends.SemRef{Name: "k", Key: "x"}
	o := []string{newOwner("a"), newOwner("b"), newOwner("c")}
	s.acquire(ref, o[0], time.Minute)
	g := s.acquire(ref, o[1], time.Minute)
	if g.Slot != 1 {
		t.Errorf("second holder slot %d, want 1", g.Slot)
	}
	s.full(ref)
	s.acquire(backends.SemRef{Name: "k", Key: "y"}, newOwner("y"), time.Minute) // another key is not full

	s.put(h.keyedConfig("k", 3, -1))
	s.acquire(ref, o[2], time.Minute)
	s.full(ref)

	s.put(h.keyedConfig("k", 1, -1))
	if hs := s.holders(ref); len(hs) != 3 {
		t.Fatalf("after lowering the limit to 1: %d holders, want the 3 kept", len(hs))
	}
	s.release(ref, o[0])
	s.full(ref)
	s.release(ref, o[1])
	s.full(ref)
	s.release(ref, o[2])
	g = s.acquire(ref, o[0], time.Minute)
	if g.Slot != 0 {
		t.Errorf("holder after the drain slot %d, want 0", g.Slot)
	}
	s.full(ref)
}

// testKeyedDelete: deleting a keyed semaphore with live instance holders
// drains it (ErrHeld, limit 0, nobody admitted); once they released the
// delete removes everything, and a caller finds it absent.
func testKeyedDelete(t *testing.T, h Harness) {
	ctx := t.Context()
	b, _ := fresh(t, h)
	s := semOf(t, b)
	w := waitersOf(t, b)
	s.put(h.keyedConfig("k", 2, -1))
	ref := backends.SemRef{Name: "k", Key: "x"}
	holder := newOwner("h")
	s.acquire(ref, holder, time.Minute)
	ok(t, w.EnterWait(ctx, backends.SemRef{Name: "k", Key: "y"}, backends.AcquireRequest{Owner: newOwner("w"), Lease: time.Minute}), "a waiter of another key")
	wantErr(t, s.DeleteSemaphore(ctx, "k"), backends.ErrHeld, "delete with an instance holder")
	st := s.observe("k")
	if st == nil || st.Config.Limit != 0 || len(st.Holders) != 1 {
		t.Fatalf("draining keyed semaphore: %+v, want limit 0 and 1 holder", st)
	}
	s.full(ref)
	s.full(backends.SemRef{Name: "k", Key: "z"})
	s.release(ref, holder)
	ok(t, s.DeleteSemaphore(ctx, "k"), "delete once drained")
	if st := s.observe("k"); st != nil {
		t.Fatalf("deleted keyed semaphore observed: %+v", st)
	}
	h.noRows(t, b, "k", "after the delete")
	_, err := s.TryAcquire(ctx, ref, backends.AcquireRequest{Owner: newOwner("late"), Lease: time.Minute})
	wantErr(t, err, backends.ErrNotFound, "acquire an instance of a deleted semaphore")
	wantErr(t, w.EnterWait(ctx, ref, backends.AcquireRequest{Owner: newOwner("late"), Lease: time.Minute}), backends.ErrNotFound, "wait on an instance of a deleted semaphore")
}

// testKeyedFencing: fencing numbers grow strictly in grant order across an
// instance's removal and re-creation, and across instances.
func testKeyedFencing(t *testing.T, h Harness) {
	b, _ := fresh(t, h)
	s := semOf(t, b)
	s.put(h.keyedConfig("k", 1, -1))
	var last int64
	for i := range 6 {
		ref := backends.SemRef{Name: "k", Key: fmt.Sprintf("key-%d", i%2)}
		o := newOwner("f")
		g := s.acquire(ref, o, time.Minute)
		if g.Fencing <= last {
			t.Fatalf("grant %d: fencing %d after %d, want strictly increasing", i, g.Fencing, last)
		}
		last = g.Fencing
		s.release(ref, o) // the instance is gone, and comes back next time
	}
	now, err := b.Now(s.t.Context())
	ok(t, err, "now")
	if last < now.Add(-time.Hour).UnixMicro() {
		t.Errorf("fencing %d is below the backend's clock in µs (%d): a counter must start there", last, now.UnixMicro())
	}
}

// testKeyedRules: plain names and references must match the semaphore's
// keyed setting, keys obey spec.CheckKey, and a refused call writes nothing.
func testKeyedRules(t *testing.T, h Harness) {
	ctx := t.Context()
	b, _ := fresh(t, h)
	s := semOf(t, b)
	w := waitersOf(t, b)
	s.put(h.keyedConfig("k", 1, -1))
	s.put(h.semConfig("plain", 1))
	req := backends.AcquireRequest{Owner: newOwner("o"), Host: "h", PID: 1, Lease: time.Minute}

	_, err := s.TryAcquire(ctx, backends.SemRef{Name: "k"}, req)
	wantErr(t, err, backends.ErrKeyRequired, "acquire a keyed semaphore without a key")
	wantErr(t, w.EnterWait(ctx, backends.SemRef{Name: "k"}, backends.AcquireRequest{Owner: req.Owner, Lease: time.Minute}), backends.ErrKeyRequired, "wait on a keyed semaphore without a key")
	_, err = s.TryAcquire(ctx, backends.SemRef{Name: "plain", Key: "x"}, req)
	wantErr(t, err, backends.ErrNotKeyed, "acquire an instance of a semaphore that is not keyed")
	wantErr(t, w.EnterWait(ctx, backends.SemRef{Name: "plain", Key: "x"}, backends.AcquireRequest{Owner: req.Owner, Lease: time.Minute}), backends.ErrNotKeyed, "wait on an instance of a semaphore that is not keyed")
	_, err = s.TryAcquire(ctx, backends.SemRef{Name: "absent", Key: "x"}, req)
	wantErr(t, err, backends.ErrNotFound, "acquire an instance of an absent semaphore")

	for _, key := range []string{"a\nb", "bell\x07", strings.Repeat("k", spec.MaxKeyLen+1), "\xff\xfe"} {
		_, err := s.TryAcquire(ctx, backends.SemRef{Name: "k", Key: key}, req)
		wantErr(t, err, spec.ErrInvalidKey, fmt.Sprintf("acquire with key %q", key))
		wantErr(t, w.EnterWait(ctx, backends.SemRef{Name: "k", Key: key}, backends.AcquireRequest{Owner: req.Owner, Lease: time.Minute}), spec.ErrInvalidKey, fmt.Sprintf("wait with key %q", key))
	}
	h.noRows(t, b, "k", "after refused calls")

	// Keys that differ only in trailing spaces or case are distinct
	// instances (a padding collation would make them one).
	pads := map[string]string{}
	for _, key := range []string{"pad", "pad ", "pad  ", "PAD"} {
		pads[key] = newOwner("pad")
		s.acquire(backends.SemRef{Name: "k", Key: key}, pads[key], time.Minute)
	}
	if st := s.observe("k"); len(st.Instances) != 4 {
		t.Fatalf("keys differing in trailing spaces or case: %d instances, want 4", len(st.Instances))
	}
	for key, o := range pads {
		s.release(backends.SemRef{Name: "k", Key: key}, o)
	}

	// The longest key, in multi-byte characters, is stored as it is.
	long := strings.Repeat("é", spec.MaxKeyLen/2)
	ref := backends.SemRef{Name: "k", Key: long}
	s.acquire(ref, req.Owner, time.Minute)
	hs := s.holders(ref)
	if len(hs) != 1 || hs[0].Key != long || hs[0].Owner != req.Owner {
		t.Fatalf("holders of the long key: %+v", hs)
	}
	s.full(ref)
	s.release(ref, req.Owner)
	h.noRows(t, b, "k", "after the long key's release")
}

// testKeyedObserve: an observation of a keyed semaphore lists its live
// instances by key, with their holders and waiters, counts them in
// Holders and Waiters, and shows no slot drift.
func testKeyedObserve(t *testing.T, h Harness) {
	ctx := t.Context()
	b, _ := fresh(t, h)
	s := semOf(t, b)
	w := waitersOf(t, b)
	s.put(h.keyedConfig("k", 1, 3))
	cfg := h.keyedConfig("k", 1, 3)
	if st := s.observe("k"); st == nil || st.Config != cfg || len(st.Instances) != 0 || st.Slots != st.WantSlots() {
		t.Fatalf("fresh keyed semaphore observed as %+v, want config %+v, no instance, no drift", st, cfg)
	}
	a, c := newOwner("a"), newOwner("c")
	s.acquire(backends.SemRef{Name: "k", Key: "b-key"}, a, time.Minute)
	s.acquire(backends.SemRef{Name: "k", Key: "a-key"}, c, time.Minute)
	ok(t, w.EnterWait(ctx, backends.SemRef{Name: "k", Key: "a-key"}, backends.AcquireRequest{Owner: newOwner("w1"), Lease: time.Minute}), "wait 1")
	ok(t, w.EnterWait(ctx, backends.SemRef{Name: "k", Key: "a-key"}, backends.AcquireRequest{Owner: newOwner("w2"), Lease: time.Minute}), "wait 2")
	ok(t, w.EnterWait(ctx, backends.SemRef{Name: "k", Key: "c-key"}, backends.AcquireRequest{Owner: newOwner("w3"), Lease: time.Minute}), "wait 3")
	st := s.observe("k")
	if len(st.Holders) != 2 || st.Waiters != 3 || st.Slots != st.WantSlots() {
		t.Fatalf("observed %d holders, %d waiters, %d slots (want %d): want 2 holders, 3 waiters, no drift", len(st.Holders), st.Waiters, st.Slots, st.WantSlots())
	}
	var got []string
	for _, i := range st.Instances {
		owner := ""
		if len(i.Holders) == 1 {
			owner = i.Holders[0].Owner
			if i.Holders[0].Key != i.Key {
				t.Errorf("instance %q: holder key %q", i.Key, i.Holders[0].Key)
			}
		}
		got = append(got, fmt.Sprintf("%s:%d:%s", i.Key, i.Waiters, owner))
	}
	want := []string{"a-key:2:" + c, "b-key:0:" + a, "c-key:1:"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("instances %v, want %v", got, want)
	}
	if hs := s.holders(backends.SemRef{Name: "k"}); len(hs) != 2 {
		t.Errorf("Holders of the keyed semaphore: %d, want 2 (every instance's)", len(hs))
	}
	fw := as[firstWaiter](t, b)
	first, err := fw.FirstWaiter(ctx, backends.SemRef{Name: "k", Key: "c-key"})
	ok(t, err, "first waiter")
	if !strings.HasPrefix(first, "w3") {
		t.Errorf("first waiter of c-key %q, want w3", first)
	}
}

// testKeyedLineRule: a freed slot of an instance goes to the waiters in its
// line, in order, not to a newcomer; a waiter of another key does not count.
func testKeyedLineRule(t *testing.T, h Harness) {
	ctx := t.Context()
	b, _ := fresh(t, h)
	s := semOf(t, b)
	w := waitersOf(t, b)
	s.put(h.keyedConfig("k", 1, -1))
	ref := backends.SemRef{Name: "k", Key: "x"}
	holder, first, second := newOwner("holder"), newOwner("first"), newOwner("second")
	s.acquire(ref, holder, time.Minute)
	ok(t, w.EnterWait(ctx, ref, backends.AcquireRequest{Owner: first, Lease: time.Minute}), "first waiter")
	ok(t, w.EnterWait(ctx, ref, backends.AcquireRequest{Owner: second, Lease: time.Minute}), "second waiter")
	ok(t, w.EnterWait(ctx, backends.SemRef{Name: "k", Key: "y"}, backends.AcquireRequest{Owner: newOwner("other"), Lease: time.Minute}), "a waiter of another key")
	s.release(ref, holder)
	s.refused(ref, newOwner("newcomer"), "a newcomer while two wait")
	s.refused(ref, second, "the second waiter before the first")
	s.acquire(ref, first, time.Minute)
	s.release(ref, first)
	s.refused(ref, newOwner("newcomer"), "a newcomer while one waits")
	s.acquire(ref, second, time.Minute)
	s.release(ref, second)
	s.acquire(ref, newOwner("newcomer"), time.Minute) // nobody waits for x any more
}

// testKeyedLineOrder: waiters of one key are served in arrival order, and
// a newcomer of that key does not take the slot from them.
func testKeyedLineOrder(t *testing.T, h Harness) {
	ctx := t.Context()
	b, open := fresh(t, h)
	s := semOf(t, b)
	s.put(h.keyedConfig("k", 1, -1))
	ref := backends.SemRef{Name: "k", Key: "line"}
	holder := newOwner("holder")
	s.acquire(ref, holder, time.Minute)

	const n = 3
	type grant struct {
		i int
		l *semaphore.Lease
	}
	granted := make(chan grant, n)
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for i := range n {
		c := keyedClient(t, open(), fmt.Sprintf("waiter-%d", i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.Acquire(wctx, "k", semaphore.AcquireOptions{Lease: time.Minute, WaiterLease: time.Minute, Key: "line"})
			if err != nil {
				if wctx.Err() == nil {
					t.Errorf("waiter %d: %v", i, err)
				}
				return
			}
			granted <- grant{i, l}
		}()
		waitFor(t, fmt.Sprintf("waiter %d in line", i), func() (bool, error) {
			return instanceWaiters(s.observe("k"), "line") == i+1, nil
		})
	}
	newcomer := keyedClient(t, open(), "newcomer")
	release := func() error { return s.Release(ctx, ref, holder) }
	for i := range n {
		ok(t, release(), "release the slot")
		_, err := newcomer.Acquire(ctx, "k", semaphore.AcquireOptions{Lease: time.Minute, NoWait: true, Key: "line"})
		wantErr(t, err, semaphore.ErrNotAcquired, fmt.Sprintf("a newcomer without waiting, as the slot for waiter %d is freed", i))
		select {
		case g := <-granted:
			if g.i != i {
				t.Fatalf("waiter %d got the slot, want waiter %d", g.i, i)
			}
			release = func() error { return g.l.Release(ctx) }
		case <-time.After(waitTimeout):
			t.Fatalf("waiter %d did not get the freed slot within %v", i, waitTimeout)
		}
	}
	ok(t, release(), "release the last waiter's slot")
	h.noRows(t, b, "k", "after the line emptied")
}

// testKeyedConcurrent tries to break an instance's limit, and its creation
// and removal, from several handles at once on two keys.
func testKeyedConcurrent(t *testing.T, h Harness) {
	const (
		workers = 6
		rounds  = 30
		limit   = 2
	)
	b, open := fresh(t, h)
	s := semOf(t, b)
	s.put(h.keyedConfig("hot", limit, -1))
	var holding [2]atomic.Int64
	var maxHolding, acquired atomic.Int64
	var wg sync.WaitGroup
	for i := range workers {
		hs := semOf(t, open())
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := t.Context()
			for r := range rounds {
				k := (i + r) % 2
				ref := backends.SemRef{Name: "hot", Key: fmt.Sprintf("key-%d", k)}
				owner := newOwner("w")
				_, err := hs.TryAcquire(ctx, ref, backends.AcquireRequest{Owner: owner, Host: "h", PID: i, Lease: time.Minute})
				if errors.Is(err, backends.ErrNoSlot) {
					continue
				}
				if err != nil {
					t.Errorf("worker %d round %d: acquire: %v", i, r, err)
					return
				}
				n := holding[k].Add(1)
				for {
					m := maxHolding.Load()
					if n <= m || maxHolding.CompareAndSwap(m, n) {
						break
					}
				}
				acquired.Add(1)
				time.Sleep(time.Millisecond)
				holding[k].Add(-1)
				if err := hs.Release(ctx, ref, owner); err != nil {
					t.Errorf("worker %d round %d: release: %v", i, r, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d acquisitions, at most %d held at once on one key", acquired.Load(), maxHolding.Load())
	if m := maxHolding.Load(); m > limit {
		t.Errorf("%d held at once on one key, limit %d", m, limit)
	}
	if acquired.Load() == 0 {
		t.Error("no acquisition succeeded")
	}
	h.noRows(t, b, "hot", "after every worker released")
}

// testKeyedRefusedModes: the modes that cannot hold keyed semaphores (mode
// session: its slots are named locks no row records) refuse them.
func testKeyedRefusedModes(t *testing.T, h Harness) {
	s, _ := freshSem(t, h)
	for _, m := range h.SemaphoreModes {
		hm := h
		hm.mode, hm.wakeMode, _ = strings.Cut(m, "/")
		cfg := hm.keyedConfig("s", 1, -1)
		wantErr(t, s.PutSemaphore(t.Context(), cfg), backends.ErrUnsupported, "put a keyed semaphore in mode "+m)
	}
	if st := s.observe("s"); st != nil {
		t.Errorf("refused keyed semaphore observed as %+v", st)
	}
}

// testKeyedRefused: a backend that cannot hold keyed semaphores refuses
// them, and an instance reference finds nothing to take.
func testKeyedRefused(t *testing.T, h Harness) {
	s, _ := freshSem(t, h)
	cfg := h.semConfig("k", 1)
	cfg.Keyed = true
	wantErr(t, s.PutSemaphore(t.Context(), cfg), backends.ErrUnsupported, "put a keyed semaphore")
	if st := s.observe("k"); st != nil {
		t.Errorf("refused keyed semaphore observed as %+v", st)
	}
	s.put(h.semConfig("plain", 1))
	_, err := s.TryAcquire(t.Context(), backends.SemRef{Name: "plain", Key: "x"}, backends.AcquireRequest{Owner: newOwner("o"), Lease: time.Minute})
	if err == nil {
		t.Fatal("acquire of an instance on a backend without keyed semaphores succeeded")
	}
	if !errors.Is(err, backends.ErrUnsupported) && !errors.Is(err, backends.ErrNotKeyed) {
		t.Errorf("acquire of an instance: %v, want ErrUnsupported or ErrNotKeyed", err)
	}
}
