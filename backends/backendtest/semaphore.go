package backendtest

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// sem bundles the semaphores of one handle with the handle.
type sem struct {
	t *testing.T
	b backends.Backend
	backends.Semaphores
}

// freshSem creates a fresh store and returns its semaphore view and opener.
func freshSem(t *testing.T, h Harness) (*sem, func() *sem) {
	t.Helper()
	b, open := fresh(t, h)
	return semOf(t, b), func() *sem { return semOf(t, open()) }
}

func semOf(t *testing.T, b backends.Backend) *sem {
	t.Helper()
	return &sem{t: t, b: b, Semaphores: semsOf(t, b)}
}

// semConfig is a full config, so that every field's round trip is checked,
// in the mode under test (lease unless Run is checking SemaphoreModes).
func (h Harness) semConfig(name string, limit int) backends.SemaphoreConfig {
	mode := h.mode
	if mode == "" {
		mode = spec.ModeLease
	}
	maxWaiting := 7
	if h.NoMaxWaiting {
		maxWaiting = -1
	}
	return backends.SemaphoreConfig{
		Name: name, Limit: limit, Lease: 30 * time.Second, Mode: mode,
		Wake: h.wake(), MaxWaiting: maxWaiting, MaxHold: time.Hour,
	}
}

// expired is how many expired slots a backend shows for n expired leases
// (none when slots exist only while held).
func (h Harness) expired(n int) int {
	if h.HeldSlotsOnly {
		return 0
	}
	return n
}

// wake is the wake strategy under test: poll unless Run is checking a
// SemaphoreModes entry of the form "session/kill".
func (h Harness) wake() string {
	if h.wakeMode != "" {
		return h.wakeMode
	}
	return spec.WakePoll
}

// leased reports whether holders of the mode under test have a lease with
// an expiry (every mode but session, whose slots last as long as the
// holder's connection).
func (h Harness) leased() bool { return h.mode == "" || h.mode == spec.ModeLease }

func (s *sem) put(cfg backends.SemaphoreConfig) {
	s.t.Helper()
	ok(s.t, s.PutSemaphore(s.t.Context(), cfg), "put semaphore "+cfg.Name)
}

// observe returns the semaphore's state, nil when absent.
func (s *sem) observe(name string) *backends.SemaphoreState {
	s.t.Helper()
	m, err := s.ObserveSemaphores(s.t.Context(), []string{name})
	ok(s.t, err, "observe "+name)
	return m[name]
}

// wantSlots checks the slot and live holder counts.
func (s *sem) wantSlots(name string, slots, holders int) *backends.SemaphoreState {
	s.t.Helper()
	st := s.observe(name)
	if st == nil {
		s.t.Fatalf("semaphore %s is absent, want %d slots", name, slots)
	}
	if st.Slots != slots || len(st.Holders) != holders {
		s.t.Fatalf("semaphore %s: %d slots, %d holders, want %d slots, %d holders", name, st.Slots, len(st.Holders), slots, holders)
	}
	return st
}

func (s *sem) acquire(ref backends.SemRef, owner string, lease time.Duration) backends.Grant {
	s.t.Helper()
	g, err := s.TryAcquire(s.t.Context(), ref, backends.AcquireRequest{Owner: owner, Host: "host-" + owner, PID: 42, Lease: lease})
	ok(s.t, err, "acquire "+ref.String()+" as "+owner)
	return g
}

// full asserts that nobody is admitted. A grant is tolerated only if the
// backend clock shows that the given live leases have expired meanwhile,
// so the check does not depend on how fast the test runs.
func (s *sem) full(ref backends.SemRef, liveUntil ...time.Time) {
	s.t.Helper()
	owner := newOwner("intruder")
	_, err := s.TryAcquire(s.t.Context(), ref, backends.AcquireRequest{Owner: owner, Host: "h", PID: 1, Lease: time.Minute})
	if errors.Is(err, backends.ErrNoSlot) {
		return
	}
	if err == nil && len(liveUntil) > 0 {
		now, nerr := s.b.Now(s.t.Context())
		ok(s.t, nerr, "now")
		if !now.Before(liveUntil[0]) {
			ok(s.t, s.Release(s.t.Context(), ref, owner), "release intruder")
			return
		}
	}
	s.t.Fatalf("acquire on full semaphore %s: got %v, want ErrNoSlot", ref, err)
}

