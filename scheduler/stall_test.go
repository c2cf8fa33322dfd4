package scheduler

import (
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/internal/testenv"
)

// TestStartAfterHungClaim: a claim that hangs in a stalled store (another
// process holds its write lock) for most of the run lease still runs its
// command to the end: the lease is renewed before the start, instead of the
// command being stopped at once as a lost run. The chaos harness found the
// lost runs, retried as attempt 2, after every stall of the embedded store.
func TestStartAfterHungClaim(t *testing.T) {
	path := filepath.Join(t.TempDir(), "coordd.db")
	st := openStore(t, path)
	def := newDef("@every 1h", "sleep 0.6")
	def.RunLease = time.Second // trusted 0.9 s from the claim's send; TERM 0.33 s before that
	put(t, st, "slow", def, now(t, st).Add(time.Hour))
	s := New(Config{Host: "h", Log: logger(t, "h")})

	stall := &testenv.SQLiteStall{Path: path}
	stall.Kill()
	released := stall.ReleaseAfter(t, 800*time.Millisecond)
	code, err := s.RunManual(t.Context(), st, "slow", io.Discard, io.Discard)
	<-released
	if err != nil || code != 0 {
		t.Fatalf("run after a hung claim: code %d, %v; want 0", code, err)
	}
	runs := history(t, st, "slow")
	if len(runs) != 1 || runs[0].Status != backends.RunSucceeded || runs[0].Attempt != 1 {
		t.Fatalf("history %s; want one succeeded attempt 1", dump(runs))
	}
}
