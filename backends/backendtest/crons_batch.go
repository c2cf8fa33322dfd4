package backendtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
)

// claimAll runs ClaimOccurrences and fails on a call error or a result
// count that does not match.
func (c *crn) claimAll(reqs []backends.ClaimRequest) []backends.ClaimResult {
	c.t.Helper()
	res, err := c.ClaimOccurrences(c.t.Context(), reqs)
	ok(c.t, err, fmt.Sprintf("claim %d occurrences", len(reqs)))
	if len(res) != len(reqs) {
		c.t.Fatalf("%d results for %d requests", len(res), len(reqs))
	}
	return res
}

// exclusive is a scheduled claim under overlap forbid.
func exclusive(task string, at, next time.Time, owner string, lease time.Duration) backends.ClaimRequest {
	r := scheduled(task, at, next, owner, lease)
	r.Exclusive = true
	return r
}

// testCronsBatch checks ClaimOccurrences, ExtendOccurrences and Exclusive:
// a batch decides each request as ClaimOccurrence would, in order, and
// concurrent claimers never claim one occurrence twice.
func testCronsBatch(t *testing.T, h Harness) {
	def := cronDef(1)
	t.Run("ClaimBatch", func(t *testing.T) {
		t.Parallel()
		c, open := freshCrons(t, h)
		other := open()
		ctx := t.Context()
		at := c.putAt("a", def, -10*time.Second)
		for _, n := range []string{"moved", "skipped", "flaky", "fine", "busy", "idle", "stale"} {
			ok(t, c.PutCron(ctx, n, def, at, true), "put "+n)
		}
		next := at.Add(time.Hour)
		// flaky's attempt 1 failed; fine's succeeded: only flaky may retry.
		f1 := c.claim(scheduled("flaky", at, next, newOwner("f1"), 30*time.Second))
		c.finish(f1, backends.RunResult{Status: backends.RunFailed, ExitCode: 1})
		g1 := c.claim(scheduled("fine", at, next, newOwner("g1"), 30*time.Second))
		c.finish(g1, backends.RunResult{Status: backends.RunSucceeded})
		// busy has a live run; stale's run lease expired unreaped, which
		// no longer holds the task back.
		c.claim(manual("busy", newOwner("live"), time.Hour))
		dead := c.claim(manual("stale", newOwner("dead"), time.Second))
		waitPast(t, c.b, dead.ExpiresAt)
		fencingBusy := c.claim(manual("busy", newOwner("probe"), time.Hour)).Fencing

		skip := scheduled("skipped", at, next, newOwner("s"), 0)
		skip.Skip = "catch_up none: more than 1m0s late"
		noOwner := scheduled("a", at, next, "", 30*time.Second)
		reqs := []backends.ClaimRequest{
			scheduled("a", at, next, newOwner("a"), 30*time.Second),
			scheduled("moved", at.Add(-time.Second), next, newOwner("m"), 30*time.Second),
			scheduled("absent", at, next, newOwner("x"), 30*time.Second),
			skip,
			retry(f1, 2, newOwner("f2"), 30*time.Second),
			retry(g1, 2, newOwner("g2"), 30*time.Second),
			manual("a", newOwner("man"), 30*time.Second),
			exclusive("busy", at, next, newOwner("b"), 30*time.Second),
			exclusive("idle", at, next, newOwner("i"), 30*time.Second),
			exclusive("stale", at, next, newOwner("st"), 30*time.Second),
			noOwner,
		}
		res := other.claimAll(reqs)
		for _, i := range []int{0, 3, 4, 8, 9} {
			if res[i].Err != nil {
				t.Fatalf("request %d (%s attempt %d): %v", i, reqs[i].Task, reqs[i].Attempt, res[i].Err)
			}
			o := res[i].Occurrence
			if o.Task != reqs[i].Task || !o.ScheduledAt.Equal(reqs[i].ScheduledAt) || o.Attempt != reqs[i].Attempt ||
				o.Owner != reqs[i].Owner || o.Host != reqs[i].Host || o.RunID == "" || o.Fencing == 0 {
				t.Fatalf("request %d claimed %+v for %+v", i, o, reqs[i])
			}
			if reqs[i].Skip == "" && !o.ExpiresAt.After(o.StartedAt) {
				t.Fatalf("request %d: lease %v does not end after the start %v", i, o.ExpiresAt, o.StartedAt)
			}
		}
		wantErr(t, res[1].Err, backends.ErrConflict, "batch: next_exec moved")
		wantErr(t, res[2].Err, backends.ErrNotFound, "batch: absent task")
		wantErr(t, res[5].Err, backends.ErrConflict, "batch: retry of a success")
		wantErr(t, res[6].Err, backends.ErrUnsupported, "batch: manual run")
		wantErr(t, res[7].Err, backends.ErrHeld, "batch: exclusive claim of a busy task")
		if res[10].Err == nil {
			t.Fatal("batch: a request without owner was accepted")
		}
		if res[4].Occurrence.Fencing <= f1.Fencing {
			t.Fatalf("retry fencing %d not above attempt 1's %d", res[4].Occurrence.Fencing, f1.Fencing)
		}
		for task, want := range map[string]time.Time{"a": next, "moved": at, "skipped": next, "busy": at, "idle": next, "stale": next} {
			if got := c.nextExec(task); !got.Equal(want) {
				t.Errorf("%s: next_exec %v after the batch, want %v", task, got, want)
			}
		}
		if runs := c.history("skipped"); len(runs) != 1 || runs[0].Status != backends.RunSkipped || runs[0].Error != skip.Skip {
			t.Fatalf("skipped: history %+v, want one skipped run with the reason", runs)
		}
		// The refused exclusive claim wrote nothing: no run, no fencing
		// number used.
		if runs := c.history("busy"); len(runs) != 2 {
			t.Fatalf("busy: history of %d runs after a refused claim, want the 2 manual ones", len(runs))
		}
		if o := c.claim(manual("busy", newOwner("after"), time.Hour)); o.Fencing != fencingBusy+1 && (!h.ClockFencing || o.Fencing <= fencingBusy) {
			t.Fatalf("busy: fencing %d after the refused claim, want %d", o.Fencing, fencingBusy+1)
		}
		run, err := c.Running(ctx, "a")
		ok(t, err, "running")
		if len(run) != 1 || !sameOcc(run[0], res[0].Occurrence) {
			t.Fatalf("running %+v, want the batch's claim %+v", run, res[0].Occurrence)
		}
		// The same batch again: every scheduled time is taken.
		again := c.claimAll(reqs[:1])
		wantErr(t, again[0].Err, backends.ErrConflict, "batch: claim a claimed time")
		if res := c.claimAll(nil); len(res) != 0 {
			t.Fatalf("empty batch: %d results", len(res))
		}
	})
	// Requests are decided in the order given: a task's times one after
	// another claim together, in the reverse order only the first does.
	t.Run("ClaimBatchOrder", func(t *testing.T) {
		t.Parallel()
		c, _ := freshCrons(t, h)
		t1 := c.putAt("in-order", def, -10*time.Second)
		ok(t, c.PutCron(t.Context(), "reversed", def, t1, true), "put reversed")
		t2, t3 := t1.Add(time.Second), t1.Add(time.Hour)
		res := c.claimAll([]backends.ClaimRequest{
			scheduled("in-order", t1, t2, newOwner("a"), 30*time.Second),
			scheduled("in-order", t2, t3, newOwner("b"), 30*time.Second),
			scheduled("reversed", t2, t3, newOwner("c"), 30*time.Second),
			scheduled("reversed", t1, t2, newOwner("d"), 30*time.Second),
		})
		for _, i := range []int{0, 1, 3} {
			ok(t, res[i].Err, fmt.Sprintf("request %d", i))
		}
		wantErr(t, res[2].Err, backends.ErrConflict, "a later time before the earlier one")
		if got := c.nextExec("in-order"); !got.Equal(t3) {
			t.Fatalf("in-order: next_exec %v, want %v", got, t3)
		}
		if got := c.nextExec("reversed"); !got.Equal(t2) {
			t.Fatalf("reversed: next_exec %v, want %v", got, t2)
		}
		if res[1].Occurrence.Fencing <= res[0].Occurrence.Fencing {
			t.Fatalf("fencing %d then %d: not increasing", res[0].Occurrence.Fencing, res[1].Occurrence.Fencing)
		}
		// Exclusive within one batch: the second time of a task waits for
		// the first, claimed just before it.
		c.putAt("forbid", def, -10*time.Second)
		f1 := c.nextExec("forbid")
		res = c.claimAll([]backends.ClaimRequest{
			exclusive("forbid", f1, f1.Add(time.Second), newOwner("e"), 30*time.Second),
			exclusive("forbid", f1.Add(time.Second), f1.Add(time.Hour), newOwner("f"), 30*time.Second),
		})
		ok(t, res[0].Err, "first exclusive claim")
		wantErr(t, res[1].Err, backends.ErrHeld, "second exclusive claim while the first runs")
	})
	// A schedule reset into the past names a time already claimed: that
	// claim is ErrConflict, and the rest of the batch still claims.
	t.Run("ClaimBatchDuplicate", func(t *testing.T) {
		t.Parallel()
		c, _ := freshCrons(t, h)
		at := c.putAt("again", def, -10*time.Second)
		ok(t, c.PutCron(t.Context(), "other", def, at, true), "put other")
		first := c.claim(scheduled("again", at, at.Add(time.Hour), newOwner("a"), 30*time.Second))
		ok(t, c.PutCron(t.Context(), "again", def, at, true), "reset next_exec to the claimed time")
		res := c.claimAll([]backends.ClaimRequest{
			scheduled("again", at, at.Add(time.Hour), newOwner("b"), 30*time.Second),
			scheduled("other", at, at.Add(time.Hour), newOwner("c"), 30*time.Second),
		})
		wantErr(t, res[0].Err, backends.ErrConflict, "claim of a time that has an occurrence")
		ok(t, res[1].Err, "the other claim of the batch")
		if runs := c.history("again"); len(runs) != 1 || !sameOcc(runs[0].Occurrence, first) {
			t.Fatalf("history %+v, want only the first claim", runs)
		}
		if runs := c.history("other"); len(runs) != 1 || runs[0].Owner != res[1].Occurrence.Owner {
			t.Fatalf("other: history %+v, want the batch's claim", runs)
		}
	})
	// Concurrent batches, from two handles, over the same due tasks in
	// different orders: every occurrence is claimed exactly once.
	t.Run("ClaimBatchRace", func(t *testing.T) {
		t.Parallel()
		c, open := freshCrons(t, h)
		other := open()
		const tasks, racers = 40, 6
		at := c.now().Add(-10 * time.Second)
		next := at.Add(time.Hour)
		for i := range tasks {
			ok(t, c.PutCron(t.Context(), fmt.Sprintf("t%02d", i), def, at, true), "put")
		}
		var mu sync.Mutex
		won := map[string][]string{}
		var wg sync.WaitGroup
		for r := range racers {
			hd := c
			if r%2 == 1 {
				hd = other
			}
			wg.Go(func() {
				reqs := make([]backends.ClaimRequest, tasks)
				// Each racer starts at another task; every other one
				// goes backwards.
				for i := range tasks {
					reqs[i] = scheduled(fmt.Sprintf("t%02d", (i+r*7)%tasks), at, next, newOwner(fmt.Sprint("r", r)), 30*time.Second)
					reqs[i].Exclusive = r%3 == 0
				}
				if r%2 == 0 {
					for i, k := 0, tasks-1; i < k; i, k = i+1, k-1 {
						reqs[i], reqs[k] = reqs[k], reqs[i]
					}
				}
				res, err := hd.ClaimOccurrences(t.Context(), reqs)
				if err != nil {
					t.Errorf("racer %d: %v", r, err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				for i, x := range res {
					switch {
					case x.Err == nil:
						won[reqs[i].Task] = append(won[reqs[i].Task], reqs[i].Owner)
					case !errors.Is(x.Err, backends.ErrConflict):
						t.Errorf("racer %d, %s: %v, want ErrConflict", r, reqs[i].Task, x.Err)
					}
				}
			})
		}
		wg.Wait()
		for i := range tasks {
			n := fmt.Sprintf("t%02d", i)
			if len(won[n]) != 1 {
				t.Errorf("%s claimed %d times (%v), want once", n, len(won[n]), won[n])
			}
			if runs := c.history(n); len(runs) != 1 || runs[0].Owner != won[n][0] {
				t.Errorf("%s: history %+v, want the one winner", n, runs)
			}
		}
	})
	t.Run("Exclusive", func(t *testing.T) {
		t.Parallel()
		c, _ := freshCrons(t, h)
		ctx := t.Context()
		at := c.putAt("solo", def, -10*time.Second)
		live := c.claim(manual("solo", newOwner("live"), time.Hour))
		_, err := c.ClaimOccurrence(ctx, exclusive("solo", at, at.Add(time.Hour), newOwner("x"), 30*time.Second))
		wantErr(t, err, backends.ErrHeld, "exclusive claim while a run is live")
		if got := c.nextExec("solo"); !got.Equal(at) {
			t.Fatalf("next_exec %v after a refused claim, want %v", got, at)
		}
		// A manual run (coordd cron run) under overlap forbid is refused
		// the same way, writing nothing.
		m := manual("solo", newOwner("m"), 30*time.Second)
		m.Exclusive = true
		_, err = c.ClaimOccurrence(ctx, m)
		wantErr(t, err, backends.ErrHeld, "exclusive manual claim while a run is live")
		if runs := c.history("solo"); len(runs) != 1 {
			t.Fatalf("history %+v after a refused manual claim, want the live run alone", runs)
		}
		// A skip is recorded whatever runs.
		skip := exclusive("solo", at, at.Add(time.Second), newOwner("s"), 0)
		skip.Skip = "overlap: previous run still running"
		c.claim(skip)
		c.finish(live, backends.RunResult{Status: backends.RunSucceeded})
		at2 := at.Add(time.Second)
		c.claim(exclusive("solo", at2, at2.Add(time.Hour), newOwner("y"), 30*time.Second))
	})
	t.Run("FinishBatch", func(t *testing.T) {
		t.Parallel()
		c, open := freshCrons(t, h)
		other := open()
		ctx := t.Context()
		c.putAt("x", def, time.Hour)
		c.putAt("short", json.RawMessage(`{"schedule":"* * * * *","command":{"argv":["true"]},"history_limit":1}`), time.Hour)
		ok1 := c.claim(manual("x", newOwner("ok"), time.Hour))
		bad := c.claim(manual("x", newOwner("bad"), time.Hour))
		done := c.claim(manual("x", newOwner("done"), time.Hour))
		c.finish(done, backends.RunResult{Status: backends.RunSucceeded})
		s1 := c.claim(manual("short", newOwner("s1"), time.Hour))
		s2 := c.claim(manual("short", newOwner("s2"), time.Hour))
		thief := ok1
		thief.Owner = newOwner("thief")
		errs, err := other.FinishOccurrences(ctx, []backends.Finish{
			{Occurrence: thief, Result: backends.RunResult{Status: backends.RunSucceeded}},
			{Occurrence: ok1, Result: backends.RunResult{Status: backends.RunSucceeded, Output: []byte("out 1")}},
			{Occurrence: bad, Result: backends.RunResult{Status: backends.RunFailed, ExitCode: 2, Error: "exit status 2"}},
			{Occurrence: done, Result: backends.RunResult{Status: backends.RunSucceeded}},
			{Occurrence: s1, Result: backends.RunResult{Status: backends.RunSucceeded}},
			{Occurrence: s2, Result: backends.RunResult{Status: backends.RunRunning}},
		})
		ok(t, err, "finish a batch")
		if len(errs) != 6 {
			t.Fatalf("%d errors for 6 finishes", len(errs))
		}
		wantErr(t, errs[0], backends.ErrLost, "finish by another owner")
		ok(t, errs[1], "finish ok")
		ok(t, errs[2], "finish failed")
		wantErr(t, errs[3], backends.ErrLost, "finish twice")
		ok(t, errs[4], "finish s1")
		if errs[5] == nil {
			t.Fatal("a finish with status running was accepted")
		}
		if r := findRun(t, c.history("x"), ok1); r.Status != backends.RunSucceeded || string(r.Output) != "out 1" || r.Owner != ok1.Owner {
			t.Fatalf("ok recorded as %+v", r)
		}
		if r := findRun(t, c.history("x"), bad); r.Status != backends.RunFailed || r.ExitCode != 2 || r.Error != "exit status 2" {
			t.Fatalf("bad recorded as %+v", r)
		}
		p, err := c.PendingRetries(ctx, 0)
		ok(t, err, "pending retries")
		if len(p) != 1 || !sameOcc(p[0].Occurrence, bad) {
			t.Fatalf("pending %+v, want the failed run", p)
		}
		// s2 still runs; history_limit 1 kept the finished s1.
		c.finish(s2, backends.RunResult{Status: backends.RunSucceeded})
		if runs := c.history("short"); len(runs) != 1 || !sameOcc(runs[0].Occurrence, s2) {
			t.Fatalf("short: history %+v, want only s2", runs)
		}
		if errs, err := c.FinishOccurrences(ctx, nil); err != nil || len(errs) != 0 {
			t.Fatalf("empty batch: %v, %v", errs, err)
		}
	})
	// A lowered history_limit is applied by the next finish, however many
	// runs are then too many; a full history loses its oldest run.
	t.Run("HistoryLimitLowered", func(t *testing.T) {
		t.Parallel()
		c, _ := freshCrons(t, h)
		limit := func(n int) json.RawMessage {
			return json.RawMessage(fmt.Sprintf(`{"schedule":"* * * * *","command":{"argv":["true"]},"history_limit":%d}`, n))
		}
		c.putAt("low", limit(4), time.Hour)
		var runs []backends.Occurrence
		for range 5 {
			o := c.claim(manual("low", newOwner("r"), time.Hour))
			c.finish(o, backends.RunResult{Status: backends.RunSucceeded})
			runs = append(runs, o)
		}
		if got := c.history("low"); len(got) != 4 || !sameOcc(got[0].Occurrence, runs[4]) || !sameOcc(got[3].Occurrence, runs[1]) {
			t.Fatalf("history_limit 4 after 5 runs: %d runs, want runs 4 to 1", len(got))
		}
		ok(t, c.PutCron(t.Context(), "low", limit(2), time.Time{}, false), "lower history_limit")
		o := c.claim(manual("low", newOwner("last"), time.Hour))
		errs, err := c.FinishOccurrences(t.Context(), []backends.Finish{{Occurrence: o, Result: backends.RunResult{Status: backends.RunSucceeded}}})
		ok(t, err, "finish")
		ok(t, errs[0], "finish")
		if got := c.history("low"); len(got) != 2 || !sameOcc(got[0].Occurrence, o) || !sameOcc(got[1].Occurrence, runs[4]) {
			t.Fatalf("history_limit lowered to 2: %d runs kept, want the last two", len(got))
		}
	})
	t.Run("ExtendBatch", func(t *testing.T) {
		t.Parallel()
		c, open := freshCrons(t, h)
		other := open()
		c.putAt("x", def, time.Hour)
		a := c.claim(manual("x", newOwner("a"), 30*time.Second))
		b := c.claim(manual("x", newOwner("b"), 30*time.Second))
		done := c.claim(manual("x", newOwner("done"), 30*time.Second))
		c.finish(done, backends.RunResult{Status: backends.RunSucceeded})
		short := c.claim(manual("x", newOwner("short"), time.Second))
		waitPast(t, c.b, short.ExpiresAt)
		thief := b
		thief.Owner = newOwner("thief")
		res, err := other.ExtendOccurrences(t.Context(), []backends.Extension{
			{Occurrence: a, Lease: time.Hour},
			{Occurrence: thief, Lease: time.Hour},
			{Occurrence: done, Lease: time.Hour},
			{Occurrence: short, Lease: time.Hour},
			{Occurrence: b, Lease: 2 * time.Hour},
		})
		ok(t, err, "extend a batch")
		if len(res) != 5 {
			t.Fatalf("%d results for 5 extensions", len(res))
		}
		for _, i := range []int{1, 2, 3} {
			wantErr(t, res[i].Err, backends.ErrLost, fmt.Sprintf("extension %d", i))
		}
		ok(t, res[0].Err, "extend a")
		ok(t, res[4].Err, "extend b")
		if res[0].ExpiresAt.Sub(a.ExpiresAt) < 50*time.Minute || res[4].ExpiresAt.Sub(b.ExpiresAt) < 110*time.Minute {
			t.Fatalf("extended to %v and %v, from %v and %v", res[0].ExpiresAt, res[4].ExpiresAt, a.ExpiresAt, b.ExpiresAt)
		}
		run, err := c.Running(t.Context(), "x")
		ok(t, err, "running")
		if len(run) != 2 {
			t.Fatalf("running %+v, want a and b", run)
		}
		for _, r := range run {
			want := res[0].ExpiresAt
			if sameOcc(r, b) {
				want = res[4].ExpiresAt
			}
			if !r.ExpiresAt.Equal(want) {
				t.Fatalf("%s runs until %v, want %v", r.Owner, r.ExpiresAt, want)
			}
		}
		if res, err := c.ExtendOccurrences(t.Context(), nil); err != nil || len(res) != 0 {
			t.Fatalf("empty batch: %v, %v", res, err)
		}
	})
}
