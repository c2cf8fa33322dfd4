package backendtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// testStateStore checks the inventory, apply records and apply lock.
func testStateStore(t *testing.T, h Harness) {
	t.Run("Empty", func(t *testing.T) {
		t.Parallel()
		open := h.New(t)
		raw := open()
		if _, isMigrator := raw.(backends.Migrator); isMigrator {
			st, err := clusterOf(t, raw).LoadState(t.Context())
			ok(t, err, "load state of a store never migrated")
			if len(st.Entries) != 0 || st.Last != nil {
				t.Errorf("never migrated: got %d entries, last %+v, want empty", len(st.Entries), st.Last)
			}
		}
		b, _ := fresh(t, h)
		st, err := clusterOf(t, b).LoadState(t.Context())
		ok(t, err, "load state")
		if len(st.Entries) != 0 || st.Last != nil {
			t.Errorf("fresh store: got %d entries, last %+v, want empty", len(st.Entries), st.Last)
		}
	})
	t.Run("CommitWithoutLock", func(t *testing.T) {
		t.Parallel()
		b, _ := fresh(t, h)
		ss := clusterOf(t, b)
		_, err := ss.CommitApply(t.Context(), "nobody", backends.ApplyRecord{SpecHash: "h"}, entries(1, "semaphore.a"), nil)
		wantErr(t, err, backends.ErrLost, "commit without the lock")
		st, err := ss.LoadState(t.Context())
		ok(t, err, "load state")
		if len(st.Entries) != 0 || st.Last != nil {
			t.Errorf("after refused commit: %d entries, last %+v, want empty", len(st.Entries), st.Last)
		}
	})
	t.Run("Commits", func(t *testing.T) { t.Parallel(); testCommits(t, h) })
	t.Run("LockExclusive", func(t *testing.T) { t.Parallel(); testLockExclusive(t, h) })
	t.Run("LockExpiry", func(t *testing.T) { t.Parallel(); testLockExpiry(t, h) })
	t.Run("LockRace", func(t *testing.T) { t.Parallel(); testLockRace(t, h) })
	t.Run("LargeCommit", func(t *testing.T) { t.Parallel(); testLargeCommit(t, h) })
	t.Run("FindApply", func(t *testing.T) { t.Parallel(); testFindApply(t, h) })
}

// entries builds inventory entries for addresses "kind.name".
func entries(gen int64, addrs ...string) []backends.InventoryEntry {
	var es []backends.InventoryEntry
	for _, a := range addrs {
		var kind, name string
		for i := range a {
			if a[i] == '.' {
				kind, name = a[:i], a[i+1:]
				break
			}
		}
		es = append(es, backends.InventoryEntry{
			Address: spec.Address{Kind: spec.Kind(kind), Name: name},
			Placement: backends.Placement{
				Backend:     "main",
				BackendType: spec.TypeSQLite,
				Spec:        json.RawMessage(fmt.Sprintf(`{"name":%q,"limit":3,"nested":{"a":[1,2]}}`, name)),
			},
			Status:     backends.StatusActive,
			Generation: gen,
		})
	}
	return es
}

// checkEntries compares loaded entries with the wanted ones, in order.
func checkEntries(t *testing.T, got, want []backends.InventoryEntry) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d entries, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Address != w.Address || g.Backend != w.Backend || g.BackendType != w.BackendType ||
			g.Status != w.Status || g.Generation != w.Generation || !jsonEqual(g.Spec, w.Spec) {
			t.Errorf("entry %d:\n got %+v (spec %s)\nwant %+v (spec %s)", i, g, g.Spec, w, w.Spec)
		}
		switch {
		case (g.Previous == nil) != (w.Previous == nil):
			t.Errorf("entry %d previous: got %+v, want %+v", i, g.Previous, w.Previous)
		case w.Previous != nil:
			if g.Previous.Backend != w.Previous.Backend || g.Previous.BackendType != w.Previous.BackendType ||
				!jsonEqual(g.Previous.Spec, w.Previous.Spec) {
				t.Errorf("entry %d previous: got %+v, want %+v", i, *g.Previous, *w.Previous)
			}
		}
	}
}

