package main

// A worker whose command cannot start must not spend the attempts of the
// jobs it claims (retrying `queue work q -- /no/such` would send every job
// it claims to the dead set).

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// wantQueueUntouched checks that queue q holds its jobs as pushed: ready,
// none in flight, none dead.
func wantQueueUntouched(t *testing.T, c *cli, p string, ready int64, what string) {
	t.Helper()
	if st := queueStatsOf(t, c, p); st.Ready != ready || st.InFlight != 0 || st.Dead != 0 {
		t.Fatalf("%s: stats %+v, want %d ready, none in flight or dead", what, st, ready)
	}
}

func TestQueueWorkCommandCannotStart(t *testing.T) {
	c := newCLI(t)
	// max_attempts 1: one counted attempt would send a job to the dead set.
	p := queueFixture(t, c, "{partitions: 1, visibility_timeout: 10s, max_attempts: 1, retry_backoff: 0s}")
	for _, pl := range []string{"a", "b", "c"} {
		if code, _, errs := c.run("", false, "queue", "push", "q", "-f", p, pl); code != 0 {
			t.Fatalf("push: %s", errs)
		}
	}
	dir := t.TempDir()
	noX := filepath.Join(dir, "nox")
	if err := os.WriteFile(noX, []byte("#!/bin/sh\nexit 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Found and executable, so the check before claiming passes; the exec
	// itself fails (ENOENT), as it would if the file were removed after
	// the check.
	badInterp := filepath.Join(dir, "badinterp")
	if err := os.WriteFile(badInterp, []byte("#!/no/such/interpreter\n"), 0o755); err != nil {
		t.Fatal(err)
	}

	// Refused before anything is claimed.
	for _, tc := range []struct {
		argv []string
		code int
	}{
		{[]string{"/no/such"}, 127},
		{[]string{"coordd-no-such-command-xyz", "arg"}, 127},
		{[]string{noX}, 126},
		{[]string{dir}, 126},
	} {
		args := append([]string{"queue", "work", "q", "-f", p, "--drain", "--"}, tc.argv...)
		code, _, errs := c.run("", false, args...)
		if code != tc.code || !strings.Contains(errs, "cannot run the command") || !strings.Contains(errs, "no job was claimed") {
			t.Fatalf("work -- %v: exit %d, want %d, with a clear message:\n%s", tc.argv, code, tc.code, errs)
		}
		wantQueueUntouched(t, c, p, 3, "after work -- "+tc.argv[0])
	}

	// A start that fails at run time: the claimed jobs go back, their
	// attempts not counted, and the worker stops.
	code, _, errs := c.run("", false, "queue", "work", "q", "-f", p, "--concurrency", "2", "--drain", "--", badInterp)
	if code != 127 || !strings.Contains(errs, "the command cannot start") || !strings.Contains(errs, "returned to the queue") {
		t.Fatalf("work -- %s: exit %d, want 127 with a clear message:\n%s", badInterp, code, errs)
	}
	wantQueueUntouched(t, c, p, 3, "after a failed start")

	// Every job still runs as its first attempt.
	code, out, errs := c.run("", false, "queue", "work", "q", "-f", p, "--drain", "--", "sh", "-c", `cat; echo " $COORDD_ATTEMPT"`)
	if code != 0 || strings.Count(out, " 1\n") != 3 {
		t.Fatalf("work after the failures: exit %d, want every job at attempt 1:\n%s\n%s", code, out, errs)
	}

	// A command that runs and exits 127 itself is a failed attempt, as any
	// other exit status.
	if code, _, errs := c.run("", false, "queue", "push", "q", "-f", p, "d"); code != 0 {
		t.Fatalf("push: %s", errs)
	}
	if code, _, errs := c.run("", false, "queue", "work", "q", "-f", p, "--drain", "--", "sh", "-c", "exit 127"); code != 0 {
		t.Fatalf("work -- sh -c 'exit 127': exit %d, want 0 (--drain)\n%s", code, errs)
	}
	if st := queueStatsOf(t, c, p); st.Ready != 0 || st.Dead != 1 {
		t.Fatalf("after sh -c 'exit 127': stats %+v, want the job dead after its one attempt", st)
	}
	if code, out, _ := c.run("", false, "queue", "dead", "q", "-f", p); code != 0 || !strings.Contains(out, "exit status 127") {
		t.Fatalf("queue dead: %d\n%s", code, out)
	}
}
