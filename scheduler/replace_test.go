package scheduler

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// TestOverlapReplaceStopsTheRunningRun: under overlap replace, a time that
// falls due while the previous run's command still runs stops it (TERM,
// then KILL after kill_grace: this command ignores TERM) and starts; the
// stopped run is recorded replaced, is not retried, and the two commands
// never run at once.
func TestOverlapReplaceStopsTheRunningRun(t *testing.T) {
	dir := t.TempDir()
	path, log := filepath.Join(dir, "c.db"), filepath.Join(dir, "log")
	st := openStore(t, path)
	// Each run logs its start and end; it would run 30 s and ignores TERM.
	def := newDef("@every 2s", "echo start >> "+log+"; trap '' TERM; sleep 30 & wait; echo end >> "+log)
	def.Overlap, def.KillGrace, def.MaxAttempts = spec.OverlapReplace, 300*time.Millisecond, 3
	put(t, st, "job", def, now(t, st).Add(200*time.Millisecond))
	h := start(t, path, "a")
	runs := waitRuns(t, st, "job", 30*time.Second, func(r []backends.Run) bool {
		n := 0
		for _, x := range r {
			if x.Status == backends.RunReplaced {
				n++
			}
		}
		return n >= 2
	})
	h.stop()
	var replaced []backends.Run
	for _, r := range runs {
		if r.Status == backends.RunReplaced {
			replaced = append(replaced, r)
		}
		if r.Attempt != 1 {
			t.Fatalf("a replaced run was retried:\n%s", dump(runs))
		}
	}
	if len(replaced) < 2 || !strings.Contains(replaced[0].Error, "overlap replace") {
		t.Fatalf("want runs recorded replaced by overlap replace; history:\n%s", dump(runs))
	}
	for i := 1; i < len(runs); i++ {
		if prev := runs[i-1]; prev.Status == backends.RunReplaced && !prev.FinishedAt.IsZero() && runs[i].StartedAt.Before(prev.FinishedAt) {
			t.Fatalf("run %d started at %s, before the run it replaced ended at %s:\n%s", i, runs[i].StartedAt, prev.FinishedAt, dump(runs))
		}
	}
	// Only starts: each command was killed, none reached its end.
	for _, l := range lines(t, log) {
		if l != "start" {
			t.Fatalf("log line %q: a replaced command ran to its end", l)
		}
	}
}
