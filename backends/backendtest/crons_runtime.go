package backendtest

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
)

// crn bundles the cron tasks of one handle with the handle.
type crn struct {
	t *testing.T
	b backends.Backend
	backends.Crons
}

// freshCrons creates a fresh store and returns its cron view and opener.
func freshCrons(t *testing.T, h Harness) (*crn, func() *crn) {
	t.Helper()
	b, open := fresh(t, h)
	return crnOf(t, b), func() *crn { return crnOf(t, open()) }
}

func crnOf(t *testing.T, b backends.Backend) *crn {
	t.Helper()
	return &crn{t: t, b: b, Crons: cronsOf(t, b)}
}

// now reads the backend clock.
func (c *crn) now() time.Time {
	c.t.Helper()
	now, err := c.b.Now(c.t.Context())
	ok(c.t, err, "backend now")
	return now
}

// putAt stores task with next_exec = backend now + offset (negative: due)
// and returns that next_exec. A fake clock cannot move the database's, so
// due tasks are made by putting next_exec in the past.
func (c *crn) putAt(task string, def json.RawMessage, offset time.Duration) time.Time {
	c.t.Helper()
	next := c.now().Add(offset)
	ok(c.t, c.PutCron(c.t.Context(), task, def, next, true), "put cron "+task)
	return next
}

// claim claims and fails on error.
func (c *crn) claim(req backends.ClaimRequest) backends.Occurrence {
	c.t.Helper()
	occ, err := c.ClaimOccurrence(c.t.Context(), req)
	ok(c.t, err, fmt.Sprintf("claim %s attempt %d manual %v", req.Task, req.Attempt, req.Manual))
	if occ.Task != req.Task || occ.Attempt != req.Attempt || occ.Owner != req.Owner || occ.Host != req.Host || occ.Manual != req.Manual {
		c.t.Fatalf("claimed %+v for request %+v", occ, req)
	}
	if !req.Manual && !occ.ScheduledAt.Equal(req.ScheduledAt) {
		c.t.Fatalf("claimed scheduled_at %v, want %v", occ.ScheduledAt, req.ScheduledAt)
	}
	if b, err := hex.DecodeString(occ.RunID); err != nil || len(b) != 16 {
		c.t.Fatalf("run id %q is not 16 bytes of hex", occ.RunID)
	}
	if req.Skip == "" && !occ.ExpiresAt.After(occ.StartedAt) {
		c.t.Fatalf("claimed %+v: lease does not end after the start", occ)
	}
	return occ
}

// scheduled is a claim of attempt 1 of a scheduled run.
func scheduled(task string, at, next time.Time, owner string, lease time.Duration) backends.ClaimRequest {
	return backends.ClaimRequest{Task: task, ScheduledAt: at, Next: next, Attempt: 1, Owner: owner, Host: "host-" + owner, Lease: lease}
}

// manual is a claim of a manual run.
func manual(task, owner string, lease time.Duration) backends.ClaimRequest {
	return backends.ClaimRequest{Task: task, Attempt: 1, Owner: owner, Host: "host-" + owner, Lease: lease, Manual: true}
}

// retry is a claim of a later attempt of occ.
func retry(occ backends.Occurrence, attempt int, owner string, lease time.Duration) backends.ClaimRequest {
	return backends.ClaimRequest{Task: occ.Task, ScheduledAt: occ.ScheduledAt, Attempt: attempt, Owner: owner,
		Host: "host-" + owner, Lease: lease, Manual: occ.Manual}
}

func (c *crn) finish(occ backends.Occurrence, res backends.RunResult) {
	c.t.Helper()
	ok(c.t, backends.FinishOne(c.t.Context(), c, occ, res), fmt.Sprintf("finish %s attempt %d as %s", occ.Task, occ.Attempt, res.Status))
}

func (c *crn) history(task string) []backends.Run {
	c.t.Helper()
	runs, err := c.History(c.t.Context(), task, 0)
	ok(c.t, err, "history "+task)
	return runs
}

// nextExec observes the task's next_exec.
func (c *crn) nextExec(task string) time.Time {
	c.t.Helper()
	m, err := c.ObserveCrons(c.t.Context(), []string{task})
	ok(c.t, err, "observe "+task)
	if m[task] == nil {
		c.t.Fatalf("task %s is absent", task)
	}
	return m[task].NextExec
}

