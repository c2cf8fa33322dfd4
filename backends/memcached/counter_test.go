package memcached_test

import (
	"errors"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/memcached"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/spec"
)

// These tests are not parallel: the counter hook is package-wide.

func counterStore(t *testing.T) (*memcached.Store, func() *memcached.Store) {
	t.Helper()
	addr, prefix := testenv.MemcachedAddr(t)
	open := func() *memcached.Store { return openStore(t, addr, prefix, backends.Options{Version: "0.1.0"}) }
	return open(), open
}

func counterCfg(name string) backends.SemaphoreConfig {
	return backends.SemaphoreConfig{Name: name, Limit: 1, Lease: time.Minute, Mode: spec.ModeCounter, Wake: spec.WakePoll, MaxWaiting: -1}
}

func acquire(t *testing.T, s *memcached.Store, name, owner string, lease time.Duration) (backends.Grant, error) {
	t.Helper()
	return s.TryAcquire(t.Context(), backends.SemRef{Name: name}, backends.AcquireRequest{Owner: owner, Host: "h-" + owner, PID: 7, Lease: lease})
}

func mustAcquire(t *testing.T, s *memcached.Store, name, owner string, lease time.Duration) backends.Grant {
	t.Helper()
	g, err := acquire(t, s, name, owner, lease)
	if err != nil {
		t.Fatalf("acquire %s as %s: %v", name, owner, err)
	}
	return g
}

func wantNoSlot(t *testing.T, s *memcached.Store, name, owner string) {
	t.Helper()
	if _, err := acquire(t, s, name, owner, time.Minute); !errors.Is(err, backends.ErrNoSlot) {
		t.Fatalf("acquire %s as %s: got %v, want ErrNoSlot", name, owner, err)
	}
}