func (s *sem) release(ref backends.SemRef, owner string) {
	s.t.Helper()
	ok(s.t, s.Release(s.t.Context(), ref, owner), "release "+ref.String()+" by "+owner)
}

func (s *sem) holders(ref backends.SemRef) []backends.Holder {
	s.t.Helper()
	hs, err := s.Holders(s.t.Context(), ref)
	ok(s.t, err, "holders "+ref.String())
	return hs
}

// testSemaphores checks Semaphores, reconcile's side and the runtime's, in the
// mode h says. Tests of lease expiry and of slot rows are not run for modes
// without them (session); those modes have tests of their own.
func testSemaphores(t *testing.T, h Harness) {
	for _, c := range []struct {
		name  string
		run   func(t *testing.T, h Harness)
		lease bool // needs leases that expire and slot rows
	}{
		{"LimitAndFencing", testSemLimit, false},
		{"Absent", testSemAbsent, false},
		{"WrongOwner", testSemWrongOwner, false},
		{"LeaseExpiry", testSemLeaseExpiry, true},
		{"ReleaseExpired", testSemReleaseExpired, true},
		{"LimitUp", testSemLimitUp, false},
		{"LimitDown", testSemLimitDown, false},
		{"LimitDownExpired", testSemLimitDownExpired, true},
		{"LimitZero", testSemLimitZero, false},
		{"DeleteHeld", testSemDeleteHeld, false},
		{"Drift", testSemDrift, true},
		{"DriftHeldSlot", testSemDriftHeld, true},
		{"FencingAcrossUpdates", testSemFencingUpdates, false},
		{"ObserveMany", testSemObserveMany, false},
		{"Concurrent", testSemConcurrent, false},
		{"SessionEnds", testSemSessionEnds, false},
		{"LimitDownSessionEnds", testSemLimitDownSessionEnds, false},
		{"MaxWaitingRefused", testSemMaxWaitingRefused, false},
	} {
		if c.lease && !h.leased() {
			continue
		}
		if (c.name == "SessionEnds" || c.name == "LimitDownSessionEnds") && h.leased() {
			continue
		}
		if c.name == "MaxWaitingRefused" && !h.NoMaxWaiting {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, h)
		})
	}
}

func testSemLimit(t *testing.T, h Harness) {
	s, _ := freshSem(t, h)
	cfg := h.semConfig("reindex", 3)
	s.put(cfg)
	s.put(cfg) // idempotent
	st := s.wantSlots("reindex", 3, 0)
	if !reflect.DeepEqual(st.Config, cfg) {
		t.Errorf("observed config %+v, want %+v", st.Config, cfg)
	}
	if st.Expired != 0 || st.WantSlots() != 3 {
		t.Errorf("observed %+v, want 0 expired and 3 wanted slots", st)
	}

	before, err := s.b.Now(t.Context())
	ok(t, err, "now")
	var grants []backends.Grant
	owners := []string{newOwner("a"), newOwner("b"), newOwner("c")}
	seen := map[int]bool{}
	for i, o := range owners {
		g := s.acquire(backends.SemRef{Name: "reindex"}, o, time.Minute)
		if g.Slot < 0 || g.Slot >= 3 || seen[g.Slot] {
			t.Fatalf("grant %d: slot %d, want a distinct slot in [0,3) (have %v)", i, g.Slot, seen)
		}
		seen[g.Slot] = true
		if i > 0 && g.Fencing <= grants[i-1].Fencing {
			t.Fatalf("grant %d: fencing %d, not above previous %d", i, g.Fencing, grants[i-1].Fencing)
		}
		if !g.ExpiresAt.After(before) || g.ExpiresAt.Location() != time.UTC {
			t.Fatalf("grant %d: expires %v, want UTC after %v (for a session slot: when the holder must ping next)", i, g.ExpiresAt, before)
		}
		grants = append(grants, g)
	}
	s.full(backends.SemRef{Name: "reindex"})

	hs := s.holders(backends.SemRef{Name: "reindex"})
	if len(hs) != 3 {
		t.Fatalf("holders = %+v, want 3", hs)
	}
	for i, hd := range hs {
		if i > 0 && hd.Slot <= hs[i-1].Slot {
			t.Errorf("holders not ordered by slot: %+v", hs)
		}
		j := -1
		for k, g := range grants {
			if g.Slot == hd.Slot {
				j = k
			}
		}
		if j < 0 {
			t.Fatalf("holder %+v matches no grant", hd)
		}
		g := grants[j]
		if hd.Owner != owners[j] || hd.Host != "host-"+owners[j] || hd.PID != 42 || hd.Fencing != g.Fencing {
			t.Errorf("holder %+v, want owner %s fencing %d", hd, owners[j], g.Fencing)
		}
		h.checkExpiry(t, hd, g.ExpiresAt)
		if hd.AcquiredAt.Before(before.Truncate(time.Millisecond)) || hd.AcquiredAt.After(g.ExpiresAt) {
			t.Errorf("holder %+v: acquired_at not within [%v, expires]", hd, before)
		}
	}
	if st := s.wantSlots("reindex", 3, 3); !reflect.DeepEqual(st.Holders, hs) {
		t.Errorf("observed holders %+v, want %+v", st.Holders, hs)
	}
}

