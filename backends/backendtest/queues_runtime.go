package backendtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// runtimeConfig is queueConfig without unique keys, so that tests may push
// one key many times.
func runtimeConfig(name string, partitions int) backends.QueueConfig {
	cfg := queueConfig(name, partitions)
	cfg.Unique = spec.UniqueNone
	return cfg
}

// runtimeQueue creates a queue for the runtime tests and returns both of
// the store's queue interfaces.
func runtimeQueue(t *testing.T, b backends.Backend, cfg backends.QueueConfig) (backends.Queues, backends.Queues) {
	t.Helper()
	adm := queuesOf(t, b)
	putQueue(t, adm, cfg, 0)
	return queuesOf(t, b), adm
}

func push(t *testing.T, q backends.Queues, queue string, req backends.PushRequest) backends.Job {
	t.Helper()
	j, err := q.Push(t.Context(), queue, req)
	ok(t, err, fmt.Sprintf("push %q to %s", req.Key, queue))
	if j.ID == 0 || j.Queue != queue || j.Key != req.Key || j.Priority != req.Priority || j.Attempt != 0 || j.EnqueuedAt.IsZero() || j.AvailableAt.Before(j.EnqueuedAt) {
		t.Fatalf("push %q to %s returned %+v", req.Key, queue, j)
	}
	return j
}

// claim claims and checks what every claimed job must satisfy.
func claim(t *testing.T, q backends.Queues, queue, owner string, n int) []backends.Job {
	t.Helper()
	jobs, err := q.Claim(t.Context(), queue, owner, n)
	ok(t, err, "claim from "+queue+" as "+owner)
	if len(jobs) > n {
		t.Fatalf("claim of up to %d from %s returned %d jobs", n, queue, len(jobs))
	}
	for i, j := range jobs {
		if j.Queue != queue || j.Owner != owner || j.Attempt < 1 || j.ExpiresAt.IsZero() {
			t.Fatalf("claimed job %+v (queue %s, owner %s)", j, queue, owner)
		}
		if i > 0 && claimedBefore(j, jobs[i-1]) {
			t.Fatalf("claimed jobs out of claim order: %d (priority %d) after %d (priority %d)", j.ID, j.Priority, jobs[i-1].ID, jobs[i-1].Priority)
		}
	}
	return jobs
}

// claimedBefore reports whether a comes strictly before b in claim order:
// higher priority first, then lower id.
func claimedBefore(a, b backends.Job) bool {
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	return a.ID < b.ID
}

// claimOne claims exactly one job.
func claimOne(t *testing.T, q backends.Queues, queue, owner string) backends.Job {
	t.Helper()
	jobs := claim(t, q, queue, owner, 1)
	if len(jobs) != 1 {
		t.Fatalf("claim from %s as %s: got %d jobs, want 1", queue, owner, len(jobs))
	}
	return jobs[0]
}

// claimNone checks that nothing is claimable.
func claimNone(t *testing.T, q backends.Queues, queue, what string) {
	t.Helper()
	if jobs := claim(t, q, queue, newOwner("none"), 10); len(jobs) != 0 {
		t.Fatalf("%s: claimed %+v, want nothing", what, jobs)
	}
}

// wantCounts checks the observed job counts of a queue.
func wantCounts(t *testing.T, adm backends.Queues, queue string, ready, inFlight, dead, delayed int64) *backends.QueueState {
	t.Helper()
	st := observeQueue(t, adm, queue)
	if st == nil {
		t.Fatalf("queue %s is absent", queue)
	}
	if st.Ready != ready || st.InFlight != inFlight || st.Dead != dead || st.Delayed != delayed {
		t.Fatalf("queue %s observed with %d ready, %d in flight, %d dead, %d delayed; want %d, %d, %d, %d",
			queue, st.Ready, st.InFlight, st.Dead, st.Delayed, ready, inFlight, dead, delayed)
	}
	return st
}

