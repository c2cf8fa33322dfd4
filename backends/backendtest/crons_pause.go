package backendtest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
)

// pausedDef is cronDef(i) with paused: true, as the spec's paused field
// stores it.
func pausedDef(i int) json.RawMessage {
	d := string(cronDef(i))
	return json.RawMessage(strings.TrimSuffix(d, "}") + `,"paused":true}`)
}

// pauseState observes task and fails when it is absent.
func (c *crn) pauseState(task string) *backends.CronState {
	c.t.Helper()
	m, err := c.ObserveCrons(c.t.Context(), []string{task})
	ok(c.t, err, "observe "+task)
	if m[task] == nil {
		c.t.Fatalf("task %s is absent", task)
	}
	return m[task]
}

// isDue reports whether DueTasks lists task.
func (c *crn) isDue(task string) bool {
	c.t.Helper()
	due, _, err := c.DueTasks(c.t.Context(), 0)
	ok(c.t, err, "due tasks")
	for _, d := range due {
		if d.Name == task {
			return true
		}
	}
	return false
}

// wantPaused checks that a scheduled claim of task at at is refused with
// ErrPaused and leaves next_exec at at.
func (c *crn) wantPaused(task string, at time.Time, what string) {
	c.t.Helper()
	_, err := c.ClaimOccurrence(c.t.Context(), scheduled(task, at, at.Add(time.Hour), newOwner("paused"), 30*time.Second))
	wantErr(c.t, err, backends.ErrPaused, what+": scheduled claim")
	if c.isDue(task) {
		c.t.Fatalf("%s: DueTasks lists the paused task %s", what, task)
	}
	if got := c.nextExec(task); !got.Equal(at) {
		c.t.Fatalf("%s: next_exec %v, want it kept at %v", what, got, at)
	}
}

