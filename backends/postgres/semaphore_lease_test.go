package postgres_test

import (
	"errors"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// TestLeaseCallsAndTheSharedPath: the one-call acquire and release keep
// the shared store's answers (a grant, the limit's refusal, ErrLost for
// an owner holding nothing), and a schema without the functions (one an
// older binary migrated) takes the shared path with the same answers.
func TestLeaseCallsAndTheSharedPath(t *testing.T) {
	ctx := t.Context()
	a, _ := twoHosts(t, backends.Options{})
	if err := a.PutSemaphore(ctx, backends.SemaphoreConfig{Name: "s", Limit: 1, Lease: time.Minute, Mode: spec.ModeLease, MaxWaiting: -1}); err != nil {
		t.Fatal(err)
	}
	check := func(t *testing.T) {
		t.Helper()
		g, err := a.TryAcquire(ctx, backends.SemRef{Name: "s"}, backends.AcquireRequest{Owner: "o1", Lease: time.Minute})
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		if _, err := a.TryAcquire(ctx, backends.SemRef{Name: "s"}, backends.AcquireRequest{Owner: "o2", Lease: time.Minute}); !errors.Is(err, backends.ErrNoSlot) {
			t.Errorf("acquire of a full semaphore = %v, want ErrNoSlot", err)
		}
		if err := a.Release(ctx, backends.SemRef{Name: "s"}, "o2"); !errors.Is(err, backends.ErrLost) {
			t.Errorf("release by an owner holding nothing = %v, want ErrLost", err)
		}
		if err := a.Release(ctx, backends.SemRef{Name: "s"}, "o1"); err != nil {
			t.Fatalf("release: %v", err)
		}
		g2, err := a.TryAcquire(ctx, backends.SemRef{Name: "s"}, backends.AcquireRequest{Owner: "o2", Lease: time.Minute})
		if err != nil || g2.Fencing <= g.Fencing {
			t.Fatalf("acquire after the release: %+v, %v; want a fencing number above %d", g2, err, g.Fencing)
		}
		if err := a.Release(ctx, backends.SemRef{Name: "s"}, "o2"); err != nil {
			t.Fatalf("release: %v", err)
		}
	}
	t.Run("calls", check)
	execSQL(t, a, `DROP FUNCTION `+a.Table("sem_acquire")+`, `+a.Table("sem_release"))
	t.Run("shared", check)
}
