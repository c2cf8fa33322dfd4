package sqlite_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
)

// TestListWaitersOlderRecord: a waiter record inserted as a binary from
// before migration 0006 inserts it (no host, pid or since) is listed in
// its place, with the host, pid and arrival time left unknown (empty and
// zero), as docs/operations.md says of a rolling upgrade.
func TestListWaitersOlderRecord(t *testing.T) {
	s := migrated(t, filepath.Join(t.TempDir(), "c.db"))
	ctx := t.Context()
	if err := s.PutSemaphore(ctx, backends.SemaphoreConfig{Name: "s", Limit: 1, Lease: time.Minute, Mode: "lease", MaxWaiting: -1}); err != nil {
		t.Fatal(err)
	}
	now, err := s.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	execSQL(t, s, `INSERT INTO semaphore_waiters (name, owner, seq, expires_at) VALUES ('s', 'old-binary', 1, ?)`, now.Add(time.Minute).UnixMicro())
	if err := s.EnterWait(ctx, backends.SemRef{Name: "s"}, backends.AcquireRequest{Owner: "new", Host: "web-2", PID: 7, Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	ws, err := s.ListWaiters(ctx, backends.SemRef{Name: "s"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 2 || ws[0].Place != 1 || ws[0].Host != "" || ws[0].PID != 0 || !ws[0].Since.IsZero() || ws[0].ExpiresAt.IsZero() ||
		ws[1].Host != "web-2" || ws[1].PID != 7 || ws[1].Since.IsZero() {
		t.Fatalf("waiters %+v: want the older record first, host, pid and since unknown, then web-2/7", ws)
	}
}