// testQueues checks the runtime side of queues.
func testQueues(t *testing.T, h Harness) {
	t.Run("PushClaimAck", func(t *testing.T) {
		t.Parallel()
		b, _ := fresh(t, h)
		q, adm := runtimeQueue(t, b, runtimeConfig("q", 4))
		ctx := t.Context()

		_, err := q.Push(ctx, "absent", backends.PushRequest{Payload: []byte("x")})
		wantErr(t, err, backends.ErrNotFound, "push to an absent queue")
		_, err = q.Claim(ctx, "absent", newOwner("c"), 1)
		wantErr(t, err, backends.ErrNotFound, "claim from an absent queue")
		claimNone(t, q, "q", "empty queue")

		var pushed []backends.Job
		for i := range 5 {
			j := push(t, q, "q", backends.PushRequest{Payload: fmt.Appendf(nil, "job %d", i), Key: "same"})
			if i > 0 && j.Partition != pushed[0].Partition {
				t.Fatalf("one key went to partitions %d and %d", pushed[0].Partition, j.Partition)
			}
			pushed = append(pushed, j)
		}
		st := wantCounts(t, adm, "q", 5, 0, 0, 0)
		if st.OldestReady.IsZero() || st.OldestReady.After(pushed[0].EnqueuedAt) {
			t.Errorf("oldest ready %v, want at most the first push's %v", st.OldestReady, pushed[0].EnqueuedAt)
		}

		owner := newOwner("c")
		for i := range 5 {
			j := claimOne(t, q, "q", owner)
			if j.ID != pushed[i].ID || j.Partition != pushed[i].Partition || j.Key != "same" || j.Attempt != 1 ||
				!bytes.Equal(j.Payload, fmt.Appendf(nil, "job %d", i)) {
				t.Fatalf("claim %d returned %+v, want job %d (FIFO within a partition)", i, j, pushed[i].ID)
			}
			wantCounts(t, adm, "q", int64(4-i), 1, 0, 0)
			wrong := j
			wrong.Owner = newOwner("other")
			wantErr(t, q.Ack(ctx, wrong), backends.ErrLost, "ack by another owner")
			ok(t, q.Ack(ctx, j), "ack")
			wantErr(t, q.Ack(ctx, j), backends.ErrLost, "ack twice")
		}
		st = wantCounts(t, adm, "q", 0, 0, 0, 0)
		if !st.OldestReady.IsZero() {
			t.Errorf("empty queue has oldest ready %v", st.OldestReady)
		}
		claimNone(t, q, "q", "drained queue")
	})

	t.Run("Batch", func(t *testing.T) {
		t.Parallel()
		b, _ := fresh(t, h)
		q, adm := runtimeQueue(t, b, runtimeConfig("q", 1))
		for i := range 7 {
			push(t, q, "q", backends.PushRequest{Payload: []byte{byte(i)}})
		}
		owner := newOwner("c")
		if jobs := claim(t, q, "q", owner, 5); len(jobs) != 5 {
			t.Fatalf("claimed %d of 7 jobs with max 5, want 5", len(jobs))
		}
		if jobs := claim(t, q, "q", owner, 5); len(jobs) != 2 {
			t.Fatalf("claimed %d of the 2 left with max 5, want 2", len(jobs))
		}
		wantCounts(t, adm, "q", 0, 7, 0, 0)
	})

	t.Run("PayloadAndUnique", func(t *testing.T) {
		t.Parallel()
		b, _ := fresh(t, h)
		ctx := t.Context()
		cfg := queueConfig("pending", 3)
		cfg.MaxPayload = 16
		q, adm := runtimeQueue(t, b, cfg)
		cfg.Name, cfg.Unique = "running", spec.UniquePendingOrRunning
		putQueue(t, adm, cfg, 0)
		cfg.Name, cfg.Unique = "none", spec.UniqueNone
		putQueue(t, adm, cfg, 0)

		_, err := q.Push(ctx, "pending", backends.PushRequest{Payload: make([]byte, 17)})
		wantErr(t, err, backends.ErrPayloadTooLarge, "push 17 bytes with max_payload 16")
		push(t, q, "pending", backends.PushRequest{Payload: make([]byte, 16)})
		wantCounts(t, adm, "pending", 1, 0, 0, 0)
		claimOne(t, q, "pending", newOwner("c")) // the keyless job, out of the way

		for _, name := range []string{"pending", "running"} {
			first := push(t, q, name, backends.PushRequest{Payload: []byte("1"), Key: "k"})
			dup, err := q.Push(ctx, name, backends.PushRequest{Payload: []byte("2"), Key: "k"})
			wantErr(t, err, backends.ErrDuplicate, name+": second push of a ready key")
			if dup.ID != first.ID {
				t.Fatalf("%s: duplicate push returned job %d, want the existing %d", name, dup.ID, first.ID)
			}
			j := claimOne(t, q, name, newOwner("c"))
			if j.ID != first.ID {
				t.Fatalf("%s: claimed job %d, want %d", name, j.ID, first.ID)
			}
			again, err := q.Push(ctx, name, backends.PushRequest{Payload: []byte("4"), Key: "k"})
			if name == "pending" {
				ok(t, err, "pending: push of a running key")
				if again.ID == first.ID {
					t.Fatalf("pending: push of a running key returned the running job %d", first.ID)
				}
			} else {
				wantErr(t, err, backends.ErrDuplicate, "pending_or_running: push of a running key")
				if again.ID != first.ID {
					t.Fatalf("pending_or_running: push returned job %d, want the running %d", again.ID, first.ID)
				}
			}
		}
		wantCounts(t, adm, "pending", 1, 2, 0, 0)
		wantCounts(t, adm, "running", 0, 1, 0, 0)

		a := push(t, q, "none", backends.PushRequest{Payload: []byte("1"), Key: "k"})
		bb := push(t, q, "none", backends.PushRequest{Payload: []byte("2"), Key: "k"})
		if a.ID == bb.ID {
			t.Fatalf("unique none: two pushes returned one job %d", a.ID)
		}
	})

	t.Run("Delay", func(t *testing.T) {
		t.Parallel()
		b, _ := fresh(t, h)
		q, adm := runtimeQueue(t, b, runtimeConfig("q", 2))
		j := push(t, q, "q", backends.PushRequest{Payload: []byte("later"), Key: "k", Delay: time.Hour})
		if d := j.AvailableAt.Sub(j.EnqueuedAt); d < time.Hour-time.Second || d > time.Hour+time.Second {
			t.Fatalf("job delayed 1h available %v after enqueue", d)
		}
		claimNone(t, q, "q", "only a delayed job")
		wantCounts(t, adm, "q", 1, 0, 0, 1)
		// A later job of the key waits for the delayed one; a job of
		// another key does not.
		push(t, q, "q", backends.PushRequest{Payload: []byte("behind"), Key: "k"})
		claimNone(t, q, "q", "a job behind a delayed job of its key")
		now := push(t, q, "q", backends.PushRequest{Payload: []byte("now"), Key: "other"})
		if got := claimOne(t, q, "q", newOwner("c")); got.ID != now.ID {
			t.Fatalf("claimed job %d, want the undelayed %d", got.ID, now.ID)
		}
		claimNone(t, q, "q", "a delayed job and one behind it left")
		wantCounts(t, adm, "q", 2, 1, 0, 1)
	})

	t.Run("RetryAndDead", func(t *testing.T) {
		t.Parallel()
		b, _ := fresh(t, h)
		ctx := t.Context()
		cfg := runtimeConfig("q", 2)
		cfg.MaxAttempts, cfg.RetryBackoff = 2, 0
		q, adm := runtimeQueue(t, b, cfg)
		cfg.Name, cfg.RetryBackoff = "slow", time.Hour
		putQueue(t, adm, cfg, 0)

		// failAll claims the job and retries it until it is dead.
		failAll := func(want backends.Job) {
			t.Helper()
			for attempt := 1; attempt <= 2; attempt++ {
				owner := newOwner("c")
				j := claimOne(t, q, "q", owner)
				if j.ID != want.ID || j.Attempt != attempt {
					t.Fatalf("claimed job %d attempt %d, want job %d attempt %d", j.ID, j.Attempt, want.ID, attempt)
				}
				if attempt > 1 && j.LastError != "boom 1" {
					t.Errorf("retried job's last error %q, want %q", j.LastError, "boom 1")
				}
				wrong := j
				wrong.Owner = newOwner("other")
				wantErr(t, q.Retry(ctx, wrong, "nope"), backends.ErrLost, "retry by another owner")
				ok(t, q.Retry(ctx, j, fmt.Sprintf("boom %d", attempt)), "retry")
				wantErr(t, q.Retry(ctx, j, "again"), backends.ErrLost, "retry twice")
				if attempt == 1 {
					wantCounts(t, adm, "q", 1, 0, 0, 0)
				}
			}
			wantCounts(t, adm, "q", 0, 0, 1, 0)
			claimNone(t, q, "q", "only a dead job")
		}

		j := push(t, q, "q", backends.PushRequest{Payload: []byte("fails"), Key: "k"})
		failAll(j)
		dead, err := q.Dead(ctx, "q", 10)
		ok(t, err, "list dead")
		if len(dead) != 1 || dead[0].ID != j.ID || dead[0].Attempt != 2 || dead[0].LastError != "boom 2" ||
			!bytes.Equal(dead[0].Payload, []byte("fails")) {
			t.Fatalf("dead jobs %+v, want job %d after 2 attempts with error %q", dead, j.ID, "boom 2")
		}

		n, err := q.RequeueDead(ctx, "q")
		ok(t, err, "requeue dead")
		if n != 1 {
			t.Fatalf("requeued %d dead jobs, want 1", n)
		}
		wantCounts(t, adm, "q", 1, 0, 0, 0)
		failAll(j) // attempts start over

		n, err = q.PurgeDead(ctx, "q")
		ok(t, err, "purge dead")
		if n != 1 {
			t.Fatalf("purged %d dead jobs, want 1", n)
		}
		wantCounts(t, adm, "q", 0, 0, 0, 0)
		if dead, err := q.Dead(ctx, "q", 10); err != nil || len(dead) != 0 {
			t.Fatalf("dead after purge = %+v, %v; want none", dead, err)
		}

		// With a backoff the retried job waits.
		push(t, q, "slow", backends.PushRequest{Payload: []byte("x")})
		j = claimOne(t, q, "slow", newOwner("c"))
		ok(t, q.Retry(ctx, j, "later"), "retry with a backoff")
		wantCounts(t, adm, "slow", 1, 0, 0, 1)
		claimNone(t, q, "slow", "a job in its retry backoff")
	})

	t.Run("ExtendJob", func(t *testing.T) {
		t.Parallel()
		b, _ := fresh(t, h)
		ctx := t.Context()
		q, _ := runtimeQueue(t, b, runtimeConfig("q", 1))
		push(t, q, "q", backends.PushRequest{Payload: []byte("x")})
		j := claimOne(t, q, "q", newOwner("c"))
		exp, err := q.ExtendJob(ctx, j)
		ok(t, err, "extend job")
		if exp.Before(j.ExpiresAt) {
			t.Fatalf("extended expiry %v before the claimed %v", exp, j.ExpiresAt)
		}
		wrong := j
		wrong.Owner = newOwner("other")
		_, err = q.ExtendJob(ctx, wrong)
		wantErr(t, err, backends.ErrLost, "extend by another owner")
		ok(t, q.Ack(ctx, j), "ack")
		_, err = q.ExtendJob(ctx, j)
		wantErr(t, err, backends.ErrLost, "extend an acked job")
	})

	t.Run("VisibilityTimeout", func(t *testing.T) {
		t.Parallel()
		b, _ := fresh(t, h)
		ctx := t.Context()
		cfg := runtimeConfig("q", 2)
		cfg.VisibilityTimeout = time.Second
		q, adm := runtimeQueue(t, b, cfg)
		cfg.Name, cfg.MaxAttempts = "once", 1
		putQueue(t, adm, cfg, 0)

		pushed := push(t, q, "q", backends.PushRequest{Payload: []byte("slow"), Key: "k"})
		push(t, q, "once", backends.PushRequest{Payload: []byte("slow")})
		first := claimOne(t, q, "q", newOwner("first"))
		once := claimOne(t, q, "once", newOwner("first"))
		if first.ID != pushed.ID || first.Attempt != 1 {
			t.Fatalf("claimed %+v, want job %d attempt 1", first, pushed.ID)
		}

		// Poll with another owner until the lease expires and the job is
		// handed out again.
		second := newOwner("second")
		var again backends.Job
		deadline := time.Now().Add(10 * time.Second)
		for {
			jobs := claim(t, q, "q", second, 1)
			if len(jobs) == 1 {
				again = jobs[0]
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("job %d with a 1s visibility timeout not claimable again after 10s", first.ID)
			}
			time.Sleep(pollInterval)
		}
		if again.ID != first.ID || again.Attempt != 2 || again.Owner != second {
			t.Fatalf("reclaimed %+v, want job %d attempt 2 owned by %s", again, first.ID, second)
		}
		// The first owner finished late: it must not ack or extend over the
		// new owner.
		wantErr(t, q.Ack(ctx, first), backends.ErrLost, "late ack by the first owner")
		_, err := q.ExtendJob(ctx, first)
		wantErr(t, err, backends.ErrLost, "late extend by the first owner")
		wantErr(t, q.Retry(ctx, first, "late"), backends.ErrLost, "late retry by the first owner")
		wantCounts(t, adm, "q", 0, 1, 0, 0)
		ok(t, q.Ack(ctx, again), "ack by the second owner")
		wantCounts(t, adm, "q", 0, 0, 0, 0)

		// A job whose attempts are used up goes to the dead set instead.
		// The expiry is applied by Claim, so poll Claim.
		deadline = time.Now().Add(10 * time.Second)
		for observeQueue(t, adm, "once").Dead != 1 {
			claimNone(t, q, "once", "a job out of attempts")
			if time.Now().After(deadline) {
				t.Fatalf("job %d with 1 attempt and a 1s visibility timeout not dead after 10s", once.ID)
			}
			time.Sleep(pollInterval)
		}
		dead, err := q.Dead(ctx, "once", 0)
		ok(t, err, "list dead")
		if len(dead) != 1 || dead[0].ID != once.ID || dead[0].LastError == "" {
			t.Fatalf("dead jobs %+v, want job %d with an error", dead, once.ID)
		}
		wantErr(t, q.Ack(ctx, once), backends.ErrLost, "ack of a job that died")
	})

	t.Run("NoJobLost", func(t *testing.T) {
		t.Parallel()
		b, open := fresh(t, h)
		cfg := runtimeConfig("q", 4)
		cfg.VisibilityTimeout = 10 * time.Minute // no lease expires during the test
		q, adm := runtimeQueue(t, b, cfg)
		const jobs, workers = 500, 4
		pushed := map[int64]bool{}
		for i := range jobs {
			key := ""
			if i%3 == 0 {
				key = fmt.Sprintf("k%d", i%7)
			}
			j := push(t, q, "q", backends.PushRequest{Payload: fmt.Appendf(nil, "%d", i), Key: key})
			pushed[j.ID] = true
		}
		if len(pushed) != jobs {
			t.Fatalf("%d pushes returned %d distinct ids", jobs, len(pushed))
		}

		var mu sync.Mutex
		acked := map[int64]string{}
		errs := make(chan error, workers)
		var wg sync.WaitGroup
		for w := range workers {
			wq := queuesOf(t, open())
			owner := newOwner(fmt.Sprintf("w%d", w))
			wg.Go(func() {
				errs <- func() error {
					for {
						got, err := wq.Claim(t.Context(), "q", owner, 10)
						if err != nil {
							return err
						}
						if len(got) == 0 {
							return nil // nothing ready: every job is claimed
						}
						for _, j := range got {
							if err := wq.Ack(t.Context(), j); err != nil {
								return err
							}
							mu.Lock()
							prev, dup := acked[j.ID]
							acked[j.ID] = owner
							mu.Unlock()
							if dup {
								return fmt.Errorf("job %d acked by %s and %s", j.ID, prev, owner)
							}
						}
					}
				}()
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			ok(t, err, "worker")
		}
		if len(acked) != jobs {
			t.Fatalf("%d of %d jobs acked", len(acked), jobs)
		}
		for id := range pushed {
			if _, ok := acked[id]; !ok {
				t.Fatalf("job %d was never acked", id)
			}
		}
		wantCounts(t, adm, "q", 0, 0, 0, 0)
	})

	t.Run("WaitQueue", func(t *testing.T) {
		t.Parallel()
		b, open := fresh(t, h)
		q, _ := runtimeQueue(t, b, runtimeConfig("q", 2))
		pusher := queuesOf(t, open())
		const maxWait = 10 * time.Second

		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- q.WaitQueue(t.Context(), "q", maxWait) }()
		push(t, pusher, "q", backends.PushRequest{Payload: []byte("wake")})
		select {
		case err := <-done:
			ok(t, err, "wait queue")
			if d := time.Since(start); d >= maxWait {
				t.Fatalf("wait queue returned after %v: not woken by the push", d)
			}
		case <-time.After(maxWait + waitTimeout):
			t.Fatal("wait queue did not return")
		}
		ack := claimOne(t, q, "q", newOwner("c"))
		ok(t, q.Ack(t.Context(), ack), "ack")

		ctx, cancel := context.WithCancel(t.Context())
		go func() { done <- q.WaitQueue(ctx, "q", maxWait) }()
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled wait queue returned %v, want %v", err, context.Canceled)
			}
		case <-time.After(waitTimeout):
			t.Fatal("cancelled wait queue did not return")
		}
	})
}