func testSemAbsent(t *testing.T, h Harness) {
	s, _ := freshSem(t, h)
	ctx := t.Context()
	_, err := s.TryAcquire(ctx, backends.SemRef{Name: "nope"}, backends.AcquireRequest{Owner: newOwner("a"), Lease: time.Minute})
	wantErr(t, err, backends.ErrNotFound, "acquire an absent semaphore")
	if st := s.observe("nope"); st != nil {
		t.Errorf("absent semaphore observed as %+v", st)
	}
	if hs := s.holders(backends.SemRef{Name: "nope"}); len(hs) != 0 {
		t.Errorf("absent semaphore has holders %+v", hs)
	}
	ok(t, s.DeleteSemaphore(ctx, "nope"), "delete an absent semaphore")
	_, err = s.Extend(ctx, backends.SemRef{Name: "nope"}, "x", time.Minute)
	wantErr(t, err, backends.ErrLost, "extend on an absent semaphore")
	wantErr(t, s.Release(ctx, backends.SemRef{Name: "nope"}, "x"), backends.ErrLost, "release on an absent semaphore")
}

func testSemWrongOwner(t *testing.T, h Harness) {
	s, _ := freshSem(t, h)
	ctx := t.Context()
	s.put(h.semConfig("s", 1))
	a := newOwner("a")
	g := s.acquire(backends.SemRef{Name: "s"}, a, time.Minute)
	before := s.holders(backends.SemRef{Name: "s"})

	_, err := s.Extend(ctx, backends.SemRef{Name: "s"}, "mallory", time.Hour)
	wantErr(t, err, backends.ErrLost, "extend by a wrong owner")
	wantErr(t, s.Release(ctx, backends.SemRef{Name: "s"}, "mallory"), backends.ErrLost, "release by a wrong owner")
	if after := s.holders(backends.SemRef{Name: "s"}); !reflect.DeepEqual(after, before) {
		t.Fatalf("wrong owner changed holders: %+v, was %+v", after, before)
	}

	exp, err := s.Extend(ctx, backends.SemRef{Name: "s"}, a, 2*time.Minute)
	ok(t, err, "extend by the owner")
	if exp.Before(g.ExpiresAt) || exp.Location() != time.UTC {
		t.Errorf("extended expiry %v, want UTC at or after %v", exp, g.ExpiresAt)
	}
	if hs := s.holders(backends.SemRef{Name: "s"}); len(hs) != 1 || hs[0].Fencing != g.Fencing {
		t.Errorf("after extend: holders %+v, want fencing %d", hs, g.Fencing)
	} else {
		h.checkExpiry(t, hs[0], exp)
	}

	s.release(backends.SemRef{Name: "s"}, a)
	if hs := s.holders(backends.SemRef{Name: "s"}); len(hs) != 0 {
		t.Fatalf("after release: holders %+v", hs)
	}
	wantErr(t, s.Release(ctx, backends.SemRef{Name: "s"}, a), backends.ErrLost, "second release")
	_, err = s.Extend(ctx, backends.SemRef{Name: "s"}, a, time.Minute)
	wantErr(t, err, backends.ErrLost, "extend after release")
	g2 := s.acquire(backends.SemRef{Name: "s"}, newOwner("b"), time.Minute)
	if g2.Slot != 0 || g2.Fencing <= g.Fencing {
		t.Errorf("grant after release: %+v, want slot 0 and fencing above %d", g2, g.Fencing)
	}
	s.wantSlots("s", 1, 1)
}

