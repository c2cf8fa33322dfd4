package backendtest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
)

// testQueueBrowse checks the queue browser's reads and actions
// (backends.Queues): a page of each state in its order, a key's jobs
// alone, payloads and errors cut by the server, one job read in any state,
// a ready or delayed job canceled (its key's next job then claimable), a
// delayed job run now, and every refusal leaving the job as it was.
func testQueueBrowse(t *testing.T, h Harness) {
	t.Parallel()
	b, _ := fresh(t, h)
	ctx := t.Context()
	cfg := runtimeConfig("q", 3)
	cfg.MaxAttempts, cfg.RetryBackoff = 1, 0
	q, adm := runtimeQueue(t, b, cfg)
	other := runtimeConfig("other", 1)
	runtimeQueue(t, b, other)

	// Two dead jobs, two running, three ready (two of key k), two
	// delayed (one of key k: the ready k jobs wait behind nothing, it is
	// pushed after them), one of another queue.
	var dead []backends.Job
	for i := range 2 {
		push(t, q, "q", backends.PushRequest{Payload: []byte(fmt.Sprintf("dead-%d", i))})
		c := claimOne(t, q, "q", newOwner("w"))
		ok(t, q.Retry(ctx, c, strings.Repeat("E", 300)), "retry to the dead set")
		dead = append(dead, c)
	}
	run1 := push(t, q, "q", backends.PushRequest{Payload: []byte("run-1")})
	run2 := push(t, q, "q", backends.PushRequest{Payload: []byte("run-2")})
	running := claim(t, q, "q", newOwner("w"), 2)
	if len(running) != 2 || running[0].ID != run1.ID || running[1].ID != run2.ID {
		t.Fatalf("claimed %+v, want jobs %d and %d", running, run1.ID, run2.ID)
	}
	r1 := push(t, q, "q", backends.PushRequest{Payload: []byte(strings.Repeat("p", 500)), Key: "k"})
	r2 := push(t, q, "q", backends.PushRequest{Payload: []byte("r2")})
	r3 := push(t, q, "q", backends.PushRequest{Payload: []byte("r3"), Key: "k"})
	d1 := push(t, q, "q", backends.PushRequest{Payload: []byte("d1"), Delay: 2 * time.Hour})
	d2 := push(t, q, "q", backends.PushRequest{Payload: []byte("d2"), Key: "k", Delay: time.Hour})
	x := push(t, q, "other", backends.PushRequest{Payload: []byte("x")})
	wantCounts(t, adm, "q", 5, 2, 2, 2)

	ids := func(js []backends.PartialJob) []int64 {
		out := make([]int64, len(js))
		for i, j := range js {
			out[i] = j.ID
		}
		return out
	}
	page := func(p backends.JobPage) []backends.PartialJob {
		t.Helper()
		if p.Limit == 0 {
			p.Limit = 100
		}
		if p.Cut == 0 {
			p.Cut = 1000
		}
		js, err := q.JobsPage(ctx, "q", p)
		ok(t, err, "jobs page "+p.State)
		return js
	}
	for _, c := range []struct {
		p    backends.JobPage
		want []int64
	}{
		{backends.JobPage{State: backends.JobReady}, []int64{r1.ID, r2.ID, r3.ID}},
		{backends.JobPage{State: backends.JobDelayed}, []int64{d2.ID, d1.ID}}, // by due time
		{backends.JobPage{State: backends.JobRunning}, []int64{run1.ID, run2.ID}},
		{backends.JobPage{State: backends.JobDead}, []int64{dead[0].ID, dead[1].ID}},
		{backends.JobPage{State: backends.JobReady, Key: "k"}, []int64{r1.ID, r3.ID}},
		{backends.JobPage{State: backends.JobDelayed, Key: "k"}, []int64{d2.ID}},
		{backends.JobPage{State: backends.JobReady, Key: "none"}, []int64{}},
		{backends.JobPage{State: backends.JobReady, Offset: 1, Limit: 1}, []int64{r2.ID}},
		{backends.JobPage{State: backends.JobReady, Offset: 5}, []int64{}},
	} {
		if got := ids(page(c.p)); !slices.Equal(got, c.want) {
			t.Errorf("page %+v: jobs %v, want %v", c.p, got, c.want)
		}
	}
	js := page(backends.JobPage{State: backends.JobReady, Cut: 10})
	if len(js) != 3 || string(js[0].Payload) != strings.Repeat("p", 10) || js[0].PayloadSize != 500 || js[0].Key != "k" || js[0].Partition < 0 {
		t.Fatalf("a cut ready job: %+v", js[0])
	}
	js = page(backends.JobPage{State: backends.JobDead, Cut: 20})
	if len(js) != 2 || js[0].LastError != strings.Repeat("E", 20) || string(js[0].Payload) != "dead-0" {
		t.Fatalf("a cut dead job: %+v", js[0])
	}
	if js := page(backends.JobPage{State: backends.JobRunning}); len(js) != 2 || js[0].ExpiresAt.IsZero() || js[0].Attempt != 1 {
		t.Fatalf("a running job lacks its lease or attempt: %+v", js[0])
	}
	if _, err := q.JobsPage(ctx, "q", backends.JobPage{State: "lost", Limit: 1}); err == nil {
		t.Fatal("an unknown state was listed")
	}
	if js, err := q.JobsPage(ctx, "nope", backends.JobPage{State: backends.JobReady, Limit: 10}); err != nil || len(js) != 0 {
		t.Fatalf("an absent queue: %v, %v", js, err)
	}

	// One job in each state.
	for _, c := range []struct {
		id    int64
		state string
		body  string
	}{{r2.ID, backends.JobReady, "r2"}, {d1.ID, backends.JobDelayed, "d1"}, {run1.ID, backends.JobRunning, "run-1"}, {dead[1].ID, backends.JobDead, "dead-1"}} {
		j, st, err := q.JobByID(ctx, "q", c.id, 100)
		ok(t, err, "job by id")
		if st != c.state || j.ID != c.id || string(j.Payload) != c.body {
			t.Errorf("job %d: state %s payload %q, want %s %q", c.id, st, j.Payload, c.state, c.body)
		}
	}
	for _, id := range []int64{x.ID, d1.ID + 1000} {
		if _, _, err := q.JobByID(ctx, "q", id, 10); !isNotFound(err) {
			t.Errorf("job %d of another queue or never pushed: %v", id, err)
		}
	}

	// Refusals change nothing.
	for _, c := range []struct {
		what string
		id   int64
	}{{"a running job", run1.ID}, {"a dead job", dead[0].ID}, {"a job of another queue", x.ID}, {"an id never pushed", d1.ID + 1000}} {
		wantErr(t, q.CancelJob(ctx, "q", c.id), backends.ErrNotFound, "cancel "+c.what)
		wantErr(t, q.RunJobNow(ctx, "q", c.id), backends.ErrNotFound, "run now "+c.what)
	}
	wantErr(t, q.RunJobNow(ctx, "q", r2.ID), backends.ErrNotFound, "run now a ready job")
	wantCounts(t, adm, "q", 5, 2, 2, 2)

	// Cancel the first k job: the next one of k is claimable at once.
	ok(t, q.CancelJob(ctx, "q", r1.ID), "cancel a ready job")
	wantErr(t, q.CancelJob(ctx, "q", r1.ID), backends.ErrNotFound, "cancel it twice")
	ok(t, q.CancelJob(ctx, "q", d1.ID), "cancel a delayed job")
	wantCounts(t, adm, "q", 3, 2, 2, 1)
	got := claim(t, q, "q", newOwner("w2"), 5)
	if !slices.Equal(ids(partial(got)), []int64{r2.ID, r3.ID}) {
		t.Fatalf("claimed after the cancels: %v, want %d and %d", ids(partial(got)), r2.ID, r3.ID)
	}
	for _, j := range got {
		ok(t, q.Ack(ctx, j), "ack")
	}

	// Run the delayed k job now: ready, attempts kept, claimable.
	ok(t, q.RunJobNow(ctx, "q", d2.ID), "run a delayed job now")
	wantErr(t, q.RunJobNow(ctx, "q", d2.ID), backends.ErrNotFound, "run it now twice")
	wantCounts(t, adm, "q", 1, 2, 2, 0)
	j := claimOne(t, q, "q", newOwner("w3"))
	if j.ID != d2.ID || j.Key != "k" || j.Attempt != 1 || string(j.Payload) != "d2" {
		t.Fatalf("claimed %+v, want the delayed job %d run now", j, d2.ID)
	}
	wantCounts(t, adm, "other", 1, 0, 0, 0)
}

func partial(js []backends.Job) []backends.PartialJob {
	out := make([]backends.PartialJob, len(js))
	for i, j := range js {
		out[i] = backends.PartialJob{Job: j}
	}
	return out
}

func isNotFound(err error) bool { return errors.Is(err, backends.ErrNotFound) }
