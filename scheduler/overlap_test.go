package scheduler

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// TestOverlapDecision: under overlap forbid, with only runs this scheduler
// supervises live, a time is skipped once a run has been running for as
// long as the time is after that run's own scheduled time (it would have
// overlapped it even on time); a later time waits, to be decided again
// when that point comes.
func TestOverlapDecision(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	secs := func(from, to int) []time.Time { // every second in [from, to]
		var out []time.Time
		for s := from; s <= to; s++ {
			out = append(out, at(s*1000))
		}
		return out
	}
	run := func(sched, started int) backends.Occurrence {
		return backends.Occurrence{ScheduledAt: at(sched), StartedAt: at(started)}
	}
	for _, c := range []struct {
		name    string
		running []backends.Occurrence
		times   []time.Time
		now     int // ms, as the runs' times
		skipped int
		wake    time.Duration // zero: none
	}{
		// Started on time (10 ms late), running for 1.2 s: the next time
		// (1 s after its own) is overlapped.
		{"on time, longer than the period", []backends.Occurrence{run(0, 10)}, secs(1, 1), 1210, 1, 0},
		// The same run looked at as the next time falls due: 5 ms more
		// and it is decided.
		{"on time, just due", []backends.Occurrence{run(0, 10)}, secs(1, 1), 1005, 0, 5*time.Millisecond + reapMargin},
		// Three times due while a 3.5 s run goes on: the first two are
		// overlapped, the third is decided 0.5 s later.
		{"on time, several due", []backends.Occurrence{run(0, 0)}, secs(1, 3), 2500, 2, 500*time.Millisecond + reapMargin},
		// A catch-up run 5 s late, 0.5 s into its run: the next time falls
		// due while it runs, and waits for it (it has run less than the 1 s
		// between their scheduled times).
		{"late run", []backends.Occurrence{run(0, 5000)}, secs(1, 5), 5500, 0, 500*time.Millisecond + reapMargin},
		// A retry of a time 40 s back, started 1 s ago: the times due now
		// wait for it (the first would be overlapped 38 s from now).
		{"retry of an old time", []backends.Occurrence{run(0, 39000)}, secs(39, 40), 40000, 0, 38*time.Second + reapMargin},
		// A manual run is scheduled at its start: every time that falls due
		// while it runs is skipped.
		{"manual run", []backends.Occurrence{run(10300, 10300)}, secs(11, 11), 11000, 1, 0},
		// Of two runs, the one that overlaps decides.
		{"two runs", []backends.Occurrence{run(0, 5000), run(10300, 10300)}, secs(6, 11), 11000, 6, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			skipped, wake := overlapDecision(c.running, c.times, at(c.now))
			if skipped != c.skipped || wake != c.wake {
				t.Errorf("skipped %d, wake %v; want %d, %v", skipped, wake, c.skipped, c.wake)
			}
		})
	}
}