func testSemLeaseExpiry(t *testing.T, h Harness) {
	s, open := freshSem(t, h)
	other := open()
	ctx := t.Context()
	s.put(h.semConfig("s", 1))
	a := newOwner("a")
	ga := s.acquire(backends.SemRef{Name: "s"}, a, time.Second)
	other.full(backends.SemRef{Name: "s"}, ga.ExpiresAt)

	waitPast(t, s.b, ga.ExpiresAt)
	st := s.wantSlots("s", 1, 0)
	if st.Expired != h.expired(1) {
		t.Errorf("after expiry: Expired = %d, want %d", st.Expired, h.expired(1))
	}
	b := newOwner("b")
	gb := other.acquire(backends.SemRef{Name: "s"}, b, time.Minute)
	if gb.Slot != ga.Slot || gb.Fencing <= ga.Fencing {
		t.Fatalf("takeover grant %+v, want slot %d and fencing above %d", gb, ga.Slot, ga.Fencing)
	}
	_, err := s.Extend(ctx, backends.SemRef{Name: "s"}, a, time.Minute)
	wantErr(t, err, backends.ErrLost, "extend by the expired owner")
	wantErr(t, s.Release(ctx, backends.SemRef{Name: "s"}, a), backends.ErrLost, "release by the expired owner")
	hs := s.holders(backends.SemRef{Name: "s"})
	if len(hs) != 1 || hs[0].Owner != b || hs[0].Fencing != gb.Fencing {
		t.Fatalf("after the old owner's calls: holders %+v, want only %s", hs, b)
	}
}

func testSemReleaseExpired(t *testing.T, h Harness) {
	s, _ := freshSem(t, h)
	s.put(h.semConfig("s", 2))
	a := newOwner("a")
	ga := s.acquire(backends.SemRef{Name: "s"}, a, time.Second)
	waitPast(t, s.b, ga.ExpiresAt)
	_, err := s.Extend(t.Context(), backends.SemRef{Name: "s"}, a, time.Minute)
	wantErr(t, err, backends.ErrLost, "extend after expiry")
	if st := s.wantSlots("s", 2, 0); st.Expired != h.expired(1) {
		t.Fatalf("extend after expiry changed the slot: Expired = %d, want %d", st.Expired, h.expired(1))
	}
	wantErr(t, s.Release(t.Context(), backends.SemRef{Name: "s"}, a), backends.ErrLost, "release after expiry")
	st := s.wantSlots("s", 2, 0)
	if st.Expired != 0 {
		t.Errorf("expired slot not cleared by its owner's release: Expired = %d", st.Expired)
	}
}

func testSemLimitUp(t *testing.T, h Harness) {
	s, _ := freshSem(t, h)
	s.put(h.semConfig("s", 3))
	for range 3 {
		s.acquire(backends.SemRef{Name: "s"}, newOwner("a"), time.Minute)
	}
	s.full(backends.SemRef{Name: "s"})
	s.put(h.semConfig("s", 5))
	s.wantSlots("s", 5, 3)
	got := map[int]bool{}
	for range 2 {
		got[s.acquire(backends.SemRef{Name: "s"}, newOwner("b"), time.Minute).Slot] = true
	}
	if !got[3] || !got[4] {
		t.Errorf("new grants took slots %v, want 3 and 4", got)
	}
	s.full(backends.SemRef{Name: "s"})
	s.wantSlots("s", 5, 5)
}

func testSemLimitDown(t *testing.T, h Harness) {
	s, _ := freshSem(t, h)
	s.put(h.semConfig("s", 5))
	owners := map[int]string{}
	for range 5 {
		o := newOwner("a")
		owners[s.acquire(backends.SemRef{Name: "s"}, o, time.Minute).Slot] = o
	}
	s.put(h.semConfig("s", 2))
	st := s.wantSlots("s", 5, 5)
	if st.Config.Limit != 2 || st.WantSlots() != 5 {
		t.Fatalf("after lowering: limit %d, want slots %d; want 2 and 5", st.Config.Limit, st.WantSlots())
	}
	s.full(backends.SemRef{Name: "s"})
	// Releasing retires slots until max(limit, held) remain.
	for i, slot := range []int{0, 3, 1} {
		s.release(backends.SemRef{Name: "s"}, owners[slot])
		s.wantSlots("s", 4-i, 4-i)
		s.full(backends.SemRef{Name: "s"})
	}
	// Two held, limit 2: still nobody, until one more releases.
	s.full(backends.SemRef{Name: "s"})
	s.release(backends.SemRef{Name: "s"}, owners[2])
	s.wantSlots("s", 2, 1)
	s.acquire(backends.SemRef{Name: "s"}, newOwner("b"), time.Minute)
	s.full(backends.SemRef{Name: "s"})
	s.wantSlots("s", 2, 2)
}

