package backendtest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
)

// testQueueAttemptErrors checks that a retry adds its reason to the job's
// attempt errors with the attempt, the backend's time and the worker the
// owner token names; that one-job reads return them in order, oldest
// first, the newest MaxAttemptErrors kept; that a dead job keeps them;
// that pages (which must stay cheap) leave them out; and that a retry by a
// token that lost the job adds nothing.
func testQueueAttemptErrors(t *testing.T, h Harness) {
	t.Parallel()
	b, _ := fresh(t, h)
	ctx := t.Context()
	cfg := runtimeConfig("q", 1)
	cfg.RetryBackoff, cfg.MaxAttempts = 0, backends.MaxAttemptErrors+2
	q, _ := runtimeQueue(t, b, cfg)
	pushed := push(t, q, "q", backends.PushRequest{Payload: []byte("p")})

	before, err := b.Now(ctx)
	ok(t, err, "now")
	for i := 1; i <= cfg.MaxAttempts; i++ {
		owner := fmt.Sprintf("web-%d:%d:%s", i%3, 100+i, newOwner("w"))
		j := claimOne(t, q, "q", owner)
		if j.ID != pushed.ID || j.Attempt != i {
			t.Fatalf("claim %d: job %d attempt %d, want job %d attempt %d", i, j.ID, j.Attempt, pushed.ID, i)
		}
		if i == 2 {
			stale := j
			stale.Owner = newOwner("stale")
			wantErr(t, q.Retry(ctx, stale, "not the owner"), backends.ErrLost, "retry by a token that does not hold the job")
		}
		ok(t, q.Retry(ctx, j, fmt.Sprintf("attempt %d failed\nstderr line %d", i, i)), "retry")
	}
	after, err := b.Now(ctx)
	ok(t, err, "now")

	dead, err := q.DeadJob(ctx, "q", pushed.ID, 1<<10)
	ok(t, err, "read the dead job")
	byID, state, err := q.JobByID(ctx, "q", pushed.ID, 1<<10)
	ok(t, err, "read the job by id")
	if state != backends.JobDead {
		t.Fatalf("state %q, want dead", state)
	}
	for what, errs := range map[string][]backends.AttemptError{"DeadJob": dead.Errors, "JobByID": byID.Errors} {
		if len(errs) != backends.MaxAttemptErrors {
			t.Fatalf("%s: %d attempt errors, want the newest %d: %+v", what, len(errs), backends.MaxAttemptErrors, errs)
		}
		first := cfg.MaxAttempts - backends.MaxAttemptErrors + 1
		var prev time.Time
		for k, e := range errs {
			n := first + k
			want := fmt.Sprintf("attempt %d failed\nstderr line %d", n, n)
			if e.Attempt != n || e.Error != want || e.Worker != fmt.Sprintf("web-%d:%d", n%3, 100+n) {
				t.Fatalf("%s: error %d = %+v; want attempt %d, %q, worker web-%d:%d", what, k, e, n, want, n%3, 100+n)
			}
			if e.At.Before(before.Add(-time.Millisecond)) || e.At.After(after.Add(time.Millisecond)) || e.At.Before(prev) {
				t.Fatalf("%s: error %d at %v: want backend time in [%v, %v], not before the one before (%v)", what, k, e.At, before, after, prev)
			}
			if strings.Contains(e.Error, "not the owner") {
				t.Fatalf("%s: a retry that lost the job was recorded: %+v", what, e)
			}
			prev = e.At
		}
	}
	page, err := q.JobsPage(ctx, "q", backends.JobPage{State: backends.JobDead, Limit: 10, Cut: 1 << 10})
	ok(t, err, "dead page")
	if len(page) != 1 || page[0].Errors != nil {
		t.Fatalf("dead page = %+v; want the job without its attempt errors", page)
	}

	// A job that never failed has none; a bare owner token names no worker.
	never := push(t, q, "q", backends.PushRequest{Payload: []byte("f")})
	got, _, err := q.JobByID(ctx, "q", never.ID, 10)
	ok(t, err, "read a fresh job")
	if len(got.Errors) != 0 {
		t.Fatalf("a job never tried has attempt errors %+v", got.Errors)
	}
	j := claimOne(t, q, "q", "0123456789abcdef")
	ok(t, q.Retry(ctx, j, "bare"), "retry by a bare token")
	got, _, err = q.JobByID(ctx, "q", never.ID, 10)
	ok(t, err, "read the retried job")
	if len(got.Errors) != 1 || got.Errors[0].Worker != "" || got.Errors[0].Error != "bare" || got.Errors[0].Attempt != 1 {
		t.Fatalf("attempt errors %+v; want one, attempt 1, no worker, error bare", got.Errors)
	}
}

