package scheduler

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/sqlite"
	"github.com/coordd/coordd/spec"
)

// afterDef is a task that runs shell after the tasks named.
func afterDef(shell string, after ...string) spec.CronTask {
	d := newDef("", shell)
	d.After = after
	return d
}

// withAfter makes a test host trigger the tasks named, keeping its
// triggers in ns.
func withAfter(ns backends.Notices, names ...string) func(*Config) {
	return func(c *Config) {
		c.After = func(string) []string { return names }
		c.Notices = ns
	}
}

// successes lists the finishing times of a task's succeeded runs.
func successes(runs []backends.Run) []time.Time {
	var out []time.Time
	for _, r := range runs {
		if r.Status == backends.RunSucceeded {
			out = append(out, r.FinishedAt)
		}
	}
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	return out
}

// wantTriggers is the rule the scheduler follows, written out: from
// since, each trigger is the latest of every parent's earliest success
// after the previous trigger.
func wantTriggers(since time.Time, parents ...[]time.Time) []time.Time {
	var out []time.Time
	floor := since
	for {
		var at time.Time
		for _, p := range parents {
			i := slices.IndexFunc(p, func(f time.Time) bool { return f.After(floor) })
			if i < 0 {
				return out
			}
			at = later(at, p[i])
		}
		out = append(out, at)
		floor = at
	}
}