// otherRun claims times[0] of task on st as another process would (a
// daemon on another host, or `coordd cron run`), with a run lease of
// lease, and returns it.
func otherRun(t *testing.T, st backends.Crons, task string, at, next time.Time, lease time.Duration) backends.Occurrence {
	t.Helper()
	occ, err := st.ClaimOccurrence(t.Context(), backends.ClaimRequest{Task: task, ScheduledAt: at, Next: next,
		Attempt: 1, Owner: "other", Host: "other-host", Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	return occ
}

// startEarlyInSecond waits, if needed, until the backend's clock is early in
// a second and returns the start of that second.
func startEarlyInSecond(t *testing.T, st backends.Backend) time.Time {
	t.Helper()
	n, err := st.Now(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if n.Sub(n.Truncate(time.Second)) > 300*time.Millisecond {
		time.Sleep(n.Truncate(time.Second).Add(time.Second + 10*time.Millisecond).Sub(n))
		if n, err = st.Now(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	return n.Truncate(time.Second)
}

// ranInOrder checks that the log starts with every second from first to
// last, in order, once each.
func ranInOrder(t *testing.T, log []string, first, last time.Time) {
	t.Helper()
	var want []string
	for at := first; !at.After(last); at = at.Add(time.Second) {
		want = append(want, at.UTC().Format(scheduledAtLayout))
	}
	if len(log) < len(want) || strings.Join(log[:len(want)], " ") != strings.Join(want, " ") {
		t.Fatalf("ran %v, want %v first, in order", log, want)
	}
}

// TestDueTimesWaitForRunOfAnotherProcess: under overlap forbid (the
// default), a live run that this scheduler does not supervise (its host
// may have died, frozen or been cut off, or it is a `cron run` elsewhere)
// is not known to be running: the times that fall due meanwhile are not
// skipped for overlap but wait, next_exec unmoved, until the run ends or
// its lease runs out and it is reaped; then catch_up decides, as after a
// downtime.
func TestDueTimesWaitForRunOfAnotherProcess(t *testing.T) {
	// A host that died mid-run: its run is never renewed and is reaped
	// once its 2 s lease ran out, then runs again (on_host_loss retry,
	// no backoff here). With catch_up all every time runs, in order, after
	// it.
	t.Run("dead host, catch_up all", func(t *testing.T) {
		dir := t.TempDir()
		path, log := filepath.Join(dir, "c.db"), filepath.Join(dir, "log")
		st := openStore(t, path)
		def := newDef("@every 1s", "echo $COORDD_SCHEDULED_AT >> "+log)
		def.CatchUp = spec.CatchUpAll
		at := startEarlyInSecond(t, st)
		put(t, st, "job", def, at)
		otherRun(t, st, "job", at, at.Add(time.Second), 2*time.Second)
		h := start(t, path, "a")
		last := at.Add(6 * time.Second)
		runs := waitRuns(t, st, "job", 30*time.Second, func(r []backends.Run) bool {
			for _, x := range r {
				if x.ScheduledAt.Equal(last) && x.Status != backends.RunRunning {
					return true
				}
			}
			return false
		})
		h.stop()
		for _, r := range runs {
			if r.Status == backends.RunSkipped {
				t.Fatalf("a time was skipped:\n%s", dump(history(t, st, "job")))
			}
		}
		if runs[0].Host != "other-host" || runs[0].Status != backends.RunLost {
			t.Fatalf("the dead host's run is not lost:\n%s", dump(runs))
		}
		ranInOrder(t, lines(t, log), at, last)
	})
	// A run of another process that is alive: renewed, then ended. The
	// times due meanwhile wait for its end, then follow catch_up.
	for _, tc := range []struct {
		mode string
		skip string // the prefix of the one skip record's reason
	}{
		{spec.CatchUpAll, ""},
		{spec.CatchUpOnce, "catch_up once: skipped "},
		{spec.CatchUpNone, "catch_up none: skipped "},
	} {
		t.Run("live run, catch_up "+tc.mode, func(t *testing.T) {
			dir := t.TempDir()
			path, log := filepath.Join(dir, "c.db"), filepath.Join(dir, "log")
			st := openStore(t, path)
			other := openStore(t, path)
			def := newDef("@every 1s", "echo $COORDD_SCHEDULED_AT >> "+log)
			def.CatchUp = tc.mode
			at := startEarlyInSecond(t, st)
			put(t, st, "job", def, at)
			occ := otherRun(t, other, "job", at, at.Add(time.Second), 5*time.Second)
			h := start(t, path, "a")
			// It renews its lease for about 3.5 s, then records its end.
			for end := time.Now().Add(3500 * time.Millisecond); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
				if _, err := backends.ExtendOne(t.Context(), other, occ, 5*time.Second); err != nil {
					t.Fatalf("renewing the other run: %v", err)
				}
			}
			ended, err := other.Now(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if err := backends.FinishOne(t.Context(), other, occ, backends.RunResult{Status: backends.RunSucceeded}); err != nil {
				t.Fatal(err)
			}
			// The first time due after the end has run.
			last := ended.Truncate(time.Second).Add(2 * time.Second)
			runs := waitRuns(t, st, "job", 30*time.Second, func(r []backends.Run) bool {
				for _, x := range r {
					if x.ScheduledAt.Equal(last) && x.Status != backends.RunRunning {
						return true
					}
				}
				return false
			})
			h.stop()
			var skips []backends.Run
			for _, r := range runs {
				if r.Status == backends.RunSkipped {
					skips = append(skips, r)
				}
			}
			got := lines(t, log)
			switch {
			case tc.skip == "":
				if len(skips) > 0 {
					t.Fatalf("a time was skipped:\n%s", dump(runs))
				}
				ranInOrder(t, got, at.Add(time.Second), last)
			case len(skips) != 1 || !strings.HasPrefix(skips[0].Error, tc.skip) || !skips[0].ScheduledAt.Equal(at.Add(time.Second)):
				t.Fatalf("want one skip record at %v, %q...; history:\n%s", at.Add(time.Second), tc.skip, dump(runs))
			default:
				// The times the skip record covers did not run; the latest
				// due at the end and every one after it did.
				var n int
				if _, err := fmt.Sscan(strings.TrimPrefix(skips[0].Error, tc.skip), &n); err != nil {
					t.Fatalf("skip reason %q: %v", skips[0].Error, err)
				}
				ranInOrder(t, got, at.Add(time.Duration(n+1)*time.Second), last)
			}
		})
	}
}

// TestLateRunOfItsOwnDoesNotSkipNextTime: a retry of a lost run (of a time
// long past) that this scheduler runs is known to run, but it started late
// by design: the next time, due while it runs, waits for it and runs
// after it instead of being skipped for overlap.
func TestLateRunOfItsOwnDoesNotSkipNextTime(t *testing.T) {
	dir := t.TempDir()
	path, log := filepath.Join(dir, "c.db"), filepath.Join(dir, "log")
	st := openStore(t, path)
	def := newDef("@every 1h", "echo $COORDD_SCHEDULED_AT $COORDD_ATTEMPT >> "+log+"; [ $COORDD_ATTEMPT = 1 ] || sleep 3")
	def.CatchUp = spec.CatchUpAll
	n := now(t, st)
	lost := n.Add(-10 * time.Second)
	next := n.Add(2 * time.Second) // due while the retry runs
	put(t, st, "job", def, lost)
	otherRun(t, st, "job", lost, next, time.Millisecond)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		exp, err := st.ExpiredOccurrences(t.Context(), 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(exp) == 1 {
			if err := st.ReapOccurrence(t.Context(), exp[0]); err != nil {
				t.Fatal(err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the lost run never expired")
		}
	}
	h := start(t, path, "a")
	runs := waitRuns(t, st, "job", 30*time.Second, func(r []backends.Run) bool { return finished(r) == 3 })
	h.stop()
	if len(runs) != 3 || runs[1].Attempt != 2 || runs[1].Status != backends.RunSucceeded ||
		!runs[2].ScheduledAt.Equal(next) || runs[2].Status != backends.RunSucceeded {
		t.Fatalf("want the lost run, its retry, then the next time run; history:\n%s", dump(runs))
	}
	want := lost.UTC().Format(scheduledAtLayout) + "_2 " + next.UTC().Format(scheduledAtLayout) + "_1"
	if got := strings.Join(lines(t, log), " "); got != want {
		t.Fatalf("ran %q, want %q", got, want)
	}
}