// testSemLimitDownExpired checks the guard on acquire: after lowering the
// limit, slots above it whose leases expire are free rows, yet nobody may
// take one while the live holders reach the limit.
func testSemLimitDownExpired(t *testing.T, h Harness) {
	s, _ := freshSem(t, h)
	s.put(h.semConfig("s", 5))
	var short []backends.Grant
	for i := range 5 {
		lease := time.Hour
		if i >= 2 {
			lease = 3 * time.Second
		}
		g := s.acquire(backends.SemRef{Name: "s"}, newOwner("a"), lease)
		if i >= 2 {
			short = append(short, g)
		}
	}
	s.put(h.semConfig("s", 2))
	last := short[0].ExpiresAt
	for _, g := range short {
		if g.ExpiresAt.After(last) {
			last = g.ExpiresAt
		}
	}
	// Normally the slots are all still held here, so 3 expired rows remain
	// after the wait; if the test ran slower, PutSemaphore already deleted
	// them. Either way nobody may be admitted.
	if st := s.observe("s"); st.Slots != 5 {
		t.Logf("slots already trimmed to %d before the leases expired: the guard is not exercised", st.Slots)
	}
	waitPast(t, s.b, last)
	st := s.observe("s")
	if len(st.Holders) != 2 {
		t.Fatalf("after expiry: %d live holders, want 2", len(st.Holders))
	}
	s.full(backends.SemRef{Name: "s"})
	s.full(backends.SemRef{Name: "s"})
	s.wantSlots("s", st.Slots, 2)
}

func testSemLimitZero(t *testing.T, h Harness) {
	s, _ := freshSem(t, h)
	s.put(h.semConfig("gate", 0))
	s.wantSlots("gate", 0, 0)
	s.full(backends.SemRef{Name: "gate"})
	s.put(h.semConfig("gate", 1))
	s.wantSlots("gate", 1, 0)
	s.acquire(backends.SemRef{Name: "gate"}, newOwner("a"), time.Minute)
	s.full(backends.SemRef{Name: "gate"})
}

func testSemDeleteHeld(t *testing.T, h Harness) {
	s, _ := freshSem(t, h)
	ctx := t.Context()
	s.put(h.semConfig("s", 3))
	a, b := newOwner("a"), newOwner("b")
	s.acquire(backends.SemRef{Name: "s"}, a, time.Minute)
	s.acquire(backends.SemRef{Name: "s"}, b, time.Minute)
	wantErr(t, s.DeleteSemaphore(ctx, "s"), backends.ErrHeld, "delete with holders")
	st := s.wantSlots("s", 2, 2)
	if st.Config.Limit != 0 {
		t.Errorf("after delete with holders: limit %d, want 0", st.Config.Limit)
	}
	s.full(backends.SemRef{Name: "s"})
	s.release(backends.SemRef{Name: "s"}, a)
	s.wantSlots("s", 1, 1)
	wantErr(t, s.DeleteSemaphore(ctx, "s"), backends.ErrHeld, "delete with one holder")
	s.full(backends.SemRef{Name: "s"})
	s.release(backends.SemRef{Name: "s"}, b)
	s.wantSlots("s", 0, 0)
	ok(t, s.DeleteSemaphore(ctx, "s"), "delete after the last release")
	if st := s.observe("s"); st != nil {
		t.Fatalf("deleted semaphore observed as %+v", st)
	}
	ok(t, s.DeleteSemaphore(ctx, "s"), "delete again")
	_, err := s.TryAcquire(ctx, backends.SemRef{Name: "s"}, backends.AcquireRequest{Owner: newOwner("c"), Lease: time.Minute})
	wantErr(t, err, backends.ErrNotFound, "acquire a deleted semaphore")

	// Without holders, delete removes at once.
	s.put(h.semConfig("t", 2))
	ok(t, s.DeleteSemaphore(ctx, "t"), "delete without holders")
	if st := s.observe("t"); st != nil {
		t.Fatalf("deleted semaphore observed as %+v", st)
	}
}

