package semaphore_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/sqlite"
	"github.com/coordd/coordd/semaphore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newStore opens a migrated SQLite store holding semaphore name with limit.
func newStore(t testing.TB, dir, name string, limit int) *sqlite.Store {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, "db", filepath.Join(dir, "db.sqlite"), backends.Options{Version: "0.1.0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := st.PutSemaphore(ctx, backends.SemaphoreConfig{Name: name, Limit: limit, Lease: time.Minute, Mode: "lease", MaxWaiting: -1}); err != nil {
		t.Fatal(err)
	}
	return st
}

func newClient(t testing.TB, b backends.Backend) *semaphore.Client {
	t.Helper()
	c, err := semaphore.New(b, "test-host")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestAcquireReleaseFencing(t *testing.T) {
	st := newStore(t, t.TempDir(), "s", 2)
	c := newClient(t, st)
	ctx := context.Background()
	a, err := c.Acquire(ctx, "s", semaphore.AcquireOptions{Lease: time.Minute, NoWait: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Acquire(ctx, "s", semaphore.AcquireOptions{Lease: time.Minute, NoWait: true})
	if err != nil {
		t.Fatal(err)
	}
	if a.Slot == b.Slot || b.Fencing <= a.Fencing {
		t.Fatalf("slots %d/%d fencing %d/%d", a.Slot, b.Slot, a.Fencing, b.Fencing)
	}
	if _, err := c.Acquire(ctx, "s", semaphore.AcquireOptions{Lease: time.Minute, NoWait: true}); !errors.Is(err, semaphore.ErrNotAcquired) {
		t.Fatalf("third acquire: %v", err)
	}
	if _, err := c.Acquire(ctx, "s", semaphore.AcquireOptions{Lease: time.Minute, Wait: 100 * time.Millisecond}); !errors.Is(err, semaphore.ErrNotAcquired) {
		t.Fatalf("bounded wait: %v", err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	c2, err := c.Acquire(ctx, "s", semaphore.AcquireOptions{Lease: time.Minute, NoWait: true})
	if err != nil {
		t.Fatal(err)
	}
	if c2.Fencing <= b.Fencing {
		t.Fatalf("fencing not increasing: %d after %d", c2.Fencing, b.Fencing)
	}
	_ = b.Release(ctx)
	_ = c2.Release(ctx)
}

// TestInProcessWakeUp: a release wakes a waiter in the same process long
// before the backend poll or the wait bound would.
func TestInProcessWakeUp(t *testing.T) {
	st := newStore(t, t.TempDir(), "s", 1)
	c := newClient(t, st)
	ctx := context.Background()
	held, err := c.Acquire(ctx, "s", semaphore.AcquireOptions{Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := c.Acquire(ctx, "s", semaphore.AcquireOptions{Lease: time.Minute, Wait: 30 * time.Second})
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("waiter not woken")
	}
}

// TestLimitHoldsUnderContention tries to break the limit with many waiting
// acquirers on several handles of one store.
func TestLimitHoldsUnderContention(t *testing.T) {
	dir := t.TempDir()
	st := newStore(t, dir, "s", 2)
	var clients []*semaphore.Client
	for i := 0; i < 3; i++ {
		h, err := sqlite.Open(context.Background(), "db", st.Path(), backends.Options{Version: "0.1.0"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		clients = append(clients, newClient(t, h))
	}
	var cur, peak, done atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 9; g++ {
		wg.Add(1)
		go func(c *semaphore.Client) {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				l, err := c.Acquire(context.Background(), "s", semaphore.AcquireOptions{Lease: time.Minute, Wait: time.Minute})
				if err != nil {
					t.Error(err)
					return
				}
				n := cur.Add(1)
				for {
					p := peak.Load()
					if n <= p || peak.CompareAndSwap(p, n) {
						break
					}
				}
				time.Sleep(time.Millisecond)
				cur.Add(-1)
				if err := l.Release(context.Background()); err != nil {
					t.Error(err)
				}
				done.Add(1)
			}
		}(clients[g%len(clients)])
	}
	wg.Wait()
	if peak.Load() > 2 || done.Load() != 90 {
		t.Fatalf("peak holders %d (limit 2), done %d of 90", peak.Load(), done.Load())
	}
}

// TestLostAndKeepAlive: without renewal another owner takes the slot after
// the lease and the old lease learns it is lost; with KeepAlive it is kept.
func TestLostAndKeepAlive(t *testing.T) {
	st := newStore(t, t.TempDir(), "s", 1)
	c := newClient(t, st)
	other := newClient(t, st)
	ctx := context.Background()
	const lease = time.Second

	kept, err := c.Acquire(ctx, "s", semaphore.AcquireOptions{Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	kctx, stop := context.WithCancel(ctx)
	renewed := make(chan time.Time, 16)
	go kept.KeepAlive(kctx, func(at time.Time) {
		select {
		case renewed <- at:
		default:
		}
	})
	// Wait for several renewals, past the original expiry.
	for i := 0; i < 4; i++ {
		select {
		case <-renewed:
		case <-time.After(10 * time.Second):
			t.Fatal("no renewal")
		}
	}
	if _, err := other.Acquire(ctx, "s", semaphore.AcquireOptions{Lease: lease, NoWait: true}); !errors.Is(err, semaphore.ErrNotAcquired) {
		t.Fatalf("kept lease was taken: %v", err)
	}
	stop()
	select {
	case <-kept.Lost():
		t.Fatal("lost closed while kept alive")
	default:
	}

	// Stop renewing: the lease expires, another owner takes the slot, and the
	// old owner's extend reports the loss.
	var taken *semaphore.Lease
	for deadline := time.Now().Add(10 * time.Second); taken == nil; {
		l, err := other.Acquire(ctx, "s", semaphore.AcquireOptions{Lease: time.Minute, Wait: 200 * time.Millisecond})
		if err == nil {
			taken = l
		} else if time.Now().After(deadline) {
			t.Fatalf("expired slot never reclaimed: %v", err)
		}
	}
	if err := kept.Extend(ctx); !errors.Is(err, backends.ErrLost) {
		t.Fatalf("stale extend: %v", err)
	}
	select {
	case <-kept.Lost():
	default:
		t.Fatal("Lost not closed after ErrLost")
	}
	if err := kept.Release(ctx); !errors.Is(err, backends.ErrLost) {
		t.Fatalf("stale release: %v", err)
	}
	if err := taken.Release(ctx); err != nil {
		t.Fatalf("the new owner's release: %v", err)
	}
}
