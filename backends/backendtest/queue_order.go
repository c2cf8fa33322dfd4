package backendtest

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// testQueueOrder checks the claim order of backends.Queues.Claim:
// jobs come back oldest first whatever their partition, and the jobs
// of one key run one at a time in push order, through retries, expired
// leases, returns and the dead set, while other keys' jobs run beside them.
func testQueueOrder(t *testing.T, h Harness) {
	t.Run("PushOrderAcrossPartitions", func(t *testing.T) {
		t.Parallel()
		b, _ := fresh(t, h)
		q, _ := runtimeQueue(t, b, runtimeConfig("q", spec.DefaultPartitions))
		var pushed []int64
		for i := range 12 {
			pushed = append(pushed, push(t, q, "q", backends.PushRequest{Payload: fmt.Appendf(nil, "j%d", i)}).ID)
		}
		// One claimer: single claims, then batches, each in push order.
		owner := newOwner("c")
		var got []int64
		for range 4 {
			got = append(got, claimOne(t, q, "q", owner).ID)
		}
		for _, n := range []int{3, 5} {
			for _, j := range claim(t, q, "q", owner, n) {
				got = append(got, j.ID)
			}
		}
		if !slices.Equal(got, pushed) {
			t.Fatalf("one claimer got jobs %v, want push order %v", got, pushed)
		}
	})

	t.Run("KeyOneAtATime", func(t *testing.T) {
		t.Parallel()
		b, open := fresh(t, h)
		cfg := runtimeConfig("q", spec.DefaultPartitions)
		cfg.VisibilityTimeout = 10 * time.Minute // no lease expires during the test
		q, adm := runtimeQueue(t, b, cfg)
		// Jobs of the key under test interleaved with jobs of other keys
		// and jobs without one.
		const perKey = 8
		keys := []string{"user-7", "other-1", "other-2"}
		pushedBy := map[string][]int64{}
		total := 0
		for i := range perKey {
			for _, k := range keys {
				j := push(t, q, "q", backends.PushRequest{Payload: fmt.Appendf(nil, "%s-%d", k, i), Key: k})
				pushedBy[k] = append(pushedBy[k], j.ID)
				total++
			}
			push(t, q, "q", backends.PushRequest{Payload: fmt.Appendf(nil, "free-%d", i)})
			total++
		}

		// Several workers (store handles), several claimers each, each
		// holding its jobs a while before it acks them. Events are
		// numbered in the order they happen (seq), not timed.
		type span struct{ claimed, done int64 }
		var seq atomic.Int64
		var mu sync.Mutex
		spans := map[int64]span{}
		keyOf := map[int64]string{}
		var acked atomic.Int64
		const workers, claimers = 3, 3
		errs := make(chan error, workers*claimers)
		var wg sync.WaitGroup
		for w := range workers {
			wq := queuesOf(t, open())
			for c := range claimers {
				wg.Go(func() {
					errs <- func() error {
						deadline := time.Now().Add(waitTimeout)
						for acked.Load() < int64(total) {
							if time.Now().After(deadline) {
								return fmt.Errorf("only %d of %d jobs acked after %v", acked.Load(), total, waitTimeout)
							}
							got, err := wq.Claim(t.Context(), "q", newOwner(fmt.Sprintf("w%d.%d", w, c)), 2)
							if err != nil {
								return err
							}
							at := seq.Add(1)
							if len(got) == 0 {
								time.Sleep(5 * time.Millisecond)
								continue
							}
							time.Sleep(20 * time.Millisecond) // the jobs run
							done := seq.Add(1)
							for _, j := range got {
								mu.Lock()
								_, dup := spans[j.ID]
								spans[j.ID], keyOf[j.ID] = span{at, done}, j.Key
								mu.Unlock()
								if dup {
									return fmt.Errorf("job %d claimed twice", j.ID)
								}
								if err := wq.Ack(t.Context(), j); err != nil {
									return err
								}
								acked.Add(1)
							}
						}
						return nil
					}()
				})
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			ok(t, err, "claimer")
		}
		for _, k := range keys {
			ids := pushedBy[k]
			byClaim := slices.Clone(ids)
			slices.SortFunc(byClaim, func(a, b int64) int { return cmp.Compare(spans[a].claimed, spans[b].claimed) })
			if !slices.Equal(byClaim, ids) {
				t.Errorf("key %s: jobs claimed in the order %v, want push order %v", k, byClaim, ids)
			}
			for i := 1; i < len(ids); i++ {
				prev, next := spans[ids[i-1]], spans[ids[i]]
				if next.claimed < prev.done {
					t.Errorf("key %s: job %d was claimed while job %d was still running", k, ids[i], ids[i-1])
				}
			}
		}
		// Other keys ran beside the key under test: some job of another
		// key was claimed while a job of user-7 ran.
		beside := false
		for id, s := range spans {
			if keyOf[id] == "user-7" {
				continue
			}
			for _, kid := range pushedBy["user-7"] {
				if ks := spans[kid]; s.claimed < ks.done && ks.claimed < s.done {
					beside = true
				}
			}
		}
		if !beside {
			t.Errorf("no job of another key ran while a job of user-7 did")
		}
		wantCounts(t, adm, "q", 0, 0, 0, 0)
	})

	t.Run("KeyBlocksOnlyItsKey", func(t *testing.T) {
		t.Parallel()
		b, open := fresh(t, h)
		ctx := t.Context()
		q, _ := runtimeQueue(t, b, runtimeConfig("q", spec.DefaultPartitions))
		other := queuesOf(t, open())
		var k []int64
		for i := range 3 {
			k = append(k, push(t, q, "q", backends.PushRequest{Payload: fmt.Appendf(nil, "k%d", i), Key: "k"}).ID)
		}
		a := push(t, q, "q", backends.PushRequest{Payload: []byte("a"), Key: "a"})
		free := push(t, q, "q", backends.PushRequest{Payload: []byte("free")})

		// One claim takes one job of k, and the jobs of other keys with it.
		first := claim(t, q, "q", newOwner("w1"), 10)
		if ids := jobIDs(first); !slices.Equal(ids, []int64{k[0], a.ID, free.ID}) {
			t.Fatalf("first claim got %v, want %v (one job of k, then the others)", ids, []int64{k[0], a.ID, free.ID})
		}
		claimNone(t, other, "q", "the next jobs of k while k's first runs")
		ok(t, q.Ack(ctx, first[0]), "ack k's first job")
		second := claim(t, other, "q", newOwner("w2"), 10)
		if ids := jobIDs(second); !slices.Equal(ids, []int64{k[1]}) {
			t.Fatalf("after the ack: claimed %v, want only k's second job %d", ids, k[1])
		}
	})

	t.Run("KeyRetryBackoff", func(t *testing.T) {
		t.Parallel()
		b, _ := fresh(t, h)
		ctx := t.Context()
		cfg := runtimeConfig("q", spec.DefaultPartitions)
		cfg.MaxAttempts, cfg.RetryBackoff = 3, time.Second
		q, _ := runtimeQueue(t, b, cfg)
		k1 := push(t, q, "q", backends.PushRequest{Payload: []byte("k1"), Key: "k"})
		k2 := push(t, q, "q", backends.PushRequest{Payload: []byte("k2"), Key: "k"})
		o := push(t, q, "q", backends.PushRequest{Payload: []byte("o"), Key: "o"})

		j := claimOne(t, q, "q", newOwner("w"))
		if j.ID != k1.ID {
			t.Fatalf("claimed job %d, want k's first %d", j.ID, k1.ID)
		}
		ok(t, q.Retry(ctx, j, "boom"), "retry with a backoff")
		// While k1 waits out its backoff, k2 waits behind it; o does not.
		if got := claim(t, q, "q", newOwner("w"), 10); !slices.Equal(jobIDs(got), []int64{o.ID}) {
			t.Fatalf("during k1's backoff: claimed %v, want only %d", jobIDs(got), o.ID)
		}
		again := pollClaim(t, q, "q", "k1 after its backoff")
		if len(again) != 1 || again[0].ID != k1.ID || again[0].Attempt != 2 {
			t.Fatalf("after the backoff: claimed %+v, want k1 (%d) attempt 2 alone", again, k1.ID)
		}
		claimNone(t, q, "q", "k2 while k1's second attempt runs")
		ok(t, q.Ack(ctx, again[0]), "ack k1")
		if j := claimOne(t, q, "q", newOwner("w")); j.ID != k2.ID {
			t.Fatalf("after k1's ack: claimed %d, want k2 %d", j.ID, k2.ID)
		}
	})

	t.Run("KeyLeaseExpiry", func(t *testing.T) {
		t.Parallel()
		b, _ := fresh(t, h)
		ctx := t.Context()
		cfg := runtimeConfig("q", spec.DefaultPartitions)
		cfg.VisibilityTimeout = time.Second
		q, _ := runtimeQueue(t, b, cfg)
		k1 := push(t, q, "q", backends.PushRequest{Payload: []byte("k1"), Key: "k"})
		k2 := push(t, q, "q", backends.PushRequest{Payload: []byte("k2"), Key: "k"})

		// A worker claims k1 and dies: k is blocked until the lease ends,
		// then k1 comes back first.
		if j := claimOne(t, q, "q", newOwner("dead")); j.ID != k1.ID {
			t.Fatalf("claimed %d, want k1 %d", j.ID, k1.ID)
		}
		claimNone(t, q, "q", "k2 while k1's lease runs")
		again := pollClaim(t, q, "q", "k1 after its lease expired")
		if len(again) != 1 || again[0].ID != k1.ID || again[0].Attempt != 2 {
			t.Fatalf("after the lease: claimed %+v, want k1 (%d) attempt 2 alone", again, k1.ID)
		}
		ok(t, q.Ack(ctx, again[0]), "ack k1")
		if j := claimOne(t, q, "q", newOwner("w")); j.ID != k2.ID {
			t.Fatalf("after k1's ack: claimed %d, want k2 %d", j.ID, k2.ID)
		}
	})

	t.Run("KeyDeadAndRequeued", func(t *testing.T) {
		t.Parallel()
		b, _ := fresh(t, h)
		ctx := t.Context()
		cfg := runtimeConfig("q", spec.DefaultPartitions)
		cfg.MaxAttempts, cfg.RetryBackoff = 1, 0
		q, _ := runtimeQueue(t, b, cfg)
		k1 := push(t, q, "q", backends.PushRequest{Payload: []byte("k1"), Key: "k"})
		k2 := push(t, q, "q", backends.PushRequest{Payload: []byte("k2"), Key: "k"})

		j := claimOne(t, q, "q", newOwner("w"))
		ok(t, q.Retry(ctx, j, "boom"), "retry out of attempts")
		// k1 is dead: it no longer holds k.
		j2 := claimOne(t, q, "q", newOwner("w"))
		if j2.ID != k2.ID {
			t.Fatalf("after k1 died: claimed %d, want k2 %d", j2.ID, k2.ID)
		}
		// Requeued, k1 is k's oldest job again, but waits for k2, which
		// runs.
		n, err := q.RequeueDead(ctx, "q")
		ok(t, err, "requeue dead")
		if n != 1 {
			t.Fatalf("requeued %d, want 1", n)
		}
		claimNone(t, q, "q", "requeued k1 while k2 runs")
		ok(t, q.Ack(ctx, j2), "ack k2")
		if j := claimOne(t, q, "q", newOwner("w")); j.ID != k1.ID {
			t.Fatalf("after k2's ack: claimed %d, want the requeued k1 %d", j.ID, k1.ID)
		}
	})

	t.Run("KeyReturned", func(t *testing.T) {
		t.Parallel()
		b, _ := fresh(t, h)
		ctx := t.Context()
		q, _ := runtimeQueue(t, b, runtimeConfig("q", spec.DefaultPartitions))
		k1 := push(t, q, "q", backends.PushRequest{Payload: []byte("k1"), Key: "k"})
		push(t, q, "q", backends.PushRequest{Payload: []byte("k2"), Key: "k"})
		j := claimOne(t, q, "q", newOwner("w"))
		claimNone(t, q, "q", "k2 while k1 runs")
		ok(t, q.ReturnJob(ctx, j), "return k1")
		if got := claim(t, q, "q", newOwner("w"), 10); !slices.Equal(jobIDs(got), []int64{k1.ID}) {
			t.Fatalf("after k1's return: claimed %v, want k1 %d alone", jobIDs(got), k1.ID)
		}
	})
}

// jobIDs lists the ids of jobs.
func jobIDs(jobs []backends.Job) []int64 {
	ids := make([]int64, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	return ids
}

// pollClaim claims (up to 10 jobs, a new owner each time) until a claim
// returns jobs, and returns them.
func pollClaim(t *testing.T, q backends.Queues, queue, what string) []backends.Job {
	t.Helper()
	var got []backends.Job
	waitFor(t, what, func() (bool, error) {
		got = claim(t, q, queue, newOwner("poll"), 10)
		return len(got) > 0, nil
	})
	return got
}