// findRun returns the history row of occ.
func findRun(t *testing.T, runs []backends.Run, occ backends.Occurrence) backends.Run {
	t.Helper()
	for _, r := range runs {
		if sameOcc(r.Occurrence, occ) {
			return r
		}
	}
	t.Fatalf("occurrence %s@%v attempt %d missing from history of %d runs", occ.Task, occ.ScheduledAt, occ.Attempt, len(runs))
	return backends.Run{}
}

func sameOcc(a, b backends.Occurrence) bool {
	return a.Task == b.Task && a.ScheduledAt.Equal(b.ScheduledAt) && a.Attempt == b.Attempt && a.RunID == b.RunID
}

func containsOcc(list []backends.Occurrence, occ backends.Occurrence) bool {
	for _, o := range list {
		if sameOcc(o, occ) {
			return true
		}
	}
	return false
}

// pollWithin polls cond until it holds or d passes.
func pollWithin(t *testing.T, what string, d time.Duration, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		done, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: still not true after %v", what, d)
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("waiting for %s: %v", what, t.Context().Err())
		case <-time.After(pollInterval):
		}
	}
}

// testCronsRuntime checks the runtime side of the scheduler.
func testCronsRuntime(t *testing.T, h Harness) {
	testCronsBatch(t, h)
	def := cronDef(1)
	t.Run("DueTasks", func(t *testing.T) {
		t.Parallel()
		c, _ := freshCrons(t, h)
		ctx := t.Context()
		due, nextAt, err := c.DueTasks(ctx, 10)
		ok(t, err, "due tasks of an empty store")
		if len(due) != 0 || !nextAt.IsZero() {
			t.Fatalf("empty store: due %v, next at %v; want none and zero", due, nextAt)
		}
		early := c.putAt("early", cronDef(2), -10*time.Second)
		late := c.putAt("late", def, -5*time.Second)
		future := c.putAt("future", cronDef(3), time.Hour)
		c.putAt("later", cronDef(4), 2*time.Hour)
		ok(t, c.PutCron(ctx, "never", cronDef(5), time.Time{}, true), "put a task with no next")

		due, nextAt, err = c.DueTasks(ctx, 10)
		ok(t, err, "due tasks")
		if len(due) != 2 || due[0].Name != "early" || due[1].Name != "late" {
			t.Fatalf("due %+v, want early then late", due)
		}
		if !due[0].NextExec.Equal(early) || !due[1].NextExec.Equal(late) || !jsonEqual(due[1].Def, def) || !jsonEqual(due[0].Def, cronDef(2)) {
			t.Fatalf("due %+v, want next_exec %v and %v with their definitions", due, early, late)
		}
		if !nextAt.Equal(future) {
			t.Fatalf("next at %v, want the earliest future next_exec %v", nextAt, future)
		}
		due, nextAt, err = c.DueTasks(ctx, 1)
		ok(t, err, "due tasks, limit 1")
		if len(due) != 1 || due[0].Name != "early" || !nextAt.Equal(future) {
			t.Fatalf("limit 1: due %+v, next at %v; want early and %v", due, nextAt, future)
		}
		// Only due tasks: nothing to sleep until.
		for _, n := range []string{"future", "later", "never"} {
			ok(t, c.DeleteCron(ctx, n), "delete "+n)
		}
		_, nextAt, err = c.DueTasks(ctx, 10)
		ok(t, err, "due tasks without future ones")
		if !nextAt.IsZero() {
			t.Fatalf("next at %v with no future task, want zero", nextAt)
		}
	})
	t.Run("ClaimRace", func(t *testing.T) {
		t.Parallel()
		c, open := freshCrons(t, h)
		other := open()
		ctx := t.Context()
		at := c.putAt("race", def, -5*time.Second)
		next := at.Add(time.Hour)

		const racers = 8
		var wg sync.WaitGroup
		var mu sync.Mutex
		var won []backends.Occurrence
		errs := make([]error, racers)
		for i := range racers {
			hd := c
			if i%2 == 1 {
				hd = other
			}
			wg.Go(func() {
				occ, err := hd.ClaimOccurrence(ctx, scheduled("race", at, next, newOwner(fmt.Sprintf("racer%d", i)), 30*time.Second))
				errs[i] = err
				if err == nil {
					mu.Lock()
					won = append(won, occ)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if len(won) != 1 {
			t.Fatalf("%d claims of one occurrence succeeded, want 1 (errors %v)", len(won), errs)
		}
		for i, err := range errs {
			if err != nil && !errors.Is(err, backends.ErrConflict) {
				t.Errorf("racer %d: got %v, want ErrConflict", i, err)
			}
		}
		if got := c.nextExec("race"); !got.Equal(next) {
			t.Fatalf("next_exec %v after the claim, want %v", got, next)
		}
		due, nextAt, err := other.DueTasks(ctx, 10)
		ok(t, err, "due tasks after the claim")
		if len(due) != 0 || !nextAt.Equal(next) {
			t.Fatalf("after the claim: due %+v, next at %v; want none and %v", due, nextAt, next)
		}
		run, err := other.Running(ctx, "race")
		ok(t, err, "running")
		if len(run) != 1 || !sameOcc(run[0], won[0]) || run[0].Owner != won[0].Owner || run[0].Fencing != won[0].Fencing {
			t.Fatalf("running %+v, want the winner %+v", run, won[0])
		}
		// The same time again, from either handle: the CAS fails.
		_, err = c.ClaimOccurrence(ctx, scheduled("race", at, next.Add(time.Hour), newOwner("late"), 30*time.Second))
		wantErr(t, err, backends.ErrConflict, "claim a claimed time")
		_, err = c.ClaimOccurrence(ctx, scheduled("absent", at, next, newOwner("x"), 30*time.Second))
		wantErr(t, err, backends.ErrNotFound, "claim an absent task")
		_, err = c.ClaimOccurrence(ctx, manual("absent", newOwner("x"), 30*time.Second))
		wantErr(t, err, backends.ErrNotFound, "manual run of an absent task")
	})
	t.Run("Fencing", func(t *testing.T) {
		t.Parallel()
		c, open := freshCrons(t, h)
		other := open()
		at := c.putAt("fenced", def, -10*time.Second)
		at2 := at.Add(time.Second) // still in the past: due again

		var fencing []int64
		runIDs := map[string]bool{}
		record := func(occ backends.Occurrence) backends.Occurrence {
			t.Helper()
			if runIDs[occ.RunID] {
				t.Fatalf("run id %s given twice", occ.RunID)
			}
			runIDs[occ.RunID] = true
			if n := len(fencing); n > 0 && occ.Fencing <= fencing[n-1] {
				t.Fatalf("fencing %d after %d: not strictly increasing (%v)", occ.Fencing, fencing[n-1], fencing)
			}
			fencing = append(fencing, occ.Fencing)
			return occ
		}
		o1 := record(c.claim(scheduled("fenced", at, at2, newOwner("a"), 30*time.Second)))
		c.finish(o1, backends.RunResult{Status: backends.RunFailed, ExitCode: 1})
		o2 := record(other.claim(retry(o1, 2, newOwner("b"), 30*time.Second)))
		m1 := record(c.claim(manual("fenced", newOwner("c"), 30*time.Second)))
		m2 := record(other.claim(manual("fenced", newOwner("d"), 30*time.Second)))
		if m1.ScheduledAt.Equal(m2.ScheduledAt) || !m1.Manual || !m2.Manual {
			t.Fatalf("manual runs %+v and %+v: want two manual occurrences at distinct times", m1, m2)
		}
		c.finish(m1, backends.RunResult{Status: backends.RunTimedOut, ExitCode: -1})
		record(c.claim(retry(m1, 2, newOwner("e"), 30*time.Second)))
		o3 := record(other.claim(scheduled("fenced", at2, at2.Add(time.Hour), newOwner("f"), 30*time.Second)))
		if got := c.nextExec("fenced"); !got.Equal(at2.Add(time.Hour)) {
			t.Fatalf("next_exec %v: manual runs and retries must leave it alone, want %v", got, at2.Add(time.Hour))
		}
		run, err := c.Running(t.Context(), "fenced")
		ok(t, err, "running")
		if len(run) != 4 || !containsOcc(run, o2) || !containsOcc(run, m2) || !containsOcc(run, o3) {
			t.Fatalf("running %d occurrences, want 4 including %v, %v, %v", len(run), o2, m2, o3)
		}
		// A task deleted and created again never hands out a number it
		// handed out before.
		ok(t, c.DeleteCron(t.Context(), "fenced"), "delete the task")
		at3 := c.putAt("fenced", def, -3*time.Second)
		record(c.claim(scheduled("fenced", at3, at3.Add(time.Hour), newOwner("g"), 30*time.Second)))
	})
	t.Run("ExtendFinish", func(t *testing.T) {
		t.Parallel()
		c, open := freshCrons(t, h)
		other := open()
		ctx := t.Context()
		at := c.putAt("job", def, -5*time.Second)
		owner := newOwner("owner")
		occ := c.claim(scheduled("job", at, at.Add(time.Hour), owner, 30*time.Second))

		exp, err := backends.ExtendOne(ctx, other, occ, time.Hour)
		ok(t, err, "extend by the owner from another handle")
		if exp.Sub(occ.ExpiresAt) < 50*time.Minute {
			t.Fatalf("extended to %v, want about an hour past the claim (lease was until %v)", exp, occ.ExpiresAt)
		}
		thief := occ
		thief.Owner = newOwner("thief")
		_, err = backends.ExtendOne(ctx, c, thief, time.Hour)
		wantErr(t, err, backends.ErrLost, "extend by another owner")
		err = backends.FinishOne(ctx, c, thief, backends.RunResult{Status: backends.RunSucceeded})
		wantErr(t, err, backends.ErrLost, "finish by another owner")
		if r := findRun(t, c.history("job"), occ); r.Status != backends.RunRunning || !r.FinishedAt.IsZero() {
			t.Fatalf("after a wrong owner's finish: %+v, want still running", r)
		}

		out := make([]byte, 100<<10)
		for i := range out {
			out[i] = byte('a' + i%26)
		}
		other.finish(occ, backends.RunResult{Status: backends.RunFailed, ExitCode: 3, Error: "exit status 3", Output: out})
		runs := c.history("job")
		if len(runs) != 1 {
			t.Fatalf("history has %d runs, want 1", len(runs))
		}
		r := runs[0]
		if !sameOcc(r.Occurrence, occ) || r.Status != backends.RunFailed || r.ExitCode != 3 || r.Error != "exit status 3" ||
			r.Fencing != occ.Fencing || r.Owner != owner || r.Host != occ.Host {
			t.Fatalf("history %+v, want the failed run of %+v", r, occ)
		}
		if r.FinishedAt.IsZero() || r.FinishedAt.Before(r.StartedAt) {
			t.Fatalf("finished at %v, started at %v", r.FinishedAt, r.StartedAt)
		}
		if len(r.Output) != 64<<10 || !bytes.Equal(r.Output, out[len(out)-64<<10:]) {
			t.Fatalf("output of %d bytes, want the last 64 KiB of the 100 KiB written", len(r.Output))
		}
		_, err = backends.ExtendOne(ctx, c, occ, time.Hour)
		wantErr(t, err, backends.ErrLost, "extend a finished run")
		err = backends.FinishOne(ctx, c, occ, backends.RunResult{Status: backends.RunSucceeded})
		wantErr(t, err, backends.ErrLost, "finish twice")

		m := c.claim(manual("job", newOwner("m"), 30*time.Second))
		c.finish(m, backends.RunResult{Status: backends.RunSucceeded, Output: []byte("hello\n")})
		runs = c.history("job")
		if len(runs) != 2 || !sameOcc(runs[0].Occurrence, m) || !sameOcc(runs[1].Occurrence, occ) {
			t.Fatalf("history %+v, want the manual run then the failed one", runs)
		}
		if r := runs[0]; r.Status != backends.RunSucceeded || r.ExitCode != 0 || r.Error != "" || string(r.Output) != "hello\n" || !r.Manual {
			t.Fatalf("manual run recorded as %+v", r)
		}
		if runs, err := c.History(ctx, "job", 1); err != nil || len(runs) != 1 || !sameOcc(runs[0].Occurrence, m) {
			t.Fatalf("history limit 1: %+v, %v; want only the newest", runs, err)
		}
	})
	t.Run("Retry", func(t *testing.T) {
		t.Parallel()
		c, open := freshCrons(t, h)
		other := open()
		ctx := t.Context()
		at := c.putAt("flaky", def, -10*time.Second)
		at2 := at.Add(time.Second)
		final := at2.Add(time.Hour)

		o1 := c.claim(scheduled("flaky", at, at2, newOwner("a"), 30*time.Second))
		_, err := other.ClaimOccurrence(ctx, retry(o1, 2, newOwner("b"), 30*time.Second))
		wantErr(t, err, backends.ErrConflict, "attempt 2 while attempt 1 runs")
		c.finish(o1, backends.RunResult{Status: backends.RunSucceeded})
		_, err = other.ClaimOccurrence(ctx, retry(o1, 2, newOwner("b"), 30*time.Second))
		wantErr(t, err, backends.ErrConflict, "attempt 2 after attempt 1 succeeded")

		p1 := c.claim(scheduled("flaky", at2, final, newOwner("c"), 30*time.Second))
		_, err = c.ClaimOccurrence(ctx, retry(p1, 3, newOwner("d"), 30*time.Second))
		wantErr(t, err, backends.ErrConflict, "attempt 3 without an attempt 2")
		c.finish(p1, backends.RunResult{Status: backends.RunFailed, ExitCode: 1})
		p2 := other.claim(retry(p1, 2, newOwner("e"), 30*time.Second))
		if !p2.ScheduledAt.Equal(p1.ScheduledAt) || p2.Fencing <= p1.Fencing {
			t.Fatalf("attempt 2 %+v of %+v", p2, p1)
		}
		_, err = c.ClaimOccurrence(ctx, retry(p1, 2, newOwner("f"), 30*time.Second))
		wantErr(t, err, backends.ErrConflict, "attempt 2 twice")
		_, err = c.ClaimOccurrence(ctx, retry(p1, 3, newOwner("g"), 30*time.Second))
		wantErr(t, err, backends.ErrConflict, "attempt 3 while attempt 2 runs")
		if got := c.nextExec("flaky"); !got.Equal(final) {
			t.Fatalf("next_exec %v after retries, want %v", got, final)
		}
		other.finish(p2, backends.RunResult{Status: backends.RunTimedOut, ExitCode: -1, Error: "timeout"})
		p3 := c.claim(retry(p2, 3, newOwner("h"), 30*time.Second))
		if p3.Fencing <= p2.Fencing {
			t.Fatalf("attempt 3 fencing %d, not above attempt 2's %d", p3.Fencing, p2.Fencing)
		}
	})
	t.Run("PendingRetries", func(t *testing.T) {
		t.Parallel()
		c, open := freshCrons(t, h)
		other := open()
		ctx := t.Context()
		pending := func() []backends.Run {
			t.Helper()
			runs, err := other.PendingRetries(ctx, 0)
			ok(t, err, "pending retries")
			return runs
		}
		if p := pending(); len(p) != 0 {
			t.Fatalf("pending retries of an empty store: %+v", p)
		}
		at := c.putAt("a", def, -10*time.Second)
		c.putAt("b", def, -10*time.Second)
		// a@at: attempt 1 fails -> pending (attempt 1).
		a1 := c.claim(scheduled("a", at, at.Add(time.Second), newOwner("a1"), 30*time.Second))
		if p := pending(); len(p) != 0 {
			t.Fatalf("a running attempt is pending: %+v", p)
		}
		c.finish(a1, backends.RunResult{Status: backends.RunFailed, ExitCode: 3, Error: "exit 3"})
		p := pending()
		if len(p) != 1 || !sameOcc(p[0].Occurrence, a1) || p[0].Status != backends.RunFailed || p[0].ExitCode != 3 || p[0].FinishedAt.IsZero() {
			t.Fatalf("pending after a failure: %+v, want attempt 1 of a", p)
		}
		// Attempt 2 claimed: nothing pending while it runs; it times out ->
		// attempt 2 is the pending one, attempt 1 is not listed any more.
		a2 := other.claim(retry(a1, 2, newOwner("a2"), 30*time.Second))
		if p := pending(); len(p) != 0 {
			t.Fatalf("pending while attempt 2 runs: %+v", p)
		}
		other.finish(a2, backends.RunResult{Status: backends.RunTimedOut, ExitCode: -1})
		if p := pending(); len(p) != 1 || !sameOcc(p[0].Occurrence, a2) || p[0].Status != backends.RunTimedOut {
			t.Fatalf("pending after attempt 2 timed out: %+v, want only attempt 2", p)
		}
		// Attempt 3 succeeds: nothing pending for a.
		a3 := c.claim(retry(a2, 3, newOwner("a3"), 30*time.Second))
		c.finish(a3, backends.RunResult{Status: backends.RunSucceeded})
		// b: a succeeded run and a skipped one are never pending; a lost one is.
		bt := c.nextExec("b")
		b1 := c.claim(scheduled("b", bt, bt.Add(time.Second), newOwner("b1"), 30*time.Second))
		c.finish(b1, backends.RunResult{Status: backends.RunSucceeded})
		c.claim(backends.ClaimRequest{Task: "b", ScheduledAt: bt.Add(time.Second), Next: bt.Add(2 * time.Second), Attempt: 1,
			Owner: newOwner("skip"), Host: "h", Skip: "overlap"})
		b3 := c.claim(scheduled("b", bt.Add(2*time.Second), bt.Add(time.Hour), newOwner("dead"), time.Second))
		if p := pending(); len(p) != 0 {
			t.Fatalf("pending with only successes, skips and a live run: %+v", p)
		}
		pollWithin(t, "the run lease to expire", 10*time.Second, func() (bool, error) {
			exp, err := other.ExpiredOccurrences(ctx, 100)
			return containsOcc(exp, b3), err
		})
		ok(t, other.ReapOccurrence(ctx, b3), "reap")
		p = pending()
		if len(p) != 1 || !sameOcc(p[0].Occurrence, b3) || p[0].Status != backends.RunLost {
			t.Fatalf("pending after a reap: %+v, want the lost run of b", p)
		}
		// A manual failure is listed too, in finish order; limit applies.
		m := c.claim(manual("a", newOwner("m"), 30*time.Second))
		c.finish(m, backends.RunResult{Status: backends.RunFailed, ExitCode: 1})
		p = pending()
		if len(p) != 2 || !sameOcc(p[0].Occurrence, b3) || !sameOcc(p[1].Occurrence, m) || !p[1].Manual {
			t.Fatalf("pending: %+v, want the lost b then the manual a", p)
		}
		if p, err := other.PendingRetries(ctx, 1); err != nil || len(p) != 1 || !sameOcc(p[0].Occurrence, b3) {
			t.Fatalf("pending limit 1: %+v, %v", p, err)
		}
	})
	t.Run("LeaseLoss", func(t *testing.T) {
		t.Parallel()
		c, open := freshCrons(t, h)
		other := open()
		ctx := t.Context()
		at := c.putAt("doomed", def, -5*time.Second)
		occ := c.claim(scheduled("doomed", at, at.Add(time.Hour), newOwner("dead-host"), time.Second))
		live := c.claim(manual("doomed", newOwner("live"), time.Hour))

		pollWithin(t, "the run lease to expire", 10*time.Second, func() (bool, error) {
			exp, err := other.ExpiredOccurrences(ctx, 100)
			return containsOcc(exp, occ), err
		})
		exp, err := other.ExpiredOccurrences(ctx, 100)
		ok(t, err, "expired occurrences")
		if len(exp) != 1 || exp[0].Owner != occ.Owner || exp[0].Fencing != occ.Fencing {
			t.Fatalf("expired %+v, want only %+v", exp, occ)
		}
		err = other.ReapOccurrence(ctx, live)
		wantErr(t, err, backends.ErrConflict, "reap a live run")
		run, err := other.Running(ctx, "doomed")
		ok(t, err, "running")
		if len(run) != 1 || !sameOcc(run[0], live) {
			t.Fatalf("running %+v, want only the live manual run", run)
		}
		_, err = backends.ExtendOne(ctx, c, occ, time.Hour)
		wantErr(t, err, backends.ErrLost, "extend an expired lease")

		ok(t, other.ReapOccurrence(ctx, occ), "reap")
		if r := findRun(t, c.history("doomed"), occ); r.Status != backends.RunLost || r.FinishedAt.IsZero() {
			t.Fatalf("reaped run recorded as %+v, want lost and finished", r)
		}
		err = c.ReapOccurrence(ctx, occ)
		wantErr(t, err, backends.ErrConflict, "reap twice")
		err = backends.FinishOne(ctx, c, occ, backends.RunResult{Status: backends.RunSucceeded})
		wantErr(t, err, backends.ErrLost, "finish by the owner after the reap")
		if r := findRun(t, c.history("doomed"), occ); r.Status != backends.RunLost {
			t.Fatalf("after the late finish: %+v, want still lost", r)
		}
		exp, err = c.ExpiredOccurrences(ctx, 100)
		ok(t, err, "expired occurrences after the reap")
		if len(exp) != 0 {
			t.Fatalf("expired %+v after the reap, want none", exp)
		}
		// A lost attempt may be retried.
		c.claim(retry(occ, 2, newOwner("retry"), time.Hour))
	})
	t.Run("Skip", func(t *testing.T) {
		t.Parallel()
		c, _ := freshCrons(t, h)
		ctx := t.Context()
		at := c.putAt("busy", def, -5*time.Second)
		next := at.Add(time.Hour)
		req := scheduled("busy", at, next, newOwner("s"), 0)
		req.Skip = "overlap forbid: still running"
		occ := c.claim(req)
		if got := c.nextExec("busy"); !got.Equal(next) {
			t.Fatalf("next_exec %v after a skip, want %v", got, next)
		}
		runs := c.history("busy")
		if len(runs) != 1 || !sameOcc(runs[0].Occurrence, occ) || runs[0].Status != backends.RunSkipped ||
			runs[0].Error != req.Skip || runs[0].FinishedAt.IsZero() {
			t.Fatalf("history %+v, want one skipped run with the reason", runs)
		}
		run, err := c.Running(ctx, "busy")
		ok(t, err, "running")
		exp, err2 := c.ExpiredOccurrences(ctx, 0)
		ok(t, err2, "expired")
		if len(run) != 0 || len(exp) != 0 {
			t.Fatalf("a skip left running %+v, expired %+v", run, exp)
		}
		_, err = backends.ExtendOne(ctx, c, occ, time.Hour)
		wantErr(t, err, backends.ErrLost, "extend a skipped occurrence")
		err = backends.FinishOne(ctx, c, occ, backends.RunResult{Status: backends.RunSucceeded})
		wantErr(t, err, backends.ErrLost, "finish a skipped occurrence")
		_, err = c.ClaimOccurrence(ctx, req)
		wantErr(t, err, backends.ErrConflict, "skip the same time twice")
		due, _, err := c.DueTasks(ctx, 10)
		ok(t, err, "due tasks")
		if len(due) != 0 {
			t.Fatalf("due %+v after the skip, want none", due)
		}
	})
	t.Run("HistoryLimit", func(t *testing.T) {
		t.Parallel()
		c, _ := freshCrons(t, h)
		ctx := t.Context()
		c.putAt("short", json.RawMessage(`{"schedule":"* * * * *","command":{"argv":["true"]},"history_limit":2}`), time.Hour)
		c.putAt("default", def, time.Hour)
		c.putAt("none", json.RawMessage(`{"schedule":"* * * * *","command":{"argv":["true"]},"history_limit":0}`), time.Hour)

		var short []backends.Occurrence
		for i := range 4 {
			o := c.claim(manual("short", newOwner("s"), 30*time.Second))
			c.finish(o, backends.RunResult{Status: backends.RunSucceeded, Output: fmt.Appendf(nil, "run %d", i)})
			short = append(short, o)
			d := c.claim(manual("default", newOwner("d"), 30*time.Second))
			c.finish(d, backends.RunResult{Status: backends.RunFailed, ExitCode: 1})
		}
		runs := c.history("short")
		if len(runs) != 2 || !sameOcc(runs[0].Occurrence, short[3]) || !sameOcc(runs[1].Occurrence, short[2]) ||
			string(runs[0].Output) != "run 3" || string(runs[1].Output) != "run 2" {
			t.Fatalf("history_limit 2 kept %+v, want runs 3 and 2", runs)
		}
		if runs := c.history("default"); len(runs) != 4 {
			t.Fatalf("default history_limit kept %d of 4 runs", len(runs))
		}

		// history_limit 0 keeps no finished run, and never a running one away.
		held := c.claim(manual("none", newOwner("held"), 30*time.Second))
		done := c.claim(manual("none", newOwner("done"), 30*time.Second))
		c.finish(done, backends.RunResult{Status: backends.RunSucceeded})
		runs = c.history("none")
		if len(runs) != 1 || !sameOcc(runs[0].Occurrence, held) || runs[0].Status != backends.RunRunning {
			t.Fatalf("history_limit 0 kept %+v, want only the running run", runs)
		}
		c.finish(held, backends.RunResult{Status: backends.RunSucceeded})
		if runs, err := c.History(ctx, "none", 10); err != nil || len(runs) != 0 {
			t.Fatalf("history_limit 0 after the last finish: %+v, %v; want none", runs, err)
		}
	})
	// A command's output is whatever it printed: every byte value, invalid
	// UTF-8, quotes and backslashes, SQL. It is stored and read back byte
	// for byte on every backend, and the error text with it.
	t.Run("OutputBytes", func(t *testing.T) {
		t.Parallel()
		c, open := freshCrons(t, h)
		other := open()
		c.putAt("noisy", def, time.Hour)
		var all []byte
		for i := range 256 {
			all = append(all, byte(i))
		}
		errText := `exit status 1: '"\'; DROP TABLE x; -- é`
		outputs := [][]byte{
			all,
			[]byte("\xbf'; CREATE TABLE coordd_injected (i int); -- "),
			[]byte("\xbf\\'; SELECT 1; -- \x00\xff\xfe\xed\xa0\x80\xc0\x80"),
			bytes.Repeat([]byte("\xe2\x82"), 40<<10), // cut runes, past the 64 KiB tail
		}
		for i, out := range outputs {
			occ := c.claim(manual("noisy", newOwner(fmt.Sprint("o", i)), time.Minute))
			c.finish(occ, backends.RunResult{Status: backends.RunFailed, ExitCode: 1, Error: errText, Output: out})
			runs := other.history("noisy")
			r := findRun(t, runs, occ)
			want := out[max(0, len(out)-64<<10):]
			if !bytes.Equal(r.Output, want) || r.Error != errText || r.Status != backends.RunFailed {
				t.Fatalf("output %d read back as %d bytes %.40q (error %q), want %d bytes %.40q (error %q)",
					i, len(r.Output), r.Output, r.Error, len(want), want, errText)
			}
		}
	})
	t.Run("Running", func(t *testing.T) {
		t.Parallel()
		c, open := freshCrons(t, h)
		other := open()
		ctx := t.Context()
		c.putAt("multi", def, time.Hour)
		c.putAt("idle", def, time.Hour)
		long := c.claim(manual("multi", newOwner("long"), time.Hour))
		short := c.claim(manual("multi", newOwner("short"), time.Second))
		done := c.claim(manual("multi", newOwner("done"), time.Hour))
		c.finish(done, backends.RunResult{Status: backends.RunSucceeded})

		waitPast(t, c.b, short.ExpiresAt)
		run, err := other.Running(ctx, "multi")
		ok(t, err, "running")
		if len(run) != 1 || !sameOcc(run[0], long) || run[0].Owner != long.Owner || !run[0].ExpiresAt.Equal(long.ExpiresAt) ||
			run[0].Fencing != long.Fencing || !run[0].StartedAt.Equal(long.StartedAt) || !run[0].Manual {
			t.Fatalf("running %+v, want only %+v", run, long)
		}
		run, err = other.Running(ctx, "idle")
		ok(t, err, "running of an idle task")
		if len(run) != 0 {
			t.Fatalf("idle task running %+v", run)
		}
		m, err := other.ObserveCrons(ctx, []string{"multi"})
		ok(t, err, "observe")
		if m["multi"] == nil || m["multi"].Running != 1 {
			t.Fatalf("observed %+v, want 1 running", m["multi"])
		}
	})
}
