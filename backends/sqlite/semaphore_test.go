package sqlite_test

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// TestRefusedAcquireLeavesTheFencingCounter: only a grant bumps the
// semaphore's fencing counter; a refusal (no slot, or a keyed semaphore
// acquired without a key) leaves it, so the next grant gets the previous
// grant's number plus one however many acquires were refused in between.
func TestRefusedAcquireLeavesTheFencingCounter(t *testing.T) {
	s := migrated(t, filepath.Join(t.TempDir(), "coordd.db"))
	ctx := t.Context()
	req := func(owner string) backends.AcquireRequest {
		return backends.AcquireRequest{Owner: owner, Host: "h", PID: 1, Lease: time.Minute}
	}
	for _, cfg := range []backends.SemaphoreConfig{
		{Name: "one", Limit: 1, Lease: time.Minute, Mode: spec.ModeLease, MaxWaiting: -1},
		{Name: "keyed", Limit: 1, Lease: time.Minute, Mode: spec.ModeLease, MaxWaiting: -1, Keyed: true},
	} {
		if err := s.PutSemaphore(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}

	g1, err := s.TryAcquire(ctx, backends.SemRef{Name: "one"}, req("a"))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := s.TryAcquire(ctx, backends.SemRef{Name: "one"}, req("b")); !errors.Is(err, backends.ErrNoSlot) {
			t.Fatalf("acquire of a full semaphore: %v, want ErrNoSlot", err)
		}
	}
	if err := s.Release(ctx, backends.SemRef{Name: "one"}, "a"); err != nil {
		t.Fatal(err)
	}
	g2, err := s.TryAcquire(ctx, backends.SemRef{Name: "one"}, req("b"))
	if err != nil {
		t.Fatal(err)
	}
	if g2.Fencing != g1.Fencing+1 {
		t.Errorf("fencing %d after %d and three refusals, want %d", g2.Fencing, g1.Fencing, g1.Fencing+1)
	}

	k1, err := s.TryAcquire(ctx, backends.SemRef{Name: "keyed", Key: "x"}, req("a"))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := s.TryAcquire(ctx, backends.SemRef{Name: "keyed"}, req("b")); !errors.Is(err, backends.ErrKeyRequired) {
			t.Fatalf("acquire of a keyed semaphore without a key: %v, want ErrKeyRequired", err)
		}
	}
	k2, err := s.TryAcquire(ctx, backends.SemRef{Name: "keyed", Key: "y"}, req("b"))
	if err != nil {
		t.Fatal(err)
	}
	if k2.Fencing != k1.Fencing+1 {
		t.Errorf("instance fencing %d after %d and three refusals, want %d", k2.Fencing, k1.Fencing, k1.Fencing+1)
	}
}
