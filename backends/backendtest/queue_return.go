package backendtest

import (
	"testing"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// testQueueReturn checks Queues.ReturnJob: a worker whose command cannot
// start gives its claimed jobs back without spending their attempts.
func testQueueReturn(t *testing.T, h Harness) {
	t.Run("AttemptNotCounted", func(t *testing.T) {
		t.Parallel()
		b, _ := fresh(t, h)
		ctx := t.Context()
		cfg := runtimeConfig("q", 2)
		cfg.MaxAttempts, cfg.RetryBackoff = 2, 0
		q, adm := runtimeQueue(t, b, cfg)

		first := push(t, q, "q", backends.PushRequest{Payload: []byte("1"), Key: "k"})
		second := push(t, q, "q", backends.PushRequest{Payload: []byte("2"), Key: "k"})

		// Returned more often than max_attempts allows: never dead, and
		// always first in its partition again.
		for range 2 * cfg.MaxAttempts {
			j := claimOne(t, q, "q", newOwner("w"))
			if j.ID != first.ID || j.Attempt != 1 {
				t.Fatalf("claimed job %d attempt %d, want job %d attempt 1", j.ID, j.Attempt, first.ID)
			}
			wrong := j
			wrong.Owner = newOwner("other")
			wantErr(t, q.ReturnJob(ctx, wrong), backends.ErrLost, "return by another owner")
			ok(t, q.ReturnJob(ctx, j), "return")
			wantErr(t, q.ReturnJob(ctx, j), backends.ErrLost, "return twice")
			wantErr(t, q.Ack(ctx, j), backends.ErrLost, "ack of a returned job")
			wantErr(t, q.Retry(ctx, j, "late"), backends.ErrLost, "retry of a returned job")
			wantCounts(t, adm, "q", 2, 0, 0, 0)
		}

		// A real failure still counts, and a return after it keeps both the
		// attempt that failed and its error.
		j := claimOne(t, q, "q", newOwner("w"))
		ok(t, q.Retry(ctx, j, "boom"), "retry")
		j = claimOne(t, q, "q", newOwner("w"))
		if j.ID != first.ID || j.Attempt != 2 || j.LastError != "boom" {
			t.Fatalf("after a retry: claimed job %d attempt %d error %q, want job %d attempt 2 error boom", j.ID, j.Attempt, j.LastError, first.ID)
		}
		ok(t, q.ReturnJob(ctx, j), "return after a retry")
		j = claimOne(t, q, "q", newOwner("w"))
		if j.ID != first.ID || j.Attempt != 2 || j.LastError != "boom" {
			t.Fatalf("after a return: claimed job %d attempt %d error %q, want job %d attempt 2 error boom", j.ID, j.Attempt, j.LastError, first.ID)
		}
		ok(t, q.Ack(ctx, j), "ack")
		if j := claimOne(t, q, "q", newOwner("w")); j.ID != second.ID || j.Attempt != 1 {
			t.Fatalf("claimed job %d attempt %d, want job %d attempt 1", j.ID, j.Attempt, second.ID)
		}
	})

	t.Run("PendingAgain", func(t *testing.T) {
		t.Parallel()
		b, _ := fresh(t, h)
		ctx := t.Context()
		cfg := runtimeConfig("q", 3)
		cfg.Unique = spec.UniquePending
		q, adm := runtimeQueue(t, b, cfg)

		j := push(t, q, "q", backends.PushRequest{Payload: []byte("x"), Key: "k"})
		c := claimOne(t, q, "q", newOwner("w"))
		// Running: under unique pending a second push of the key is taken.
		again := push(t, q, "q", backends.PushRequest{Payload: []byte("y"), Key: "k"})
		ok(t, q.ReturnJob(ctx, c), "return")
		wantCounts(t, adm, "q", 2, 0, 0, 0)
		// Pending again: the returned job is the one a push collides with.
		dup, err := q.Push(ctx, "q", backends.PushRequest{Payload: []byte("z"), Key: "k"})
		wantErr(t, err, backends.ErrDuplicate, "push of a returned key")
		if dup.ID != j.ID {
			t.Fatalf("duplicate push returned job %d, want the returned job %d", dup.ID, j.ID)
		}
		for _, want := range []int64{j.ID, again.ID} {
			c := claimOne(t, q, "q", newOwner("w"))
			if c.ID != want || c.Attempt != 1 {
				t.Fatalf("claimed job %d attempt %d, want job %d attempt 1", c.ID, c.Attempt, want)
			}
			ok(t, q.Ack(ctx, c), "ack") // the next job of the key waits for it
		}
	})
}