func testCommits(t *testing.T, h Harness) {
	b, _ := fresh(t, h)
	ss := clusterOf(t, b)
	ctx := t.Context()
	unlock, err := ss.TryLockApply(ctx, "alice", time.Minute)
	ok(t, err, "lock")

	before, err := b.Now(ctx)
	ok(t, err, "now")
	put := entries(0, "semaphore.b", "cron.x", "semaphore.a")
	put[2].Status = backends.StatusReplacing
	put[2].Previous = &backends.Placement{Backend: "old", BackendType: spec.TypeRedis, Spec: json.RawMessage(`{"limit": 1}`)}
	rec := backends.ApplyRecord{SpecHash: "hash-1", Host: "host-a:1", Summary: "3 to add", Generation: 99}
	gen, err := ss.CommitApply(ctx, "alice", rec, put, nil)
	ok(t, err, "first commit")
	if gen != 1 {
		t.Fatalf("first commit: generation %d, want 1", gen)
	}
	after, err := b.Now(ctx)
	ok(t, err, "now")

	st, err := ss.LoadState(ctx)
	ok(t, err, "load state")
	want := entries(1, "cron.x", "semaphore.a", "semaphore.b")
	want[1].Status, want[1].Previous = put[2].Status, put[2].Previous
	checkEntries(t, st.Entries, want)
	if st.Last == nil {
		t.Fatal("no last apply record after a commit")
	}
	if l := *st.Last; l.Generation != 1 || l.SpecHash != rec.SpecHash || l.Host != rec.Host || l.Summary != rec.Summary {
		t.Errorf("last record = %+v, want generation 1 and %+v", l, rec)
	}
	// At is backend time, taken inside the commit.
	if at := st.Last.At; at.Before(before.Truncate(time.Millisecond)) || at.After(after) || at.Location() != time.UTC {
		t.Errorf("record At = %v, want UTC within [%v, %v]", at, before, after)
	}

	// Second commit: update one, remove one, leave one alone.
	upd := entries(0, "semaphore.b")
	upd[0].Spec = json.RawMessage(`{"limit":5}`)
	upd[0].Status = backends.StatusDraining
	gen, err = ss.CommitApply(ctx, "alice", backends.ApplyRecord{SpecHash: "hash-2", Host: "host-a:1", Summary: "1 to change, 1 to destroy"},
		upd, []spec.Address{{Kind: spec.KindCron, Name: "x"}})
	ok(t, err, "second commit")
	if gen != 2 {
		t.Fatalf("second commit: generation %d, want 2", gen)
	}
	st, err = ss.LoadState(ctx)
	ok(t, err, "load state")
	want = entries(1, "semaphore.a", "semaphore.b")
	want[0].Status, want[0].Previous = put[2].Status, put[2].Previous
	want[1].Spec, want[1].Status, want[1].Generation = upd[0].Spec, upd[0].Status, 2
	checkEntries(t, st.Entries, want)
	if st.Last == nil || st.Last.Generation != 2 || st.Last.SpecHash != "hash-2" {
		t.Errorf("last record = %+v, want generation 2, hash-2", st.Last)
	}
	ok(t, unlock(ctx), "unlock")
	_, err = ss.CommitApply(ctx, "alice", backends.ApplyRecord{SpecHash: "hash-3"}, nil, nil)
	wantErr(t, err, backends.ErrLost, "commit after unlock")
}

func testLockExclusive(t *testing.T, h Harness) {
	b, open := fresh(t, h)
	a := clusterOf(t, b)
	other := clusterOf(t, open())
	ctx := t.Context()

	unlockA, err := a.TryLockApply(ctx, "alice", time.Minute)
	ok(t, err, "alice locks")
	_, err = other.TryLockApply(ctx, "bob", time.Minute)
	wantErr(t, err, backends.ErrLocked, "bob locks while alice holds")
	_, err = a.TryLockApply(ctx, "alice", time.Minute)
	ok(t, err, "alice renews")
	_, err = other.CommitApply(ctx, "bob", backends.ApplyRecord{}, nil, nil)
	wantErr(t, err, backends.ErrLost, "bob commits without the lock")

	ok(t, unlockA(ctx), "alice unlocks")
	unlockB, err := other.TryLockApply(ctx, "bob", time.Minute)
	ok(t, err, "bob locks after alice unlocked")
	// Alice's unlock again must not release Bob's lock.
	ok(t, unlockA(ctx), "alice unlocks again")
	_, err = a.TryLockApply(ctx, "carol", time.Minute)
	wantErr(t, err, backends.ErrLocked, "carol locks after alice's stale unlock")
	_, err = a.CommitApply(ctx, "alice", backends.ApplyRecord{}, nil, nil)
	wantErr(t, err, backends.ErrLost, "alice commits after losing the lock")
	gen, err := other.CommitApply(ctx, "bob", backends.ApplyRecord{SpecHash: "b"}, nil, nil)
	ok(t, err, "bob commits")
	if gen != 1 {
		t.Errorf("bob's generation = %d, want 1", gen)
	}
	ok(t, unlockB(ctx), "bob unlocks")
	_, err = a.TryLockApply(ctx, "carol", time.Minute)
	ok(t, err, "carol locks after bob unlocked")
}