// declaredAt waits until a leader has recorded when it first saw task's
// after list, and returns that time.
func declaredAt(t *testing.T, ns backends.Notices, task string, after ...string) time.Time {
	t.Helper()
	id := afterDeclared(task, after)
	deadline := time.Now().Add(20 * time.Second)
	for {
		m, err := ns.NoticesMarked(t.Context(), []string{id})
		if err != nil {
			t.Fatal(err)
		}
		if at, ok := m[id]; ok {
			return at
		}
		if time.Now().After(deadline) {
			t.Fatalf("no leader recorded when it first saw %s's after list", task)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pauseTask stops a task's schedule by pausing its definition.
func pauseTask(t *testing.T, s *sqlite.Store, name string, def spec.CronTask) {
	t.Helper()
	def.Paused = true
	raw, err := json.Marshal(def)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutCron(t.Context(), name, raw, time.Time{}, false); err != nil {
		t.Fatal(err)
	}
}

// settledTriggers waits until the runs of task match want (every run
// finished), then checks that each wanted time ran exactly once.
func settledTriggers(t *testing.T, s *sqlite.Store, task string, want func() []time.Time) {
	t.Helper()
	var w []time.Time
	runs := waitRuns(t, s, task, 30*time.Second, func(r []backends.Run) bool {
		w = want()
		return len(r) >= len(w) && finished(r) == len(r)
	})
	time.Sleep(2500 * time.Millisecond) // two more sweeps: nothing else is armed
	runs = history(t, s, task)
	var got []time.Time
	for _, r := range runs {
		if r.Attempt != 1 || r.Status != backends.RunSucceeded {
			t.Fatalf("%s: a run that is not one succeeded first attempt:\n%s", task, dump(runs))
		}
		got = append(got, r.ScheduledAt)
	}
	if !slices.EqualFunc(got, w, time.Time.Equal) {
		t.Fatalf("%s ran at %v, want once at each of %v\n%s", task, got, w, dump(runs))
	}
}

// TestAfterRunsOncePerParentSuccess: a task after one parent runs once per
// success of the parent that finished after the task was first seen,
// scheduled at that success's end; failed runs of the parent trigger
// nothing; the leader stopping halfway changes none of it.
func TestAfterRunsOncePerParentSuccess(t *testing.T) {
	path := t.TempDir() + "/c.db"
	st := openStore(t, path)
	ns := openStore(t, path)
	put(t, st, "report", afterDef("echo report $COORDD_SCHEDULED_AT", "import"), time.Time{})
	a := startLogging(t, path, "a", time.Second, time.Second, logger(t, "a"), withAfter(ns, "report"))
	since := declaredAt(t, ns, "report", "import")
	startLogging(t, path, "b", time.Second, time.Second, logger(t, "b"), withAfter(ns, "report"))

	// Seconds ending in 0, 3, 6 or 9 fail.
	imp := newDef("@every 1s", `case "$COORDD_SCHEDULED_AT" in *[0369].000000Z) exit 1;; esac`)
	put(t, st, "import", imp, now(t, st).Add(300*time.Millisecond))
	waitRuns(t, st, "import", 30*time.Second, func(r []backends.Run) bool { return finished(r) >= 4 })
	a.stop() // b takes over
	runs := waitRuns(t, st, "import", 60*time.Second, func(r []backends.Run) bool { return finished(r) >= 10 })
	pauseTask(t, st, "import", imp)
	if len(successes(runs)) == 0 || len(successes(runs)) == finished(runs) {
		t.Fatalf("import should both fail and succeed:\n%s", dump(runs))
	}
	settledTriggers(t, st, "report", func() []time.Time {
		return wantTriggers(since, successes(history(t, st, "import")))
	})
}

// TestAfterWaitsForEveryParent: a task after two parents runs once each
// time both have succeeded since its last trigger, at the later of their
// first successes; the faster parent's extra successes trigger nothing
// more.
func TestAfterWaitsForEveryParent(t *testing.T) {
	path := t.TempDir() + "/c.db"
	st := openStore(t, path)
	ns := openStore(t, path)
	put(t, st, "publish", afterDef("true", "fast", "slow"), time.Time{})
	startLogging(t, path, "a", time.Second, time.Second, logger(t, "a"), withAfter(ns, "publish"))
	since := declaredAt(t, ns, "publish", "fast", "slow")
	fast, slow := newDef("@every 1s", "true"), newDef("@every 3s", "true")
	at := now(t, st).Add(300 * time.Millisecond)
	put(t, st, "fast", fast, at)
	put(t, st, "slow", slow, at)
	waitRuns(t, st, "slow", 60*time.Second, func(r []backends.Run) bool { return finished(r) >= 4 })
	pauseTask(t, st, "slow", slow)
	pauseTask(t, st, "fast", fast)
	settledTriggers(t, st, "publish", func() []time.Time {
		return wantTriggers(since, successes(history(t, st, "fast")), successes(history(t, st, "slow")))
	})
	if n := len(history(t, st, "publish")); n >= len(successes(history(t, st, "fast"))) {
		t.Fatalf("publish ran %d times: as often as its faster parent", n)
	}
}

// succeed records one succeeded manual run of task and returns when it
// finished, a few milliseconds after anything before it (the embedded
// store keeps times to the millisecond).
func succeed(t *testing.T, s *sqlite.Store, task string) time.Time {
	t.Helper()
	time.Sleep(5 * time.Millisecond)
	ctx := t.Context()
	occ, err := s.ClaimOccurrence(ctx, backends.ClaimRequest{Task: task, Attempt: 1, Owner: newOwner(), Host: "h", Lease: time.Minute, Manual: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := backends.FinishOne(ctx, s, occ, backends.RunResult{Status: backends.RunSucceeded}); err != nil {
		t.Fatal(err)
	}
	runs := history(t, s, task)
	return runs[len(runs)-1].FinishedAt
}

// nextExec reads a task's next_exec.
func nextExec(t *testing.T, s *sqlite.Store, task string) time.Time {
	t.Helper()
	m, err := s.ObserveCrons(t.Context(), []string{task})
	if err != nil || m[task] == nil {
		t.Fatalf("observe %s: %v", task, err)
	}
	return m[task].NextExec
}

// TestAfterArmsATimeOnce: a time recorded as armed is never armed again,
// even when the task's history no longer shows its run; a time armed
// again after its run (a leader that read the history before the run)
// is cleared instead of being claimed.
func TestAfterArmsATimeOnce(t *testing.T) {
	path := t.TempDir() + "/c.db"
	st := openStore(t, path)
	ctx := t.Context()
	s := New(Config{Host: "h", Notices: st, After: func(string) []string { return []string{"b"} }})
	cb := &cronBackend{Backend: st, Crons: st}
	def := afterDef("true", "a")
	put(t, st, "b", def, time.Time{})
	put(t, st, "a", newDef("@yearly", "true"), time.Time{})
	if _, err := st.MarkNotice(ctx, afterDeclared("b", []string{"a"})); err != nil {
		t.Fatal(err)
	}
	f1 := succeed(t, st, "a")
	f2 := succeed(t, st, "a")
	raw, _ := json.Marshal(def)
	tb, err := parseTask("b", raw)
	if err != nil {
		t.Fatal(err)
	}

	// f1 was armed once already (its run trimmed away): f2 comes next.
	if _, err := st.MarkNotice(ctx, afterArmed("b", f1)); err != nil {
		t.Fatal(err)
	}
	if err := s.triggerOne(ctx, cb, tb, time.Time{}, nil); err != nil {
		t.Fatal(err)
	}
	if got := nextExec(t, st, "b"); !got.Equal(f2) {
		t.Fatalf("armed at %v, want the second success %v (the first was armed before)", got, f2)
	}
	// Armed, it waits for its claim: nothing else is armed.
	if err := s.triggerOne(ctx, cb, tb, f2, nil); err != nil {
		t.Fatal(err)
	}
	if got := nextExec(t, st, "b"); !got.Equal(f2) {
		t.Fatalf("an armed task moved to %v", got)
	}

	// The claim runs f2; a stale leader arms f2 again.
	occ, err := st.ClaimOccurrence(ctx, backends.ClaimRequest{Task: "b", ScheduledAt: f2, Attempt: 1, Owner: newOwner(), Host: "h", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := backends.FinishOne(ctx, st, occ, backends.RunResult{Status: backends.RunSucceeded}); err != nil {
		t.Fatal(err)
	}
	if set, err := st.SetNextExec(ctx, "b", time.Time{}, f2); err != nil || !set {
		t.Fatalf("stale arm: %v %v", set, err)
	}
	if err := s.triggerOne(ctx, cb, tb, f2, nil); err != nil {
		t.Fatal(err)
	}
	if got := nextExec(t, st, "b"); !got.IsZero() {
		t.Fatalf("a time the task already ran stays armed at %v", got)
	}
	if err := s.triggerOne(ctx, cb, tb, time.Time{}, nil); err != nil {
		t.Fatal(err)
	}
	if got := nextExec(t, st, "b"); !got.IsZero() {
		t.Fatalf("armed at %v with no success since the last run", got)
	}
	// A new success triggers again.
	f3 := succeed(t, st, "a")
	if err := s.triggerOne(ctx, cb, tb, time.Time{}, nil); err != nil {
		t.Fatal(err)
	}
	if got := nextExec(t, st, "b"); !got.Equal(f3) {
		t.Fatalf("armed at %v, want the new success %v", got, f3)
	}
}
