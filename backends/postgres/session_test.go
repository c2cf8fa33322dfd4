package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/postgres"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/semaphore"
	"github.com/coordd/coordd/spec"
)

// Session-mode tests that need PostgreSQL itself: waiters blocked in the
// server's lock queue, the NOTIFY wake-up, the order they are served in
// and what giving up leaves behind. The mode-independent rules run in the
// conformance suite (Harness.SemaphoreModes).

func migratedStore(t *testing.T, dsn string) *postgres.Store {
	t.Helper()
	s := openStore(t, dsn, "coordd", backends.Options{Version: "0.1.0"})
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return s
}

func sessionConfig(name string, limit int) backends.SemaphoreConfig {
	return backends.SemaphoreConfig{Name: name, Limit: limit, Lease: time.Minute, Mode: spec.ModeSession, MaxWaiting: -1}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// countRows runs a count(*) query through s's pool.
func countRows(t *testing.T, s *postgres.Store, q string, args ...any) int {
	t.Helper()
	var n int
	if err := s.DB().QueryRowContext(t.Context(), q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// blockedOnAdvisory counts the sessions of this database waiting in the
// server for an advisory lock: waiters in line behind the head.
func blockedOnAdvisory(t *testing.T, s *postgres.Store) int {
	return countRows(t, s, `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock' AND wait_event = 'advisory'`)
}

// heldAdvisory counts the advisory locks held in this database.
func heldAdvisory(t *testing.T, s *postgres.Store) int {
	return countRows(t, s, `SELECT count(*) FROM pg_locks
WHERE locktype = 'advisory' AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`)
}

// waiterAsync starts a waiting acquire on a store handle of its own (a
// host of its own) and returns the channel its lease arrives on.
func waiterAsync(t *testing.T, dsn, name string, i int) <-chan *semaphore.Lease {
	t.Helper()
	c, err := semaphore.New(openStore(t, dsn, "coordd", backends.Options{Version: "0.1.0"}), fmt.Sprintf("waiter-%d", i))
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan *semaphore.Lease, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		l, err := c.Acquire(ctx, name, semaphore.AcquireOptions{Lease: time.Minute, Wait: time.Minute})
		if err != nil {
			if ctx.Err() == nil {
				t.Errorf("waiter %d: acquire %s: %v", i, name, err)
			}
			close(out)
			return
		}
		out <- l
		<-ctx.Done()
		rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer rcancel()
		_ = l.Release(rctx)
	}()
	return out
}

// wakeUpsInOrder fills a semaphore of the given limit, queues three
// waiters one after the other, each from its own handle, and releases one
// slot at a time: each release wakes the first waiter left, at once (well
// before the fallback retry), and none other. The waiters behind the head
// wait in the server on the line lock, none polls.
func wakeUpsInOrder(t *testing.T, limit int) {
	dsn := testenv.PostgresDSN(t)
	s := migratedStore(t, dsn)
	ctx := t.Context()
	if err := s.PutSemaphore(ctx, sessionConfig("pool", limit)); err != nil {
		t.Fatal(err)
	}
	// releases are the holds in the order they are given back: the
	// first holders, then each waiter once it got its slot.
	var releases []func() error
	for i := range limit {
		o := fmt.Sprintf("holder-%d", i)
		if _, err := s.TryAcquire(ctx, backends.SemRef{Name: "pool"}, backends.AcquireRequest{Owner: o, Host: "h", PID: 1, Lease: time.Minute}); err != nil {
			t.Fatal(err)
		}
		releases = append(releases, func() error { return s.Release(ctx, backends.SemRef{Name: "pool"}, o) })
	}
	const n = 3
	var waiters []<-chan *semaphore.Lease
	for i := range n {
		waiters = append(waiters, waiterAsync(t, dsn, "pool", i))
		eventually(t, fmt.Sprintf("waiter %d in line", i), func() bool {
			m, err := s.ObserveSemaphores(ctx, []string{"pool"})
			return err == nil && m["pool"].Waiters == i+1
		})
		// The head listens; everyone behind it blocks in the server.
		eventually(t, fmt.Sprintf("%d waiters blocked on the line lock", i), func() bool { return blockedOnAdvisory(t, s) == i })
	}
	for i := range n {
		t0 := time.Now()
		if err := releases[i](); err != nil {
			t.Fatal(err)
		}
		select {
		case l := <-waiters[i]:
			if l == nil {
				t.Fatalf("waiter %d gave up", i)
			}
			if d := time.Since(t0); d > time.Second {
				t.Errorf("waiter %d granted %v after the release: not woken by it", i, d)
			}
			releases = append(releases, func() error { return l.Release(ctx) })
		case <-time.After(20 * time.Second):
			t.Fatalf("waiter %d did not get the freed slot", i)
		}
		for j := i + 1; j < n; j++ {
			select {
			case <-waiters[j]:
				t.Fatalf("waiter %d got a slot before waiter %d", j, i+1)
			default:
			}
		}
	}
	hs, err := s.Holders(ctx, backends.SemRef{Name: "pool"})
	if err != nil || len(hs) != limit {
		t.Fatalf("holders %+v (%v), want %d", hs, err, limit)
	}
}

// TestSessionWakeUpLimitOne: limit 1, waiters served in arrival order and
// woken at once by each release.
func TestSessionWakeUpLimitOne(t *testing.T) { wakeUpsInOrder(t, 1) }

// TestSessionWakeUpLimitN: the same with limit 3: the head tries every
// slot, and the release of any of them wakes it.
func TestSessionWakeUpLimitN(t *testing.T) { wakeUpsInOrder(t, 3) }

// TestSessionHolderConnectionEnds: a holder whose backend is terminated
// frees its slot in the server at once; the waiter gets it (nobody
// released, so nobody notified: a head already waiting finds it at its
// fallback retry), with a higher fencing number, and the old holder's
// Extend reports the loss.
func TestSessionHolderConnectionEnds(t *testing.T) {
	dsn := testenv.PostgresDSN(t)
	s := migratedStore(t, dsn)
	holder := migratedStore(t, dsn)
	ctx := t.Context()
	if err := s.PutSemaphore(ctx, sessionConfig("gate", 1)); err != nil {
		t.Fatal(err)
	}
	g, err := holder.TryAcquire(ctx, backends.SemRef{Name: "gate"}, backends.AcquireRequest{Owner: "a", Host: "h", PID: 1, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	w := waiterAsync(t, dsn, "gate", 0)
	hs, err := s.Holders(ctx, backends.SemRef{Name: "gate"})
	if err != nil || len(hs) != 1 || hs[0].Session == 0 || hs[0].Fencing != g.Fencing {
		t.Fatalf("holders %+v (%v)", hs, err)
	}
	execSQL(t, s, `SELECT pg_terminate_backend($1)`, hs[0].Session)
	select {
	case l := <-w:
		if l == nil || l.Fencing <= g.Fencing {
			t.Fatalf("waiter's lease %+v, want fencing above %d", l, g.Fencing)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter did not get the slot of the terminated holder")
	}
	if _, err := holder.Extend(ctx, backends.SemRef{Name: "gate"}, "a", time.Minute); !errors.Is(err, backends.ErrLost) {
		t.Fatalf("extend by the terminated holder: %v, want ErrLost", err)
	}
}

// TestSessionNoLeak: giving up (no wait, an elapsed wait) and releasing
// leave no advisory lock behind, and the connections go back.
func TestSessionNoLeak(t *testing.T) {
	dsn := testenv.PostgresDSN(t)
	s := migratedStore(t, dsn)
	ctx := t.Context()
	if err := s.PutSemaphore(ctx, sessionConfig("gate", 2)); err != nil {
		t.Fatal(err)
	}
	c, err := semaphore.New(s, "host")
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.Acquire(ctx, "gate", semaphore.AcquireOptions{Lease: time.Minute, NoWait: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Acquire(ctx, "gate", semaphore.AcquireOptions{Lease: time.Minute, NoWait: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, "gate", semaphore.AcquireOptions{Lease: time.Minute, NoWait: true}); !errors.Is(err, semaphore.ErrNotAcquired) {
		t.Fatalf("third acquire: %v, want ErrNotAcquired", err)
	}
	if _, err := c.Acquire(ctx, "gate", semaphore.AcquireOptions{Lease: time.Minute, Wait: 300 * time.Millisecond}); !errors.Is(err, semaphore.ErrNotAcquired) {
		t.Fatalf("waiting acquire: %v, want ErrNotAcquired", err)
	}
	if n := heldAdvisory(t, s); n != 2 {
		t.Fatalf("%d advisory locks held after giving up, want the 2 slots", n)
	}
	for _, l := range []*semaphore.Lease{a, b} {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "no advisory lock left", func() bool { return heldAdvisory(t, s) == 0 })
}

// TestSessionKeys: the advisory lock keys hash the database, schema,
// prefix and name: two prefixes in one database never share a slot.
func TestSessionKeys(t *testing.T) {
	dsn := testenv.PostgresDSN(t)
	ctx := t.Context()
	var stores []*postgres.Store
	for _, prefix := range []string{"a_", "b_"} {
		st, err := postgres.Open(ctx, "pg", dsn, "coordd", prefix, backends.Options{Version: "0.1.0"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		if err := st.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		stores = append(stores, st)
	}
	for _, st := range stores {
		if err := st.PutSemaphore(ctx, sessionConfig("gate", 1)); err != nil {
			t.Fatal(err)
		}
		if _, err := st.TryAcquire(ctx, backends.SemRef{Name: "gate"}, backends.AcquireRequest{Owner: "o", Host: "h", PID: 1, Lease: time.Minute}); err != nil {
			t.Fatalf("acquire under its own prefix: %v", err)
		}
	}
	if n := heldAdvisory(t, stores[0]); n != 2 {
		t.Fatalf("%d advisory locks held, want one per prefix", n)
	}
}