func testLockExpiry(t *testing.T, h Harness) {
	b, open := fresh(t, h)
	a := clusterOf(t, b)
	other := clusterOf(t, open())
	ctx := t.Context()
	const ttl = time.Second

	t0, err := b.Now(ctx)
	ok(t, err, "now")
	unlockA, err := a.TryLockApply(ctx, "alice", ttl)
	ok(t, err, "alice locks")
	var bobUnlock func() error
	waitFor(t, "bob to take the lock after alice's ttl", func() (bool, error) {
		u, err := other.TryLockApply(ctx, "bob", time.Minute)
		if err == nil {
			bobUnlock = func() error { return u(ctx) }
			return true, nil
		}
		if !errors.Is(err, backends.ErrLocked) {
			return false, err
		}
		return false, nil
	})
	now, err := b.Now(ctx)
	ok(t, err, "now")
	if now.Before(t0.Add(ttl)) {
		t.Errorf("bob took the lock at %v, before alice's ttl ended (locked after %v + %v)", now, t0, ttl)
	}
	_, err = a.CommitApply(ctx, "alice", backends.ApplyRecord{}, nil, nil)
	wantErr(t, err, backends.ErrLost, "alice commits after expiry")
	ok(t, unlockA(ctx), "alice's stale unlock")
	_, err = a.TryLockApply(ctx, "carol", time.Minute)
	wantErr(t, err, backends.ErrLocked, "carol locks while bob holds")
	_, err = other.CommitApply(ctx, "bob", backends.ApplyRecord{SpecHash: "b"}, entries(0, "queue.q"), nil)
	ok(t, err, "bob commits")
	ok(t, bobUnlock(), "bob unlocks")
}

func testLockRace(t *testing.T, h Harness) {
	_, open := fresh(t, h)
	stores := []backends.Cluster{clusterOf(t, open()), clusterOf(t, open())}
	ctx := t.Context()
	for round := range 20 {
		start := make(chan struct{})
		var mu sync.Mutex
		var won []func() error
		var wg sync.WaitGroup
		for i, s := range stores {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				owner := fmt.Sprintf("owner-%d-%d", round, i)
				u, err := s.TryLockApply(ctx, owner, time.Minute)
				switch {
				case err == nil:
					mu.Lock()
					won = append(won, func() error { return u(ctx) })
					mu.Unlock()
				case !errors.Is(err, backends.ErrLocked):
					t.Errorf("round %d: %s: %v", round, owner, err)
				}
			}()
		}
		close(start)
		wg.Wait()
		if len(won) != 1 {
			t.Fatalf("round %d: %d owners took the lock, want exactly 1", round, len(won))
		}
		ok(t, won[0](), "unlock")
	}
}

func testLargeCommit(t *testing.T, h Harness) {
	b, _ := fresh(t, h)
	ss := clusterOf(t, b)
	ctx := t.Context()
	const n = 10000
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("semaphore.s%05d", i)
	}
	_, err := ss.TryLockApply(ctx, "alice", time.Minute)
	ok(t, err, "lock")
	start := time.Now()
	gen, err := ss.CommitApply(ctx, "alice", backends.ApplyRecord{SpecHash: "big"}, entries(0, addrs...), nil)
	ok(t, err, "commit 10,000 entries")
	t.Logf("commit of %d entries took %v", n, time.Since(start))
	st, err := ss.LoadState(ctx)
	ok(t, err, "load state")
	if len(st.Entries) != n {
		t.Fatalf("loaded %d entries, want %d", len(st.Entries), n)
	}
	for i, e := range st.Entries {
		if want := fmt.Sprintf("s%05d", i); e.Address.Name != want || e.Generation != gen {
			t.Fatalf("entry %d = %s generation %d, want semaphore.%s generation %d", i, e.Address, e.Generation, want, gen)
		}
	}
}

// testFindApply checks that the apply log answers "was this spec hash ever
// applied, and is it still the latest?".
func testFindApply(t *testing.T, h Harness) {
	b, _ := fresh(t, h)
	ss := clusterOf(t, b)
	ctx := t.Context()
	_, err := ss.FindApply(ctx, "hash-a")
	wantErr(t, err, backends.ErrNotFound, "find a hash never applied")
	unlock, err := ss.TryLockApply(ctx, "alice", time.Minute)
	ok(t, err, "lock")
	defer unlock(ctx)
	for _, hash := range []string{"hash-a", "hash-b", "hash-a", "hash-c"} {
		_, err := ss.CommitApply(ctx, "alice", backends.ApplyRecord{SpecHash: hash, Host: "h"}, nil, nil)
		ok(t, err, "commit "+hash)
	}
	r, err := ss.FindApply(ctx, "hash-a")
	ok(t, err, "find hash-a")
	if r.Generation != 3 || r.SpecHash != "hash-a" || r.At.IsZero() {
		t.Errorf("find hash-a: %+v, want the latest (generation 3)", r)
	}
	r, err = ss.FindApply(ctx, "hash-b")
	ok(t, err, "find hash-b")
	if r.Generation != 2 {
		t.Errorf("find hash-b: generation %d, want 2", r.Generation)
	}
	_, err = ss.FindApply(ctx, "hash-z")
	wantErr(t, err, backends.ErrNotFound, "find an unknown hash")
}
