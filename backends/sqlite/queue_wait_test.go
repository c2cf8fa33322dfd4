package sqlite_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/sqlite"
)

// TestWaitQueueWithoutQueueReturns: WaitQueue on a queue that is absent,
// on a store never migrated and on a missing file opened read-only returns
// nil without waiting out its maximum, so that the caller's Claim says
// why; the dead set of such a store reads as empty.
func TestWaitQueueWithoutQueueReturns(t *testing.T) {
	dir := t.TempDir()
	stores := map[string]*sqlite.Store{
		"absent queue":       migrated(t, filepath.Join(dir, "migrated.db")),
		"never migrated":     openStore(t, filepath.Join(dir, "empty.db"), backends.Options{}),
		"missing, read-only": openStore(t, filepath.Join(dir, "missing", "coordd.db"), backends.Options{ReadOnly: true}),
	}
	for what, s := range stores {
		done := make(chan error, 1)
		go func() { done <- s.WaitQueue(t.Context(), "q", time.Hour) }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s: wait queue: %v", what, err)
			}
		case <-time.After(30 * time.Second): // a liveness bound, far below the hour asked for
			t.Fatalf("%s: wait queue still waits", what)
		}
		if dead, err := s.Dead(t.Context(), "q", 0); err != nil || len(dead) != 0 {
			t.Errorf("%s: dead = %v, %v; want none", what, dead, err)
		}
		if page, err := s.DeadPage(t.Context(), "q", 0, 10, 100); err != nil || len(page) != 0 {
			t.Errorf("%s: dead page = %v, %v; want none", what, page, err)
		}
	}
}
