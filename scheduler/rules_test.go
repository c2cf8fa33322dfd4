package scheduler

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// TestEveryTwoSchedulers runs an @every 1s task with two schedulers on two
// handles for about five seconds: every scheduled time runs exactly once.
func TestEveryTwoSchedulers(t *testing.T) {
	dir := t.TempDir()
	path, log := filepath.Join(dir, "c.db"), filepath.Join(dir, "log")
	st := openStore(t, path)
	def := newDef("@every 1s", "echo $COORDD_SCHEDULED_AT $COORDD_ATTEMPT >> "+log)
	def.CatchUp = spec.CatchUpAll
	sched, _ := spec.ParseSchedule(def.Schedule, "UTC")
	put(t, st, "tick", def, sched.Next(now(t, st)))
	a, b := start(t, path, "a"), start(t, path, "b")
	time.Sleep(5 * time.Second)
	a.stop()
	b.stop()
	got := lines(t, log)
	if len(got) < 3 {
		t.Fatalf("only %d runs in 5s: %v", len(got), got)
	}
	seen := map[string]bool{}
	var prev time.Time
	for _, l := range got {
		if seen[l] {
			t.Fatalf("duplicate run %s in %v", l, got)
		}
		seen[l] = true
		f := strings.Split(l, "_")
		at, err := time.Parse(time.RFC3339, f[0])
		if err != nil || !strings.HasSuffix(f[0], "Z") || f[1] != "1" {
			t.Fatalf("bad line %q (%v)", l, err)
		}
		if !prev.IsZero() && at.Sub(prev) != time.Second {
			t.Fatalf("gap or disorder between %v and %v in %v", prev, at, got)
		}
		prev = at
	}
	t.Logf("%d runs, no duplicates, no gaps", len(got))
}

// catchUpFixture stores an @every 1m task whose next_exec is 10
// occurrences in the past and returns them.
func catchUpFixture(t *testing.T, mode string, limit int) (path, log string, times []time.Time) {
	dir := t.TempDir()
	path, log = filepath.Join(dir, "c.db"), filepath.Join(dir, "log")
	st := openStore(t, path)
	def := newDef("@every 1m", "echo $COORDD_SCHEDULED_AT >> "+log)
	def.CatchUp, def.CatchUpLimit = mode, limit
	// Start early in a minute, so that no new time falls due during the test.
	if n := now(t, st); n.Second() >= 40 {
		time.Sleep(n.Truncate(time.Minute).Add(time.Minute + 100*time.Millisecond).Sub(n))
	}
	base := now(t, st).Truncate(time.Minute)
	for i := 9; i >= 0; i-- {
		times = append(times, base.Add(-time.Duration(i)*time.Minute))
	}
	put(t, st, "job", def, times[0])
	return path, log, times
}

func TestCatchUp(t *testing.T) {
	for _, tc := range []struct {
		mode  string
		limit int
		skip  string // reason of the one skip record
		runs  int    // the newest runs
	}{
		{spec.CatchUpAll, 100, "", 10},
		{spec.CatchUpAll, 3, "catch_up_limit: skipped 7", 3},
		{spec.CatchUpOnce, 100, "catch_up once: skipped 9 missed", 1},
		{spec.CatchUpNone, 100, "catch_up none: skipped 9 missed", 1},
	} {
		t.Run(fmt.Sprintf("%s-%d", tc.mode, tc.limit), func(t *testing.T) {
			path, log, times := catchUpFixture(t, tc.mode, tc.limit)
			h := start(t, path, "a")
			want := tc.runs
			if tc.skip != "" {
				want++
			}
			runs := waitRuns(t, h.store, "job", 20*time.Second, func(r []backends.Run) bool { return finished(r) >= want })
			time.Sleep(1500 * time.Millisecond) // nothing more runs
			runs = history(t, h.store, "job")
			if len(runs) != want {
				t.Fatalf("%d runs, want %d:\n%s", len(runs), want, dump(runs))
			}
			var wantLog []string
			for _, at := range times[len(times)-tc.runs:] {
				wantLog = append(wantLog, at.UTC().Format(scheduledAtLayout))
			}
			if got := lines(t, log); strings.Join(got, " ") != strings.Join(wantLog, " ") {
				t.Fatalf("ran %v, want %v in order", got, wantLog)
			}
			if tc.skip != "" {
				if r := runs[0]; r.Status != backends.RunSkipped || r.Error != tc.skip || !r.ScheduledAt.Equal(times[0]) {
					t.Fatalf("skip record %+v, want %q at %v", r, tc.skip, times[0])
				}
			}
			for _, r := range runs[len(runs)-tc.runs:] {
				if r.Status != backends.RunSucceeded {
					t.Fatalf("run %+v not succeeded", r)
				}
			}
			m, _ := h.store.ObserveCrons(t.Context(), []string{"job"})
			if next := times[9].Add(time.Minute); !m["job"].NextExec.Equal(next) {
				t.Fatalf("next_exec %v, want %v", m["job"].NextExec, next)
			}
		})
	}
}