// waitPast waits until the server clock is after at.
func waitPast(t *testing.T, s *memcached.Store, at time.Time) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		now, err := s.Now(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if now.After(at) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("server clock %v still not past %v", now, at)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCounterMode: the counter mutex (incr/decr) holds one at a time, with
// owner-checked extend and release, fencing and a holder record.
func TestCounterMode(t *testing.T) {
	s, open := counterStore(t)
	other := open()
	ctx := t.Context()
	bad := counterCfg("two")
	bad.Limit = 2
	if err := s.PutSemaphore(ctx, bad); !errors.Is(err, backends.ErrUnsupported) {
		t.Fatalf("put counter with limit 2: %v, want ErrUnsupported", err)
	}
	if err := s.PutSemaphore(ctx, counterCfg("c")); err != nil {
		t.Fatal(err)
	}
	ga := mustAcquire(t, s, "c", "a", time.Minute)
	wantNoSlot(t, other, "c", "b")
	wantNoSlot(t, other, "c", "b")
	hs, err := other.Holders(ctx, backends.SemRef{Name: "c"})
	if err != nil || len(hs) != 1 || hs[0].Owner != "a" || hs[0].Fencing != ga.Fencing || !hs[0].ExpiresAt.Equal(ga.ExpiresAt) {
		t.Fatalf("holders %+v, %v; want a with grant %+v", hs, err, ga)
	}
	if _, err := other.Extend(ctx, backends.SemRef{Name: "c"}, "b", time.Minute); !errors.Is(err, backends.ErrLost) {
		t.Fatalf("extend by a non-holder: %v, want ErrLost", err)
	}
	if err := other.Release(ctx, backends.SemRef{Name: "c"}, "b"); !errors.Is(err, backends.ErrLost) {
		t.Fatalf("release by a non-holder: %v, want ErrLost", err)
	}
	if exp, err := s.Extend(ctx, backends.SemRef{Name: "c"}, "a", 2*time.Minute); err != nil || exp.Before(ga.ExpiresAt) {
		t.Fatalf("extend by the holder: %v, %v", exp, err)
	}
	if err := s.Release(ctx, backends.SemRef{Name: "c"}, "a"); err != nil {
		t.Fatal(err)
	}
	gb := mustAcquire(t, other, "c", "b", time.Minute)
	if gb.Fencing <= ga.Fencing {
		t.Fatalf("fencing %d after %d", gb.Fencing, ga.Fencing)
	}
	st, err := s.ObserveSemaphores(ctx, []string{"c"})
	if err != nil || st["c"] == nil || st["c"].Slots != 1 || len(st["c"].Holders) != 1 || st["c"].Config.Mode != spec.ModeCounter {
		t.Fatalf("observe: %+v, %v", st["c"], err)
	}
}

// TestCounterExpiryAdmitsTwo is the first weak point of mode counter, the
// reason to prefer mode lease: with an expiry, an acquirer whose increment
// lands before the counter expires and whose decrement lands after it was
// re-created lets two holders in, both with live leases.
func TestCounterExpiryAdmitsTwo(t *testing.T) {
	s, open := counterStore(t)
	b, c, d := open(), open(), open()
	if err := s.PutSemaphore(t.Context(), counterCfg("c")); err != nil {
		t.Fatal(err)
	}
	// a holds with a short lease and stops extending (it hangs or died).
	ga := mustAcquire(t, s, "c", "a", 3*time.Second)

	// b's increment lands (counter 2); b is paused before its decrement.
	paused, resume := make(chan struct{}), make(chan struct{})
	memcached.SetCounterHook(func(string) bool {
		close(paused)
		<-resume
		return true
	})
	t.Cleanup(func() { memcached.SetCounterHook(nil) })
	bDone := make(chan error, 1)
	go func() {
		_, err := acquire(t, b, "c", "b", time.Minute)
		bDone <- err
	}()
	<-paused
	memcached.SetCounterHook(nil) // later callers are not paused (b already read it)

	// The counter expires with a's lease; c re-creates it and holds.
	waitPast(t, s, ga.ExpiresAt)
	gc := mustAcquire(t, c, "c", "c", time.Minute)

	// b's late decrement pushes c's counter back to 0 ...
	close(resume)
	if err := <-bDone; !errors.Is(err, backends.ErrNoSlot) {
		t.Fatalf("b: %v, want ErrNoSlot", err)
	}
	// ... so d is admitted while c's lease is live: two holders.
	gd, err := acquire(t, d, "c", "d", time.Minute)
	if err != nil {
		t.Fatalf("d: %v; the weak point did not show (counter mode would then be safe here)", err)
	}
	now, _ := s.Now(t.Context())
	if !now.Before(gc.ExpiresAt) || !now.Before(gd.ExpiresAt) {
		t.Fatalf("leases not both live at %v: c %v, d %v", now, gc.ExpiresAt, gd.ExpiresAt)
	}
	t.Logf("two holders admitted at once: c (fencing %d) and d (fencing %d)", gc.Fencing, gd.Fencing)
	// c learns it on its next extend (d's holder record replaced c's).
	if _, err := c.Extend(t.Context(), backends.SemRef{Name: "c"}, "c", time.Minute); !errors.Is(err, backends.ErrLost) {
		t.Fatalf("c's extend: %v, want ErrLost", err)
	}
}

// TestCounterDeadCallerWedges is the second weak point: a caller that dies
// between its increment and its decrement leaves the counter one too high,
// so after the holder releases nobody is admitted until the counter expires
// (without an expiry it would stay wedged forever).
func TestCounterDeadCallerWedges(t *testing.T) {
	s, open := counterStore(t)
	b := open()
	if err := s.PutSemaphore(t.Context(), counterCfg("c")); err != nil {
		t.Fatal(err)
	}
	ga := mustAcquire(t, s, "c", "a", 3*time.Second)
	memcached.SetCounterHook(func(string) bool { return false }) // b dies after its increment
	t.Cleanup(func() { memcached.SetCounterHook(nil) })
	if _, err := acquire(t, b, "c", "b", time.Minute); err == nil {
		t.Fatal("b was admitted")
	}
	memcached.SetCounterHook(nil)
	if err := s.Release(t.Context(), backends.SemRef{Name: "c"}, "a"); err != nil {
		t.Fatal(err)
	}
	if hs, err := s.Holders(t.Context(), backends.SemRef{Name: "c"}); err != nil || len(hs) != 0 {
		t.Fatalf("holders after release: %+v, %v", hs, err)
	}
	// Nobody holds it, yet nobody gets in: wedged.
	wantNoSlot(t, b, "c", "c")
	wantNoSlot(t, b, "c", "c")
	// Until the counter expires (it expires with a's last lease).
	waitPast(t, s, ga.ExpiresAt)
	mustAcquire(t, b, "c", "c", time.Minute)
}