func needDeleteSlot(t *testing.T, h Harness) {
	t.Helper()
	if h.DeleteSlot == nil {
		t.Fatal("backendtest: Harness.DeleteSlot is nil; the drift tests need it")
	}
}

func testSemDrift(t *testing.T, h Harness) {
	needDeleteSlot(t, h)
	if h.HeldSlotsOnly {
		testSemDriftHeldSlotsOnly(t, h)
		return
	}
	s, _ := freshSem(t, h)
	s.put(h.semConfig("s", 3))
	h.DeleteSlot(t, s.b, "s", 1)
	st := s.wantSlots("s", 2, 0)
	if st.WantSlots() != 3 {
		t.Fatalf("WantSlots = %d, want 3", st.WantSlots())
	}
	s.put(h.semConfig("s", 3))
	s.wantSlots("s", 3, 0)
	got := map[int]bool{}
	for range 3 {
		got[s.acquire(backends.SemRef{Name: "s"}, newOwner("a"), time.Minute).Slot] = true
	}
	if len(got) != 3 || !got[0] || !got[1] || !got[2] {
		t.Errorf("after repair, grants took slots %v, want 0, 1 and 2", got)
	}

	// No slot row at all: nobody is admitted until repaired.
	s.put(h.semConfig("one", 1))
	h.DeleteSlot(t, s.b, "one", 0)
	s.wantSlots("one", 0, 0)
	s.full(backends.SemRef{Name: "one"})
	s.put(h.semConfig("one", 1))
	s.acquire(backends.SemRef{Name: "one"}, newOwner("b"), time.Minute)
}

func testSemDriftHeld(t *testing.T, h Harness) {
	needDeleteSlot(t, h)
	s, _ := freshSem(t, h)
	ctx := t.Context()
	s.put(h.semConfig("s", 1))
	a := newOwner("a")
	g := s.acquire(backends.SemRef{Name: "s"}, a, time.Minute)
	h.DeleteSlot(t, s.b, "s", g.Slot)
	_, err := s.Extend(ctx, backends.SemRef{Name: "s"}, a, time.Minute)
	wantErr(t, err, backends.ErrLost, "extend a deleted slot")
	wantErr(t, s.Release(ctx, backends.SemRef{Name: "s"}, a), backends.ErrLost, "release a deleted slot")
	s.put(h.semConfig("s", 1))
	g2 := s.acquire(backends.SemRef{Name: "s"}, newOwner("b"), time.Minute)
	if g2.Fencing <= g.Fencing {
		t.Errorf("fencing after repair %d, want above %d", g2.Fencing, g.Fencing)
	}
}

func testSemFencingUpdates(t *testing.T, h Harness) {
	s, _ := freshSem(t, h)
	s.put(h.semConfig("s", 1))
	var last int64
	for i := range 4 {
		o := newOwner("a")
		g := s.acquire(backends.SemRef{Name: "s"}, o, time.Minute)
		if g.Fencing <= last {
			t.Fatalf("round %d: fencing %d, not above %d", i, g.Fencing, last)
		}
		last = g.Fencing
		s.release(backends.SemRef{Name: "s"}, o)
		cfg := h.semConfig("s", 1+i%2)
		cfg.Lease = time.Duration(i+1) * time.Minute
		s.put(cfg)
	}
}

func testSemObserveMany(t *testing.T, h Harness) {
	s, _ := freshSem(t, h)
	var names []string
	for i := range 60 {
		n := fmt.Sprintf("sem-%02d", i)
		if i%10 == 4 {
			// Names are data: quotes, SQL and key syntax must round-trip.
			n = fmt.Sprintf(`it's "%d"; DROP TABLE x; -- {k}:* ünï`, i)
		}
		names = append(names, n)
		if i%2 == 0 {
			s.put(h.semConfig(n, i%5))
		}
	}
	m, err := s.ObserveSemaphores(t.Context(), names)
	ok(t, err, "observe many")
	if len(m) != 30 {
		t.Fatalf("observed %d semaphores, want 30", len(m))
	}
	for i, n := range names {
		st := m[n]
		switch {
		case i%2 == 1 && st != nil:
			t.Errorf("absent %s observed as %+v", n, st)
		case i%2 == 0 && (st == nil || st.Config.Name != n || st.Config.Limit != i%5 || st.Slots != i%5):
			t.Errorf("%s observed as %+v, want limit and slots %d", n, st, i%5)
		}
	}
	m, err = s.ObserveSemaphores(t.Context(), nil)
	ok(t, err, "observe none")
	if len(m) != 0 {
		t.Errorf("observe of no names returned %d", len(m))
	}
}