func TestOverlap(t *testing.T) {
	t.Run("forbid", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "c.db")
		st := openStore(t, path)
		put(t, st, "slow", newDef("@every 1s", "sleep 2.5"), now(t, st))
		h := start(t, path, "a")
		runs := waitRuns(t, st, "slow", 15*time.Second, func(r []backends.Run) bool {
			for _, x := range r {
				if x.Status == backends.RunSkipped && x.Error == "overlap: previous run still running" {
					return true
				}
			}
			return false
		})
		_ = runs
		running, err := h.store.Running(t.Context(), "slow")
		if err != nil || len(running) > 1 {
			t.Fatalf("running %d (%v), want at most 1", len(running), err)
		}
	})
	t.Run("allow", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "c.db")
		st := openStore(t, path)
		def := newDef("@every 1s", "sleep 2.5")
		def.Overlap = spec.OverlapAllow
		put(t, st, "slow", def, now(t, st))
		start(t, path, "a")
		deadline := time.Now().Add(15 * time.Second)
		for {
			running, err := st.Running(t.Context(), "slow")
			if err != nil {
				t.Fatal(err)
			}
			if len(running) >= 2 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("never two runs at once with overlap allow")
			}
			time.Sleep(50 * time.Millisecond)
		}
		for _, r := range history(t, st, "slow") {
			// A catch-up skip can happen when the scheduler starts late
			// under load; only an overlap skip is wrong here.
			if r.Status == backends.RunSkipped && strings.HasPrefix(r.Error, "overlap") {
				t.Fatalf("skipped for overlap with overlap allow: %+v", r)
			}
		}
	})
}

func TestRetries(t *testing.T) {
	dir := t.TempDir()
	path, count, attempts := filepath.Join(dir, "c.db"), filepath.Join(dir, "count"), filepath.Join(dir, "attempts")
	st := openStore(t, path)
	def := newDef("@every 1h", fmt.Sprintf(`n=$(($(cat %[1]s 2>/dev/null || echo 0)+1)); echo $n > %[1]s; echo $COORDD_ATTEMPT >> %[2]s; [ $n -ge 3 ]`, count, attempts))
	def.MaxAttempts = 3
	at := now(t, st).Truncate(time.Hour)
	put(t, st, "flaky", def, at)
	start(t, path, "a")
	runs := waitRuns(t, st, "flaky", 20*time.Second, func(r []backends.Run) bool {
		return len(r) > 0 && r[len(r)-1].Status == backends.RunSucceeded
	})
	if len(runs) != 3 || runs[0].Status != backends.RunFailed || runs[1].Status != backends.RunFailed {
		t.Fatalf("history:\n%s", dump(runs))
	}
	for i, r := range runs {
		if r.Attempt != i+1 || !r.ScheduledAt.Equal(at) || r.ExitCode != map[bool]int{true: 0, false: 1}[i == 2] {
			t.Fatalf("run %d: %+v", i, r)
		}
	}
	if got := strings.Join(lines(t, attempts), " "); got != "1 2 3" {
		t.Fatalf("COORDD_ATTEMPT %q, want 1 2 3", got)
	}
}

// TestRetrySurvivesNewScheduler: attempt 1 fails under one scheduler,
// which then stops; a new one runs attempt 2 from PendingRetries.
func TestRetrySurvivesNewScheduler(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.db")
	st := openStore(t, path)
	def := newDef("@every 1h", `[ "$COORDD_ATTEMPT" -ge 2 ]`)
	def.MaxAttempts, def.RetryBackoff = 2, 2*time.Second
	put(t, st, "flaky", def, now(t, st).Truncate(time.Hour))
	a := start(t, path, "a")
	waitRuns(t, st, "flaky", 10*time.Second, func(r []backends.Run) bool { return finished(r) == 1 })
	a.stop()
	if runs := history(t, st, "flaky"); len(runs) != 1 || runs[0].Status != backends.RunFailed {
		t.Fatalf("after the first scheduler:\n%s", dump(runs))
	}
	start(t, path, "b")
	runs := waitRuns(t, st, "flaky", 15*time.Second, func(r []backends.Run) bool { return finished(r) == 2 })
	if runs[1].Attempt != 2 || runs[1].Status != backends.RunSucceeded || runs[1].Host != "b" {
		t.Fatalf("history:\n%s", dump(runs))
	}
}