// testQueueCounts checks the queue counts: adds of several writers sum in
// the minute of the backend's now, each queue apart; zero counts write
// nothing; a read covers the minutes within its span; a prune keeps what
// is within the retention; deleting a queue deletes its counts.
func testQueueCounts(t *testing.T, h Harness) {
	t.Parallel()
	b, open := fresh(t, h)
	ctx := t.Context()
	q, adm := runtimeQueue(t, b, runtimeConfig("q", 1))
	runtimeQueue(t, b, runtimeConfig("other", 1))
	other := queuesOf(t, open())

	empty, err := q.ReadQueueCounts(ctx, "q", time.Hour)
	ok(t, err, "read before any add")
	now, err := b.Now(ctx)
	ok(t, err, "now")
	if len(empty.Minutes) != 0 || empty.Now.IsZero() || empty.Now.Sub(now).Abs() > time.Minute {
		t.Fatalf("counts before any add = %+v; want none, with the backend's now (about %v)", empty, now)
	}
	ok(t, q.AddQueueCounts(ctx, map[string]backends.QueueCount{"q": {Processed: 5, Failed: 1}, "other": {Processed: 7}}), "add")
	ok(t, other.AddQueueCounts(ctx, map[string]backends.QueueCount{"q": {Processed: 2, Failed: 3}, "zero": {}}), "add from another handle")
	ok(t, q.AddQueueCounts(ctx, nil), "add nothing")

	c, err := other.ReadQueueCounts(ctx, "q", time.Hour)
	ok(t, err, "read")
	if sum := c.Since(time.Hour); sum != (backends.QueueCount{Processed: 7, Failed: 4}) {
		t.Fatalf("counts of q over an hour = %+v (minutes %+v); want processed 7, failed 4", sum, c.Minutes)
	}
	if len(c.Minutes) == 0 || len(c.Minutes) > 2 {
		t.Fatalf("minutes %+v; want the one or two minutes the adds fell in", c.Minutes)
	}
	for _, m := range c.Minutes {
		if m.Minute.Truncate(time.Minute) != m.Minute || m.Minute.After(c.Now) || c.Now.Sub(m.Minute) > 2*time.Minute {
			t.Fatalf("minute %v: want the start of a minute just before the backend's now %v", m.Minute, c.Now)
		}
	}
	if o, err := q.ReadQueueCounts(ctx, "other", time.Hour); err != nil || o.Since(time.Hour) != (backends.QueueCount{Processed: 7}) {
		t.Fatalf("counts of other = %+v, %v; want processed 7", o, err)
	}
	if z, err := q.ReadQueueCounts(ctx, "zero", time.Hour); err != nil || len(z.Minutes) != 0 {
		t.Fatalf("zero counts wrote %+v, %v", z, err)
	}
	_, err = q.PruneQueueCounts(ctx, backends.QueueCountRetention)
	ok(t, err, "prune")
	if c, err := q.ReadQueueCounts(ctx, "q", time.Hour); err != nil || c.Since(time.Hour).Processed != 7 {
		t.Fatalf("a prune of what is older than the retention dropped recent counts: %+v, %v", c, err)
	}

	ok(t, adm.DeleteQueue(ctx, "q", true), "delete the queue")
	if c, err := q.ReadQueueCounts(ctx, "q", time.Hour); err != nil || len(c.Minutes) != 0 {
		t.Fatalf("counts of a deleted queue = %+v, %v; want none", c, err)
	}
	if o, err := q.ReadQueueCounts(ctx, "other", time.Hour); err != nil || o.Since(time.Hour).Processed != 7 {
		t.Fatalf("deleting q touched other's counts: %+v, %v", o, err)
	}
}