// testSemConcurrent tries to break the limit from several handles at once.
func testSemConcurrent(t *testing.T, h Harness) {
	const (
		workers = 8
		rounds  = 50
		limit   = 3
	)
	s, open := freshSem(t, h)
	s.put(h.semConfig("hot", limit))
	handles := make([]*sem, workers)
	for i := range handles {
		handles[i] = open()
	}
	var holding, maxHolding, acquired atomic.Int64
	var mu sync.Mutex
	fencings := map[int64]bool{}
	var wg sync.WaitGroup
	for i, hs := range handles {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := t.Context()
			for r := range rounds {
				owner := newOwner("w")
				g, err := hs.TryAcquire(ctx, backends.SemRef{Name: "hot"}, backends.AcquireRequest{Owner: owner, Host: "h", PID: i, Lease: time.Minute})
				if errors.Is(err, backends.ErrNoSlot) {
					continue
				}
				if err != nil {
					t.Errorf("worker %d round %d: acquire: %v", i, r, err)
					return
				}
				n := holding.Add(1)
				for {
					m := maxHolding.Load()
					if n <= m || maxHolding.CompareAndSwap(m, n) {
						break
					}
				}
				acquired.Add(1)
				mu.Lock()
				if fencings[g.Fencing] {
					t.Errorf("fencing %d granted twice", g.Fencing)
				}
				fencings[g.Fencing] = true
				mu.Unlock()
				time.Sleep(time.Millisecond)
				holding.Add(-1)
				if err := hs.Release(ctx, backends.SemRef{Name: "hot"}, owner); err != nil {
					t.Errorf("worker %d round %d: release: %v", i, r, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d acquisitions, at most %d held at once", acquired.Load(), maxHolding.Load())
	if m := maxHolding.Load(); m > limit {
		t.Errorf("%d held at once, limit %d", m, limit)
	}
	if acquired.Load() == 0 {
		t.Error("no acquisition succeeded")
	}
	s.wantSlots("hot", limit, 0)
}

// checkExpiry checks a holder's expiry against the grant's or the last
// extend's: equal for a lease, none (and a connection id) in mode session.
func (h Harness) checkExpiry(t *testing.T, hd backends.Holder, want time.Time) {
	t.Helper()
	switch {
	case h.leased() && !hd.ExpiresAt.Equal(want):
		t.Errorf("holder %+v: expires %v, want %v", hd, hd.ExpiresAt, want)
	case !h.leased() && (!hd.ExpiresAt.IsZero() || hd.Session == 0):
		t.Errorf("session holder %+v: want no expiry and the holding connection's id", hd)
	}
}

// needKillSession fails without the harness hook the session tests need.
func needKillSession(t *testing.T, h Harness) {
	t.Helper()
	if h.KillSession == nil {
		t.Fatal("backendtest: Harness.KillSession is nil; the session-mode tests need it")
	}
}

// testSemSessionEnds: when a holder's session ends behind its back (the
// connection killed, the server restarted), the slot is free at once, the
// old holder learns it on its next Extend (ErrLost), and the next holder
// gets a higher fencing number.
func testSemSessionEnds(t *testing.T, h Harness) {
	needKillSession(t, h)
	s, open := freshSem(t, h)
	other := open()
	ctx := t.Context()
	s.put(h.semConfig("s", 1))
	a := newOwner("a")
	ga := s.acquire(backends.SemRef{Name: "s"}, a, time.Minute)
	other.full(backends.SemRef{Name: "s"})
	hs := other.holders(backends.SemRef{Name: "s"})
	if len(hs) != 1 || hs[0].Session == 0 || hs[0].Owner != a {
		t.Fatalf("holders %+v, want %s with its connection id", hs, a)
	}
	h.KillSession(t, s.b, hs[0].Session)
	var gb backends.Grant
	waitFor(t, "the killed holder's slot to be free", func() (bool, error) {
		g, err := other.TryAcquire(ctx, backends.SemRef{Name: "s"}, backends.AcquireRequest{Owner: newOwner("b"), Host: "h", PID: 2, Lease: time.Minute})
		if errors.Is(err, backends.ErrNoSlot) {
			return false, nil
		}
		gb = g
		return err == nil, err
	})
	if gb.Slot != ga.Slot || gb.Fencing <= ga.Fencing {
		t.Fatalf("grant after the session ended: %+v, want slot %d and fencing above %d", gb, ga.Slot, ga.Fencing)
	}
	_, err := s.Extend(ctx, backends.SemRef{Name: "s"}, a, time.Minute)
	wantErr(t, err, backends.ErrLost, "extend by the holder whose session ended")
	wantErr(t, s.Release(ctx, backends.SemRef{Name: "s"}, a), backends.ErrLost, "release by the holder whose session ended")
	if hs := other.holders(backends.SemRef{Name: "s"}); len(hs) != 1 || hs[0].Fencing != gb.Fencing {
		t.Fatalf("holders %+v, want only the new holder", hs)
	}
}

// testSemLimitDownSessionEnds is LimitDownExpired for sessions: after the
// limit was lowered below the holders, holders above it whose sessions end
// free their slots, yet nobody is admitted while the remaining holders
// reach the limit.
func testSemLimitDownSessionEnds(t *testing.T, h Harness) {
	needKillSession(t, h)
	s, _ := freshSem(t, h)
	s.put(h.semConfig("s", 5))
	for range 5 {
		s.acquire(backends.SemRef{Name: "s"}, newOwner("a"), time.Minute)
	}
	s.put(h.semConfig("s", 2))
	s.full(backends.SemRef{Name: "s"})
	for _, hd := range s.holders(backends.SemRef{Name: "s"}) {
		if hd.Slot < 2 {
			continue
		}
		h.KillSession(t, s.b, hd.Session)
	}
	waitFor(t, "three killed holders to be gone", func() (bool, error) {
		return len(s.holders(backends.SemRef{Name: "s"})) == 2, nil
	})
	s.full(backends.SemRef{Name: "s"})
	s.full(backends.SemRef{Name: "s"})
	s.wantSlots("s", 2, 2)
}

// testSemDriftHeldSlotsOnly is Drift for backends whose slots exist only
// while held: deleting a free slot changes nothing (every slot stays
// available, nothing needs repair), and deleting a held slot (an eviction)
// frees it for the next acquirer, with a higher fencing number, while the
// limit still holds.
func testSemDriftHeldSlotsOnly(t *testing.T, h Harness) {
	s, _ := freshSem(t, h)
	s.put(h.semConfig("s", 3))
	h.DeleteSlot(t, s.b, "s", 1)
	s.wantSlots("s", 3, 0)
	got := map[int]bool{}
	var last backends.Grant
	for range 3 {
		last = s.acquire(backends.SemRef{Name: "s"}, newOwner("a"), time.Minute)
		got[last.Slot] = true
	}
	if len(got) != 3 || !got[0] || !got[1] || !got[2] {
		t.Errorf("after deleting a free slot, grants took slots %v, want 0, 1 and 2", got)
	}
	s.full(backends.SemRef{Name: "s"})
	h.DeleteSlot(t, s.b, "s", last.Slot)
	s.wantSlots("s", 3, 2)
	g := s.acquire(backends.SemRef{Name: "s"}, newOwner("b"), time.Minute)
	if g.Slot != last.Slot || g.Fencing <= last.Fencing {
		t.Errorf("grant after a held slot vanished: %+v, want slot %d and fencing above %d", g, last.Slot, last.Fencing)
	}
	s.full(backends.SemRef{Name: "s"})
	s.wantSlots("s", 3, 3)
}

// testSemMaxWaitingRefused: a backend without a waiter line refuses a
// bounded max_waiting instead of ignoring it.
func testSemMaxWaitingRefused(t *testing.T, h Harness) {
	s, _ := freshSem(t, h)
	for _, mw := range []int{0, 1, 7} {
		cfg := h.semConfig("s", 1)
		cfg.MaxWaiting = mw
		wantErr(t, s.PutSemaphore(t.Context(), cfg), backends.ErrUnsupported, fmt.Sprintf("put with max_waiting %d", mw))
	}
	if st := s.observe("s"); st != nil {
		t.Errorf("refused semaphore observed as %+v", st)
	}
}