// TestHostLoss claims an occurrence by hand with a 1s run lease and never
// extends it, as a host that died would.
func TestHostLoss(t *testing.T) {
	for _, mode := range []string{spec.HostLossRetry, spec.HostLossFail} {
		t.Run(mode, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c.db")
			st := openStore(t, path)
			def := newDef("@every 1h", "true")
			def.MaxAttempts, def.OnHostLoss = 2, mode
			at := now(t, st).Truncate(time.Hour)
			put(t, st, "job", def, at)
			if _, err := st.ClaimOccurrence(t.Context(), backends.ClaimRequest{Task: "job", ScheduledAt: at, Next: at.Add(time.Hour),
				Attempt: 1, Owner: "dead", Host: "dead-host", Lease: time.Second}); err != nil {
				t.Fatal(err)
			}
			start(t, path, "a")
			runs := waitRuns(t, st, "job", 15*time.Second, func(r []backends.Run) bool {
				return len(r) > 0 && r[0].Status == backends.RunLost
			})
			if mode == spec.HostLossRetry {
				runs = waitRuns(t, st, "job", 10*time.Second, func(r []backends.Run) bool { return finished(r) == 2 })
				if runs[1].Attempt != 2 || runs[1].Status != backends.RunSucceeded || !runs[1].ScheduledAt.Equal(at) {
					t.Fatalf("history:\n%s", dump(runs))
				}
				return
			}
			time.Sleep(2 * time.Second)
			if runs = history(t, st, "job"); len(runs) != 1 {
				t.Fatalf("lost attempt retried with on_host_loss fail:\n%s", dump(runs))
			}
		})
	}
}

// TestOverlapBlockedByDeadRun: a run of a host that died (claimed by hand
// with a 2s run lease, never extended) holds back an @every 1s task with
// overlap forbid. The scheduler reaps it when its lease expires, not at its
// next sweep (a minute away here), and the task runs again.
func TestOverlapBlockedByDeadRun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.db")
	st := openStore(t, path)
	at := now(t, st).Truncate(time.Second)
	put(t, st, "job", newDef("@every 1s", "true"), at)
	if _, err := st.ClaimOccurrence(t.Context(), backends.ClaimRequest{Task: "job", ScheduledAt: at, Next: at.Add(time.Second),
		Attempt: 1, Owner: "dead", Host: "dead-host", Lease: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	startWith(t, path, "a", time.Minute, time.Minute)
	waitRuns(t, st, "job", 15*time.Second, func(r []backends.Run) bool {
		lost, ran := false, false
		for _, x := range r {
			lost = lost || x.Host == "dead-host" && x.Status == backends.RunLost
			ran = ran || x.Host == "a" && x.Status == backends.RunSucceeded
		}
		return lost && ran
	})
}

// TestFailedRunLoggedAtWarn: a run that fails is logged at WARN, one that
// succeeds at INFO, so that a log filtered at WARN shows every failure.
func TestFailedRunLoggedAtWarn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.db")
	st := openStore(t, path)
	put(t, st, "fails", newDef("@every 1h", "exit 3"), now(t, st).Truncate(time.Hour))
	put(t, st, "works", newDef("@every 1h", "true"), now(t, st).Truncate(time.Hour))
	var buf syncBuffer
	startLogging(t, path, "a", time.Second, time.Second, hclog.New(&hclog.LoggerOptions{Name: "a", Level: hclog.Info, Output: &buf}))
	waitRuns(t, st, "fails", 15*time.Second, func(r []backends.Run) bool { return finished(r) == 1 })
	waitRuns(t, st, "works", 15*time.Second, func(r []backends.Run) bool { return finished(r) == 1 })
	var failed, succeeded string
	for deadline := time.Now().Add(10 * time.Second); failed == "" || succeeded == ""; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no finished line for both runs in the log:\n%s", buf.String())
		}
		for _, l := range strings.Split(buf.String(), "\n") {
			switch {
			case strings.Contains(l, "finished:") && strings.Contains(l, "task=fails"):
				failed = l
			case strings.Contains(l, "finished:") && strings.Contains(l, "task=works"):
				succeeded = l
			}
		}
	}
	if !strings.Contains(failed, "[WARN]") || !strings.Contains(failed, "status=failed") {
		t.Errorf("the failed run: %s", failed)
	}
	if !strings.Contains(succeeded, "[INFO]") {
		t.Errorf("the run that succeeded: %s", succeeded)
	}
}

// syncBuffer is a bytes.Buffer safe for the logger's writes and the
// test's reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestTimeout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.db")
	st := openStore(t, path)
	def := newDef("@every 1h", "sleep 30")
	def.Timeout, def.KillGrace = 500*time.Millisecond, 200*time.Millisecond
	put(t, st, "slow", def, now(t, st).Truncate(time.Hour))
	start(t, path, "a")
	runs := waitRuns(t, st, "slow", 15*time.Second, func(r []backends.Run) bool { return finished(r) == 1 })
	if runs[0].Status != backends.RunTimedOut {
		t.Fatalf("history:\n%s", dump(runs))
	}
}

