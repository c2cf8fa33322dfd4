package backendtest

import (
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
)

// testQueueDeadJob checks backends.DeadJobs: one dead job requeued or
// purged, the other dead jobs and every live job left alone, and a job
// that is not dead (or of another queue) refused with ErrNotFound and left
// as it was. Every backend that holds queues must implement it: the
// dashboard's buttons on a dead job's page rely on it.
func testQueueDeadJob(t *testing.T, h Harness) {
	t.Parallel()
	b, _ := fresh(t, h)
	ctx := t.Context()
	dj, isDJ := b.(backends.DeadJobs)
	if !isDJ {
		t.Fatalf("the %s backend holds queues but does not implement backends.DeadJobs", b.Type())
	}
	cfg := runtimeConfig("q", 2)
	cfg.MaxAttempts, cfg.RetryBackoff = 1, 0
	q, adm := runtimeQueue(t, b, cfg)
	other := runtimeConfig("other", 1)
	other.MaxAttempts, other.RetryBackoff = 1, 0
	runtimeQueue(t, b, other)

	kill := func(queue string, req backends.PushRequest) backends.Job {
		t.Helper()
		j := push(t, q, queue, req)
		c := claimOne(t, q, queue, newOwner("w"))
		if c.ID != j.ID {
			t.Fatalf("claimed job %d, want %d", c.ID, j.ID)
		}
		ok(t, q.Retry(ctx, c, "boom "+req.Key), "retry to the dead set")
		return j
	}
	a := kill("q", backends.PushRequest{Payload: []byte("a"), Key: "ka"})
	d := kill("q", backends.PushRequest{Payload: []byte("d")})
	x := kill("other", backends.PushRequest{Payload: []byte("x")})
	ready := push(t, q, "q", backends.PushRequest{Payload: []byte("ready"), Delay: time.Hour})
	wantCounts(t, adm, "q", 1, 0, 2, 1)

	for _, tc := range []struct {
		what  string
		queue string
		id    int64
	}{
		{"a job of another queue", "q", x.ID},
		{"a delayed job", "q", ready.ID},
		{"an id never pushed", "q", d.ID + 1000},
		{"an absent queue", "nope", a.ID},
	} {
		wantErr(t, dj.RequeueDeadJob(ctx, tc.queue, tc.id), backends.ErrNotFound, "requeue "+tc.what)
		wantErr(t, dj.PurgeDeadJob(ctx, tc.queue, tc.id), backends.ErrNotFound, "purge "+tc.what)
	}
	wantCounts(t, adm, "q", 1, 0, 2, 1)

	// Requeued: ready now with its attempts reset and its error kept, and
	// claimable again (its key with it); the other dead job stays dead.
	ok(t, dj.RequeueDeadJob(ctx, "q", a.ID), "requeue one dead job")
	wantErr(t, dj.RequeueDeadJob(ctx, "q", a.ID), backends.ErrNotFound, "requeue it twice")
	wantCounts(t, adm, "q", 2, 0, 1, 1)
	dead, err := q.Dead(ctx, "q", 10)
	ok(t, err, "dead")
	if len(dead) != 1 || dead[0].ID != d.ID {
		t.Fatalf("dead jobs after the requeue: %+v, want job %d only", dead, d.ID)
	}
	j := claimOne(t, q, "q", newOwner("w"))
	if j.ID != a.ID || j.Attempt != 1 || j.Key != "ka" || string(j.Payload) != "a" || j.LastError != "boom ka" {
		t.Fatalf("claimed after the requeue: job %d attempt %d key %q payload %q error %q, want job %d attempt 1 key ka payload a error %q",
			j.ID, j.Attempt, j.Key, j.Payload, j.LastError, a.ID, "boom ka")
	}
	ok(t, q.Ack(ctx, j), "ack")

	// Purged: gone, the other queue's dead job untouched.
	ok(t, dj.PurgeDeadJob(ctx, "q", d.ID), "purge one dead job")
	wantErr(t, dj.PurgeDeadJob(ctx, "q", d.ID), backends.ErrNotFound, "purge it twice")
	wantErr(t, dj.RequeueDeadJob(ctx, "q", d.ID), backends.ErrNotFound, "requeue a purged job")
	wantCounts(t, adm, "q", 1, 0, 0, 1)
	wantCounts(t, adm, "other", 0, 0, 1, 0)
}
