package backendtest

import (
	"sync"
	"testing"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// testQueuePushOnce checks PushOnce: a once key pushes one job, and every
// later push of it (after the job ran and was acked too) returns that job
// without pushing; a push that finds a pending duplicate records the
// duplicate; pushes of one key at once from two handles push one job; a
// bad once key is refused before anything is written.
func testQueuePushOnce(t *testing.T, h Harness) {
	t.Parallel()
	b, open := fresh(t, h)
	ctx := t.Context()
	cfg := runtimeConfig("q", 2)
	cfg.Unique = spec.UniquePending
	q, _ := runtimeQueue(t, b, cfg)

	if _, _, err := q.PushOnce(ctx, "q", "", backends.PushRequest{Payload: []byte("x")}); err == nil {
		t.Fatal("PushOnce accepted an empty once key")
	}
	j, pushed, err := q.PushOnce(ctx, "q", "cron/t/1", backends.PushRequest{Payload: []byte("first")})
	ok(t, err, "push once")
	if !pushed || j.ID == 0 {
		t.Fatalf("first push once = %+v, pushed %v", j, pushed)
	}
	again, pushed, err := q.PushOnce(ctx, "q", "cron/t/1", backends.PushRequest{Payload: []byte("second")})
	ok(t, err, "push once again")
	if pushed || again.ID != j.ID {
		t.Fatalf("second push once = job %d, pushed %v; want job %d, not pushed", again.ID, pushed, j.ID)
	}
	got := claimOne(t, q, "q", newOwner("w"))
	if got.ID != j.ID || string(got.Payload) != "first" {
		t.Fatalf("claimed %+v, want job %d with the first payload", got, j.ID)
	}
	claimNone(t, q, "q", "after a push once repeated")
	ok(t, q.Ack(ctx, got), "ack")
	after, pushed, err := q.PushOnce(ctx, "q", "cron/t/1", backends.PushRequest{Payload: []byte("third")})
	ok(t, err, "push once after the ack")
	if pushed || after.ID != j.ID {
		t.Fatalf("push once after the job ran = job %d, pushed %v; want job %d, not pushed", after.ID, pushed, j.ID)
	}
	claimNone(t, q, "q", "after a push once of a job that ran")

	// A pending duplicate of the job's key stands for the push.
	dup := push(t, q, "q", backends.PushRequest{Payload: []byte("dup"), Key: "k"})
	d, pushed, err := q.PushOnce(ctx, "q", "cron/t/2", backends.PushRequest{Payload: []byte("y"), Key: "k"})
	ok(t, err, "push once of a pending key")
	if pushed || d.ID != dup.ID {
		t.Fatalf("push once of a pending key = job %d, pushed %v; want the pending job %d", d.ID, pushed, dup.ID)
	}
	if d2, pushed, err := q.PushOnce(ctx, "q", "cron/t/2", backends.PushRequest{Payload: []byte("z")}); err != nil || pushed || d2.ID != dup.ID {
		t.Fatalf("push once again = job %d, pushed %v, %v; want job %d recorded", d2.ID, pushed, err, dup.ID)
	}

	// Pushes of one key at once, from two handles: one job.
	handles := []backends.Queues{q, queuesOf(t, open())}
	var mu sync.Mutex
	ids := map[int64]bool{}
	npushed := 0
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			j, pushed, err := handles[i%2].PushOnce(ctx, "q", "cron/t/3", backends.PushRequest{Payload: []byte("race")})
			if err != nil {
				t.Errorf("push once: %v", err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			ids[j.ID] = true
			if pushed {
				npushed++
			}
		}()
	}
	wg.Wait()
	if len(ids) != 1 || npushed != 1 {
		t.Fatalf("8 pushes once of one key: jobs %v, %d pushed; want one job pushed once", ids, npushed)
	}
	if _, err := q.PrunePushOnce(ctx, backends.PushOnceRetention); err != nil {
		t.Fatalf("prune: %v", err)
	}
	if j, pushed, err := q.PushOnce(ctx, "q", "cron/t/1", backends.PushRequest{Payload: []byte("x")}); err != nil || pushed || j.ID != got.ID {
		t.Fatalf("a prune within the retention forgot a record: %+v, %v, %v", j, pushed, err)
	}
}
