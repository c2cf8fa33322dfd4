package memcached_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/memcached"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/spec"
)

// TestRestartLosesHolder restarts a private memcached while a holder holds:
// its Extend gets ErrLost, the semaphore and the marker are gone, and the
// marker written then holds re-creation for the given lease, as on Redis.
func TestRestartLosesHolder(t *testing.T) {
	m := testenv.StartMemcached(t)
	s := openStore(t, m.Addr(), "coordd-test:", backends.Options{Version: "0.1.0"})
	ctx := t.Context()

	first, err := s.MarkLoss(ctx, false, time.Minute)
	if err != nil || !first.Wrote || first.Holding() || first.RunID == "" {
		t.Fatalf("first MarkLoss: %+v, %v; want written, no hold", first, err)
	}
	cfg := backends.SemaphoreConfig{Name: "s", Limit: 1, Lease: time.Minute, Mode: spec.ModeLease, MaxWaiting: -1}
	if err := s.PutSemaphore(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	g := mustAcquire(t, s, "s", "a", time.Minute)

	m.Kill()
	m.Start(t)

	if _, err := s.Extend(ctx, backends.SemRef{Name: "s"}, "a", time.Minute); !errors.Is(err, backends.ErrLost) {
		t.Fatalf("extend after the restart: %v, want ErrLost", err)
	}
	obs, err := s.ObserveLoss(ctx)
	if err != nil || obs.Marked {
		t.Fatalf("ObserveLoss after the restart: %+v, %v; want no marker", obs, err)
	}
	if obs.RunID == first.RunID || !strings.HasPrefix(obs.RunID, "pid:") {
		t.Errorf("run id %q after the restart, was %q: want a new one", obs.RunID, first.RunID)
	}
	if _, err := acquire(t, s, "s", "b", time.Minute); !errors.Is(err, backends.ErrNotFound) {
		t.Fatalf("acquire after the restart: %v, want ErrNotFound (the config is gone)", err)
	}
	if st, err := s.ObserveSemaphores(ctx, []string{"s"}); err != nil || st["s"] != nil {
		t.Fatalf("observe after the restart: %+v, %v; want absent (drift)", st["s"], err)
	}

	lost, err := s.MarkLoss(ctx, true, time.Minute)
	if err != nil || !lost.Wrote || !lost.Holding() {
		t.Fatalf("MarkLoss after the loss: %+v, %v; want written with a hold", lost, err)
	}
	if d := lost.HoldUntil.Sub(lost.Now); d < time.Minute || d > time.Minute+time.Second {
		t.Errorf("hold %v, want one minute", d)
	}
	again, err := s.MarkLoss(ctx, true, time.Hour)
	if err != nil || again.Wrote || !again.HoldUntil.Equal(lost.HoldUntil) {
		t.Fatalf("second MarkLoss: %+v, %v; want the first hold kept", again, err)
	}
	// Re-created, the fencing continues above the lost holder's.
	if err := s.PutSemaphore(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if g2 := mustAcquire(t, s, "s", "b", time.Minute); g2.Fencing <= g.Fencing {
		t.Errorf("fencing after the restart %d, want above %d", g2.Fencing, g.Fencing)
	}
}

// TestEvictedConfigAndFencing: a vanished config is an absent semaphore
// (drift: reconcile re-creates it); a vanished fencing key shows as missing
// slots and is re-created above every earlier value.
func TestEvictedConfigAndFencing(t *testing.T) {
	addr, prefix := testenv.MemcachedAddr(t)
	s := openStore(t, addr, prefix, backends.Options{Version: "0.1.0"})
	ctx := t.Context()
	cfg := backends.SemaphoreConfig{Name: "s", Limit: 2, Lease: time.Minute, Mode: spec.ModeLease, MaxWaiting: -1}
	if err := s.PutSemaphore(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	g := mustAcquire(t, s, "s", "a", time.Minute)
	cfgKey, fencingKey, _, _ := memcached.SemKeys(s, "s")
	if err := s.Client().Delete(fencingKey); err != nil {
		t.Fatal(err)
	}
	st, err := s.ObserveSemaphores(ctx, []string{"s"})
	if err != nil || st["s"] == nil || st["s"].Slots != 1 || st["s"].WantSlots() != 2 {
		t.Fatalf("observe without the fencing key: %+v, %v; want 1 slot of 2 (drift)", st["s"], err)
	}
	g2 := mustAcquire(t, s, "s", "b", time.Minute)
	if g2.Fencing <= g.Fencing {
		t.Fatalf("fencing %d after the key vanished, want above %d", g2.Fencing, g.Fencing)
	}
	if err := s.Client().Delete(cfgKey); err != nil {
		t.Fatal(err)
	}
	if st, err := s.ObserveSemaphores(ctx, []string{"s"}); err != nil || st["s"] != nil {
		t.Fatalf("observe without the config: %+v, %v; want absent", st["s"], err)
	}
	if _, err := acquire(t, s, "s", "c", time.Minute); !errors.Is(err, backends.ErrNotFound) {
		t.Fatalf("acquire without the config: %v, want ErrNotFound", err)
	}
	// The holders keep their slots; re-put, the limit still holds.
	if _, err := s.Extend(ctx, backends.SemRef{Name: "s"}, "a", time.Minute); err != nil {
		t.Fatalf("extend by a holder while the config is missing: %v", err)
	}
	if err := s.PutSemaphore(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	wantNoSlot(t, s, "s", "c")
}

// TestLongAndOddNames: names of any length and bytes make legal keys.
func TestLongAndOddNames(t *testing.T) {
	addr, prefix := testenv.MemcachedAddr(t)
	s := openStore(t, addr, prefix, backends.Options{Version: "0.1.0"})
	for _, n := range []string{strings.Repeat("x", 400), "with space\nand newline", "{a}:b"} {
		cfg := backends.SemaphoreConfig{Name: n, Limit: 1, Lease: time.Minute, Mode: spec.ModeLease, MaxWaiting: -1}
		if err := s.PutSemaphore(t.Context(), cfg); err != nil {
			t.Fatalf("put %q: %v", n, err)
		}
		mustAcquire(t, s, n, "a", time.Minute)
		wantNoSlot(t, s, n, "b")
		if err := s.Release(t.Context(), backends.SemRef{Name: n}, "a"); err != nil {
			t.Fatal(err)
		}
	}
}
