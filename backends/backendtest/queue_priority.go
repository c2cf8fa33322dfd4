package backendtest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// testQueuePriority checks job priorities (PushRequest.Priority): among
// the claimable jobs a higher priority is claimed first and one priority
// is claimed in push order, whatever the partition; a job keeps its
// priority through every way back to ready; and a priority never lets a
// job overtake an older job of its key.
func testQueuePriority(t *testing.T, h Harness) {
	// ids lists the jobs' ids, for comparisons and failure messages.
	ids := func(jobs []backends.Job) []int64 {
		out := make([]int64, len(jobs))
		for i, j := range jobs {
			out[i] = j.ID
		}
		return out
	}

	t.Run("HigherFirstThenPushOrder", func(t *testing.T) {
		t.Parallel()
		b, open := fresh(t, h)
		q, _ := runtimeQueue(t, b, runtimeConfig("q", spec.DefaultPartitions))
		prios := []int{0, 0, 5, -3, 5, spec.MaxPriority, 0, spec.MinPriority, -3, 5}
		var pushed []backends.Job
		for i, p := range prios {
			pushed = append(pushed, push(t, q, "q", backends.PushRequest{Payload: fmt.Appendf(nil, "j%d", i), Priority: p}))
		}
		want := slices.Clone(pushed)
		slices.SortStableFunc(want, func(a, b backends.Job) int { return b.Priority - a.Priority })

		// One claim at a time, from a second handle.
		other := queuesOf(t, open())
		var got []backends.Job
		for range 4 {
			got = append(got, claimOne(t, other, "q", newOwner("c")))
		}
		// Then the rest in one batch, which comes back in claim order.
		got = append(got, claim(t, q, "q", newOwner("c"), len(prios))...)
		if !slices.Equal(ids(got), ids(want)) {
			t.Fatalf("claimed %v, want %v (priorities %v)", ids(got), ids(want), prios)
		}
		for i, j := range got {
			if j.Priority != want[i].Priority {
				t.Fatalf("claimed job %d with priority %d, pushed with %d", j.ID, j.Priority, want[i].Priority)
			}
		}
	})

	t.Run("OneBatchTakesTheHighest", func(t *testing.T) {
		t.Parallel()
		b, _ := fresh(t, h)
		q, _ := runtimeQueue(t, b, runtimeConfig("q", spec.DefaultPartitions))
		// Many old jobs of the default priority, then a few urgent ones:
		// the first claim takes the urgent ones and the oldest others.
		var low []backends.Job
		for i := range 40 {
			low = append(low, push(t, q, "q", backends.PushRequest{Payload: fmt.Appendf(nil, "low-%d", i)}))
		}
		var high []backends.Job
		for i := range 3 {
			high = append(high, push(t, q, "q", backends.PushRequest{Payload: fmt.Appendf(nil, "high-%d", i), Priority: 1}))
		}
		got := claim(t, q, "q", newOwner("c"), 5)
		want := append(slices.Clone(high), low[:2]...)
		if !slices.Equal(ids(got), ids(want)) {
			t.Fatalf("first claim of 5 took %v, want the 3 urgent jobs then the 2 oldest: %v", ids(got), ids(want))
		}
	})

	t.Run("DelayedWaits", func(t *testing.T) {
		t.Parallel()
		b, _ := fresh(t, h)
		q, _ := runtimeQueue(t, b, runtimeConfig("q", spec.DefaultPartitions))
		later := push(t, q, "q", backends.PushRequest{Payload: []byte("later"), Priority: 9, Delay: time.Hour})
		now := push(t, q, "q", backends.PushRequest{Payload: []byte("now")})
		if j := claimOne(t, q, "q", newOwner("c")); j.ID != now.ID {
			t.Fatalf("claimed %d, want the available job %d, not the delayed urgent one %d", j.ID, now.ID, later.ID)
		}
		claimNone(t, q, "q", "a delayed job of high priority")
	})

	t.Run("KeyOrderKept", func(t *testing.T) {
		t.Parallel()
		b, _ := fresh(t, h)
		ctx := t.Context()
		cfg := runtimeConfig("q", spec.DefaultPartitions)
		cfg.VisibilityTimeout = 10 * time.Minute
		q, _ := runtimeQueue(t, b, cfg)
		k1 := push(t, q, "q", backends.PushRequest{Payload: []byte("k1"), Key: "k"})
		k2 := push(t, q, "q", backends.PushRequest{Payload: []byte("k2"), Key: "k", Priority: 10})
		free := push(t, q, "q", backends.PushRequest{Payload: []byte("free"), Priority: 5})
		// k2 may not start before k1, its key's older job: one claim takes
		// free (priority 5), then k1; k2 waits.
		got := claim(t, q, "q", newOwner("c"), 3)
		if want := []int64{free.ID, k1.ID}; !slices.Equal(ids(got), want) {
			t.Fatalf("claimed %v, want free %d then k1 %d (k2 %d waits for k1)", ids(got), free.ID, k1.ID, k2.ID)
		}
		claimNone(t, q, "q", "k2 while k1 runs")
		ok(t, q.Ack(ctx, got[1]), "ack k1")
		if j := claimOne(t, q, "q", newOwner("c")); j.ID != k2.ID || j.Priority != 10 {
			t.Fatalf("after k1's ack: claimed %d priority %d, want k2 %d priority 10", j.ID, j.Priority, k2.ID)
		}
	})

	t.Run("KeptThroughRetryReturnExpiryRequeue", func(t *testing.T) {
		t.Parallel()
		b, _ := fresh(t, h)
		ctx := t.Context()
		cfg := runtimeConfig("q", spec.DefaultPartitions)
		cfg.MaxAttempts, cfg.RetryBackoff, cfg.VisibilityTimeout = 3, 0, time.Second
		q, adm := runtimeQueue(t, b, cfg)
		for i := range 3 {
			push(t, q, "q", backends.PushRequest{Payload: fmt.Appendf(nil, "low-%d", i)})
		}
		urgent := push(t, q, "q", backends.PushRequest{Payload: []byte("urgent"), Priority: 7})
		first := func(what string) backends.Job {
			t.Helper()
			j := claimOne(t, q, "q", newOwner("w"))
			if j.ID != urgent.ID || j.Priority != 7 {
				t.Fatalf("%s: claimed %d priority %d, want the urgent job %d priority 7", what, j.ID, j.Priority, urgent.ID)
			}
			return j
		}
		j := first("first claim")
		ok(t, q.Retry(ctx, j, "boom"), "retry")
		j = first("after a retry")
		ok(t, q.ReturnJob(ctx, j), "return")
		j = first("after a return")
		// Its owner dies: once the lease expired, the job is claimed first
		// again (the jobs of priority 0 stay claimable meanwhile, so the
		// claim waits for the lease rather than polling).
		time.Sleep(time.Until(j.ExpiresAt) + 100*time.Millisecond)
		again := first("after its lease expired")
		ok(t, q.Retry(ctx, again, "out of attempts"), "retry out of attempts")
		wantCounts(t, adm, "q", 3, 0, 1, 0)
		n, err := q.RequeueDead(ctx, "q")
		ok(t, err, "requeue dead")
		if n != 1 {
			t.Fatalf("requeued %d, want 1", n)
		}
		first("after a requeue of the dead set")
		pj, _, err := q.JobByID(ctx, "q", urgent.ID, 16)
		ok(t, err, "job by id")
		if pj.Priority != 7 {
			t.Fatalf("JobByID: priority %d, want 7", pj.Priority)
		}
	})

	t.Run("OutOfRangeRefused", func(t *testing.T) {
		t.Parallel()
		b, _ := fresh(t, h)
		q, adm := runtimeQueue(t, b, runtimeConfig("q", spec.DefaultPartitions))
		for _, p := range []int{spec.MaxPriority + 1, spec.MinPriority - 1} {
			_, err := q.Push(t.Context(), "q", backends.PushRequest{Payload: []byte("x"), Priority: p})
			wantErr(t, err, spec.ErrInvalidPriority, fmt.Sprintf("push with priority %d", p))
			_, _, err = q.PushOnce(t.Context(), "q", "once", backends.PushRequest{Payload: []byte("x"), Priority: p})
			wantErr(t, err, spec.ErrInvalidPriority, fmt.Sprintf("push once with priority %d", p))
		}
		wantCounts(t, adm, "q", 0, 0, 0, 0)
	})
}

// UrgentFirstAfterMigration is the end of each SQL store's test of the
// migration that added priorities: old holds the ids of the jobs of queue
// pushed before it, in push order. A job pushed now with a priority is
// claimed before them, and they keep priority 0 and their order.
func UrgentFirstAfterMigration(t *testing.T, b backends.Backend, queue string, old []int64) {
	t.Helper()
	ctx := t.Context()
	q := b.Queues()
	urgent, err := q.Push(ctx, queue, backends.PushRequest{Payload: []byte("urgent"), Priority: 3})
	if err != nil {
		t.Fatal(err)
	}
	claimed, err := q.Claim(ctx, queue, "w", len(old)+10)
	if err != nil {
		t.Fatal(err)
	}
	var got, want []string
	for _, j := range claimed {
		got = append(got, fmt.Sprintf("%d/%d", j.ID, j.Priority))
	}
	want = append(want, fmt.Sprintf("%d/3", urgent.ID))
	for _, id := range old {
		want = append(want, fmt.Sprintf("%d/0", id))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("queue %s: claimed %v (id/priority), want %v", queue, got, want)
	}
}