// TestSemaphore: two tasks share a limit-1 semaphore; a witness directory
// (mkdir is atomic) shows they never run at once.
func TestSemaphore(t *testing.T) {
	dir := t.TempDir()
	path, lock, bad, done := filepath.Join(dir, "c.db"), filepath.Join(dir, "lock"), filepath.Join(dir, "bad"), filepath.Join(dir, "done")
	st := openStore(t, path)
	if err := st.PutSemaphore(t.Context(), backends.SemaphoreConfig{Name: "one", Limit: 1, Lease: 5 * time.Second, Mode: spec.ModeLease, MaxWaiting: -1}); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`if mkdir %[1]s 2>/dev/null; then sleep 0.4; rmdir %[1]s; echo $COORDD_TASK >> %[3]s; else echo $COORDD_TASK >> %[2]s; fi`, lock, bad, done)
	for _, n := range []string{"x", "y"} {
		def := newDef("@every 1s", script)
		def.Semaphore = "one"
		put(t, st, n, def, now(t, st))
	}
	h := start(t, path, "a")
	// At least 4 s, and until both tasks ran (a loaded machine may need
	// longer: a run that waits too long for the slot loses its run lease).
	deadline := time.Now().Add(30 * time.Second)
	time.Sleep(4 * time.Second)
	for time.Now().Before(deadline) {
		got := strings.Join(lines(t, done), " ")
		if strings.Contains(got, "x") && strings.Contains(got, "y") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	h.stop()
	if b, _ := os.ReadFile(bad); len(b) > 0 {
		t.Fatalf("ran at once: %s", b)
	}
	got := strings.Join(lines(t, done), " ")
	if !strings.Contains(got, "x") || !strings.Contains(got, "y") {
		t.Fatalf("runs: %q, want both tasks", got)
	}
	t.Logf("runs: %s", got)
}

// TestJitterRunsAtTheTasksOffset: a task with a jitter runs at each
// scheduled time plus the offset its name gives it, as the scheduler reads
// the applied definition, and COORDD_SCHEDULED_AT says so.
func TestJitterRunsAtTheTasksOffset(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.db")
	st := openStore(t, path)
	def := newDef("@every 3s", "true")
	def.Name, def.Jitter = "spread", 2*time.Second
	off := spec.JitterOffset("spread", def.Jitter)
	sched, err := spec.TaskSchedule(&def)
	if err != nil {
		t.Fatal(err)
	}
	put(t, st, "spread", def, sched.Next(now(t, st)))
	start(t, path, "a")
	runs := waitRuns(t, st, "spread", 20*time.Second, func(r []backends.Run) bool { return finished(r) >= 2 })
	for _, r := range runs {
		if got := time.Duration(r.ScheduledAt.UnixNano()) % (3 * time.Second); got != off {
			t.Errorf("run scheduled at %s: %s past its 3s grid, want the task's offset %s", r.ScheduledAt.Format(time.RFC3339Nano), got, off)
		}
	}
}

// TestStartingDeadlineMissesLateTimes: under catch_up all, the times more
// than starting_deadline late when the scheduler comes to them are
// recorded missed (one skip) instead of starting late; the ones still in
// time run.
func TestStartingDeadlineMissesLateTimes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.db")
	st := openStore(t, path)
	def := newDef("@every 1s", "true")
	def.CatchUp, def.Overlap, def.StartingDeadline = spec.CatchUpAll, spec.OverlapAllow, 3*time.Second
	put(t, st, "late", def, now(t, st).Truncate(time.Second).Add(-20*time.Second))
	start(t, path, "a")
	runs := waitRuns(t, st, "late", 15*time.Second, func(r []backends.Run) bool { return finished(r) >= 3 })
	missed := 0
	for _, r := range runs {
		switch {
		case r.Status == backends.RunSkipped && strings.HasPrefix(r.Error, "missed: starting_deadline 3s passed"):
			missed++
		case r.Status == backends.RunSkipped:
			t.Errorf("skipped for another reason: %q", r.Error)
		case !r.StartedAt.IsZero() && r.StartedAt.Sub(r.ScheduledAt) > 4*time.Second:
			t.Errorf("a run started %s after its time, past the 3s deadline", r.StartedAt.Sub(r.ScheduledAt))
		}
	}
	if missed != 1 {
		t.Errorf("%d missed records, want one for the times 20s late:\n%s", missed, dump(runs))
	}
}