// testCronsPause checks Crons.PauseCron and ResumeCron: a pause is stored beside the
// definition with its host, backend time and reason; a scheduled claim, a
// skip and a retry of a paused task are refused in the claim itself; an
// apply keeps the pause; a resume lets the missed times be claimed from
// the first one (catch_up); paused: true in the definition pauses too.
func testCronsPause(t *testing.T, h Harness) {
	const lease = 30 * time.Second
	t.Run("PauseBlocksClaims", func(t *testing.T) {
		t.Parallel()
		c, open := freshCrons(t, h)
		other := open() // a second host that read nothing since
		p := cronsOf(t, c.b)
		ctx := t.Context()
		at := c.putAt("nightly", cronDef(1), -5*time.Second)
		free := c.putAt("free", cronDef(2), -5*time.Second)
		before := c.now()
		got, changed, err := p.PauseCron(ctx, "nightly", "ops-1", "disk full on db2")
		ok(t, err, "pause")
		after := c.now()
		if !changed || got.Host != "ops-1" || got.Reason != "disk full on db2" || got.At.Before(before.Add(-time.Millisecond)) || got.At.After(after) {
			t.Fatalf("pause returned %+v changed %v, want ops-1, the reason and a backend time in [%v, %v]", got, changed, before, after)
		}
		st := c.pauseState("nightly")
		if st.Paused == nil || *st.Paused != got || !st.IsPaused() {
			t.Fatalf("observed pause %+v, want %+v", st.Paused, got)
		}
		if c.pauseState("free").Paused != nil {
			t.Fatal("pausing nightly paused free too")
		}
		other.wantPaused("nightly", at, "paused")
		// A skip (catch_up) is a claim too: it would move next_exec.
		skip := scheduled("nightly", at, at.Add(time.Hour), newOwner("skip"), 0)
		skip.Skip = "catch_up once: skipped 1 missed"
		_, err = other.ClaimOccurrence(ctx, skip)
		wantErr(t, err, backends.ErrPaused, "skip claim of a paused task")
		// A batch refuses the paused task and claims the other.
		res, err := other.ClaimOccurrences(ctx, []backends.ClaimRequest{
			scheduled("nightly", at, at.Add(time.Hour), newOwner("b1"), lease),
			scheduled("free", free, free.Add(time.Hour), newOwner("b2"), lease),
		})
		ok(t, err, "batch claim")
		wantErr(t, res[0].Err, backends.ErrPaused, "batch claim of the paused task")
		ok(t, res[1].Err, "batch claim of the task that is not paused")
		if h := c.history("nightly"); len(h) != 0 {
			t.Fatalf("paused task has history %+v, want none", h)
		}
		// Pausing again keeps the first pause.
		again, changed, err := other.b.Crons().PauseCron(ctx, "nightly", "ops-2", "second")
		ok(t, err, "pause again")
		if changed || again != got {
			t.Fatalf("second pause returned %+v changed %v, want the first %+v kept", again, changed, got)
		}
		// A manual run is the operator's own decision.
		occ := c.claim(manual("nightly", newOwner("manual"), lease))
		c.finish(occ, backends.RunResult{Status: backends.RunSucceeded})
		c.wantPaused("nightly", at, "after a manual run")
		_, _, err = p.PauseCron(ctx, "absent", "ops-1", "x")
		wantErr(t, err, backends.ErrNotFound, "pause of an absent task")
		_, err = p.ResumeCron(ctx, "absent")
		wantErr(t, err, backends.ErrNotFound, "resume of an absent task")
		if _, _, err = p.PauseCron(ctx, "free", "bad host!", "x"); err == nil {
			t.Fatal("pause with an invalid host id succeeded")
		}
		if _, _, err = p.PauseCron(ctx, "free", "ops-1", strings.Repeat("x", backends.MaxPauseReason+1)); err == nil {
			t.Fatal("pause with an oversized reason succeeded")
		}
		if c.pauseState("free").Paused != nil {
			t.Fatal("a refused pause was stored")
		}
	})
	t.Run("PauseBlocksRetries", func(t *testing.T) {
		t.Parallel()
		c, _ := freshCrons(t, h)
		p := cronsOf(t, c.b)
		at := c.putAt("flaky", cronDef(3), -5*time.Second)
		occ := c.claim(scheduled("flaky", at, at.Add(time.Hour), newOwner("a1"), lease))
		c.finish(occ, backends.RunResult{Status: backends.RunFailed, ExitCode: 1})
		_, _, err := p.PauseCron(t.Context(), "flaky", "ops-1", "stop retrying")
		ok(t, err, "pause")
		_, err = c.ClaimOccurrence(t.Context(), retry(occ, 2, newOwner("a2"), lease))
		wantErr(t, err, backends.ErrPaused, "retry of a paused task")
		res, err := c.ClaimOccurrences(t.Context(), []backends.ClaimRequest{retry(occ, 2, newOwner("a2"), lease)})
		ok(t, err, "batch retry")
		wantErr(t, res[0].Err, backends.ErrPaused, "batch retry of a paused task")
		// The pause is what every store reads first: a retry that would be
		// refused for another reason too (attempt 2 never ran) is ErrPaused.
		_, err = c.ClaimOccurrence(t.Context(), retry(occ, 3, newOwner("a3"), lease))
		wantErr(t, err, backends.ErrPaused, "retry of a paused task whose previous attempt never ran")
		res, err = c.ClaimOccurrences(t.Context(), []backends.ClaimRequest{retry(occ, 3, newOwner("a3"), lease)})
		ok(t, err, "batch retry")
		wantErr(t, res[0].Err, backends.ErrPaused, "batch retry of a paused task whose previous attempt never ran")
		_, err = p.ResumeCron(t.Context(), "flaky")
		ok(t, err, "resume")
		c.claim(retry(occ, 2, newOwner("a2"), lease))
	})
	t.Run("RunInProgressFinishes", func(t *testing.T) {
		t.Parallel()
		c, _ := freshCrons(t, h)
		p := cronsOf(t, c.b)
		at := c.putAt("long", cronDef(10), -5*time.Second)
		occ := c.claim(scheduled("long", at, at.Add(time.Hour), newOwner("run"), lease))
		_, _, err := p.PauseCron(t.Context(), "long", "ops-1", "stop after this one")
		ok(t, err, "pause")
		_, err = backends.ExtendOne(t.Context(), c, occ, lease)
		ok(t, err, "extend a run claimed before the pause")
		c.finish(occ, backends.RunResult{Status: backends.RunSucceeded})
		if r := findRun(t, c.history("long"), occ); r.Status != backends.RunSucceeded {
			t.Fatalf("run claimed before the pause recorded as %s, want succeeded", r.Status)
		}
	})
	t.Run("ResumeReenables", func(t *testing.T) {
		t.Parallel()
		c, open := freshCrons(t, h)
		other := open()
		p := cronsOf(t, c.b)
		ctx := t.Context()
		at := c.putAt("nightly", cronDef(4), -5*time.Second)
		paused, _, err := p.PauseCron(ctx, "nightly", "ops-1", "incident 42")
		ok(t, err, "pause")
		prev, err := other.b.Crons().ResumeCron(ctx, "nightly")
		ok(t, err, "resume")
		if prev == nil || *prev != paused {
			t.Fatalf("resume returned %+v, want the pause %+v", prev, paused)
		}
		if st := c.pauseState("nightly"); st.Paused != nil || st.IsPaused() {
			t.Fatalf("resumed task still observed paused: %+v", st.Paused)
		}
		if !c.isDue("nightly") {
			t.Fatal("resumed task is not due")
		}
		prev, err = p.ResumeCron(ctx, "nightly")
		ok(t, err, "resume again")
		if prev != nil {
			t.Fatalf("second resume returned %+v, want nil (not paused)", prev)
		}
		c.claim(scheduled("nightly", at, at.Add(time.Hour), newOwner("after"), lease))
		// Paused again later: a new pause, with its own time (not before
		// the first; SQLite's clock counts milliseconds, and all of the
		// above may fit in one).
		again, changed, err := p.PauseCron(ctx, "nightly", "ops-2", "again")
		ok(t, err, "pause again")
		if !changed || again.Host != "ops-2" || again.Reason != "again" || again.At.Before(paused.At) {
			t.Fatalf("pause after a resume returned %+v changed %v, want a new pause by ops-2 not before %v", again, changed, paused.At)
		}
	})
	t.Run("ApplyKeepsPause", func(t *testing.T) {
		t.Parallel()
		c, _ := freshCrons(t, h)
		p := cronsOf(t, c.b)
		ctx := t.Context()
		at := c.putAt("nightly", cronDef(5), -5*time.Second)
		paused, _, err := p.PauseCron(ctx, "nightly", "ops-1", "keep me")
		ok(t, err, "pause")
		// A definition-only change (next_exec kept).
		ok(t, c.PutCron(ctx, "nightly", cronDef(6), time.Time{}, false), "apply a new definition")
		st := c.pauseState("nightly")
		if st.Paused == nil || *st.Paused != paused || !jsonEqual(st.Def, cronDef(6)) {
			t.Fatalf("after an apply: def %s pause %+v, want the new def and the pause %+v kept", st.Def, st.Paused, paused)
		}
		c.wantPaused("nightly", at, "after an apply")
		// A schedule change (next_exec reset).
		reset := c.now().Add(-2 * time.Second)
		ok(t, c.PutCron(ctx, "nightly", cronDef(7), reset, true), "apply a new schedule")
		if st := c.pauseState("nightly"); st.Paused == nil || *st.Paused != paused {
			t.Fatalf("after a schedule change: pause %+v, want %+v kept", st.Paused, paused)
		}
		c.wantPaused("nightly", reset, "after a schedule change")
		// Deleting the task drops its pause.
		ok(t, c.DeleteCron(ctx, "nightly"), "delete")
		at = c.putAt("nightly", cronDef(5), -5*time.Second)
		if st := c.pauseState("nightly"); st.Paused != nil {
			t.Fatalf("a task deleted and created again is still paused: %+v", st.Paused)
		}
		c.claim(scheduled("nightly", at, at.Add(time.Hour), newOwner("new"), lease))
	})
	t.Run("SpecPaused", func(t *testing.T) {
		t.Parallel()
		c, _ := freshCrons(t, h)
		p := cronsOf(t, c.b)
		ctx := t.Context()
		at := c.putAt("declared", pausedDef(8), -5*time.Second)
		st := c.pauseState("declared")
		if st.Paused != nil || !st.IsPaused() {
			t.Fatalf("paused: true in the definition: observed pause %+v IsPaused %v, want no operator pause and paused", st.Paused, st.IsPaused())
		}
		c.wantPaused("declared", at, "paused: true")
		// Resume lifts operator pauses only.
		prev, err := p.ResumeCron(ctx, "declared")
		ok(t, err, "resume")
		if prev != nil {
			t.Fatalf("resume of a task paused by its definition returned %+v, want nil", prev)
		}
		c.wantPaused("declared", at, "paused: true after a resume")
		// Both: still paused while either says so.
		_, _, err = p.PauseCron(ctx, "declared", "ops-1", "also")
		ok(t, err, "operator pause")
		ok(t, c.PutCron(ctx, "declared", cronDef(8), time.Time{}, false), "apply paused: false")
		c.wantPaused("declared", at, "operator pause after paused: false")
		_, err = p.ResumeCron(ctx, "declared")
		ok(t, err, "resume")
		c.claim(scheduled("declared", at, at.Add(time.Hour), newOwner("run"), lease))
	})
	t.Run("CatchUpAfterResume", func(t *testing.T) {
		t.Parallel()
		c, _ := freshCrons(t, h)
		p := cronsOf(t, c.b)
		ctx := t.Context()
		// next_exec is the first of three times missed while paused.
		first := c.putAt("report", cronDef(9), -3*time.Second)
		missed := []time.Time{first, first.Add(time.Second), first.Add(2 * time.Second)}
		_, _, err := p.PauseCron(ctx, "report", "ops-1", "maintenance")
		ok(t, err, "pause")
		c.wantPaused("report", first, "while paused")
		_, err = p.ResumeCron(ctx, "report")
		ok(t, err, "resume")
		due, _, err := c.DueTasks(ctx, 0)
		ok(t, err, "due tasks")
		if len(due) != 1 || due[0].Name != "report" || !due[0].NextExec.Equal(first) {
			t.Fatalf("due after resume %+v, want report at the first missed time %v", due, first)
		}
		// catch_up once, as the scheduler claims it: one skip record that
		// moves next_exec to the latest missed time, then that time runs.
		skip := scheduled("report", first, missed[2], newOwner("skip"), 0)
		skip.Skip = fmt.Sprintf("catch_up once: skipped %d missed", 2)
		c.claim(skip)
		occ := c.claim(scheduled("report", missed[2], missed[2].Add(time.Hour), newOwner("run"), lease))
		c.finish(occ, backends.RunResult{Status: backends.RunSucceeded})
		runs := c.history("report")
		if len(runs) != 2 || runs[1].Status != backends.RunSkipped || !runs[1].ScheduledAt.Equal(first) ||
			runs[0].Status != backends.RunSucceeded || !runs[0].ScheduledAt.Equal(missed[2]) {
			t.Fatalf("history after resume %+v, want the skip at %v then the run at %v", runs, first, missed[2])
		}
	})
}
