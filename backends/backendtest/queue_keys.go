package backendtest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// testQueueKeys checks that a job key is compared byte for byte on every
// backend: keys that differ only by trailing spaces are different keys for
// `unique` and for the per-key claim order. A collation that pads with
// spaces (MariaDB's utf8mb4_bin) made "a" and "a " one key on MySQL alone.
func testQueueKeys(t *testing.T, h Harness) {
	// Keys that a PAD SPACE comparison would take for one another.
	keys := []string{"a", "a ", "a  ", "a\u00a0"}

	t.Run("TrailingSpacesUnique", func(t *testing.T) {
		t.Parallel()
		b, _ := fresh(t, h)
		cfg := runtimeConfig("q", spec.DefaultPartitions)
		cfg.Unique = spec.UniquePending
		q, adm := runtimeQueue(t, b, cfg)

		ids := map[int64]string{}
		for _, k := range keys {
			j := push(t, q, "q", backends.PushRequest{Payload: []byte(k), Key: k})
			if other, dup := ids[j.ID]; dup {
				t.Fatalf("unique pending: push of key %q returned the job of key %q (%d)", k, other, j.ID)
			}
			ids[j.ID] = k
		}
		wantCounts(t, adm, "q", int64(len(keys)), 0, 0, 0)
		// Each key is still unique against itself.
		for id, k := range ids {
			dup, err := q.Push(t.Context(), "q", backends.PushRequest{Payload: []byte("again"), Key: k})
			wantErr(t, err, backends.ErrDuplicate, "second push of key "+quote(k))
			if dup.ID != id {
				t.Fatalf("second push of key %q returned job %d, want %d", k, dup.ID, id)
			}
		}
	})

	t.Run("TrailingSpacesOrder", func(t *testing.T) {
		t.Parallel()
		b, _ := fresh(t, h)
		q, _ := runtimeQueue(t, b, runtimeConfig("q", spec.DefaultPartitions))
		for _, k := range keys {
			push(t, q, "q", backends.PushRequest{Payload: []byte(k), Key: k})
		}
		// One claim takes at most one job of a key: with every key distinct
		// it takes all of them, each with its key as pushed.
		jobs := claim(t, q, "q", newOwner("c"), len(keys)+1)
		if len(jobs) != len(keys) {
			t.Fatalf("claim of keys %q got %d jobs, want %d (keys taken for one another)", keys, len(jobs), len(keys))
		}
		for i, j := range jobs {
			if j.Key != keys[i] || string(j.Payload) != keys[i] {
				t.Fatalf("job %d: key %q payload %q, want %q", i, j.Key, j.Payload, keys[i])
			}
		}
	})
}

// quote quotes a key for a message.
func quote(s string) string { return `"` + s + `"` }

// testQueueComeBack checks spec.md's "Claim order" for jobs without a key:
// a job that comes back (a retry, an expired lease, a requeued dead job, a
// job returned by a worker that could not start its command) keeps its
// place, before the jobs pushed after it.
func testQueueComeBack(t *testing.T, h Harness) {
	for _, c := range []struct {
		name string
		// back makes the claimed first job come back.
		back func(t *testing.T, b backends.Backend, q backends.Queues, j backends.Job)
	}{
		{"Retry", func(t *testing.T, _ backends.Backend, q backends.Queues, j backends.Job) {
			ok(t, q.Retry(t.Context(), j, "boom"), "retry")
		}},
		{"LeaseExpiry", func(t *testing.T, b backends.Backend, _ backends.Queues, j backends.Job) {
			waitPast(t, b, j.ExpiresAt)
		}},
		{"Requeued", func(t *testing.T, _ backends.Backend, q backends.Queues, j backends.Job) {
			// Two attempts, the second the last: then it is dead.
			ok(t, q.Retry(t.Context(), j, "boom"), "retry")
			again := claimOne(t, q, "q", newOwner("w"))
			if again.ID != j.ID || again.Attempt != 2 {
				t.Fatalf("claimed %d attempt %d, want the retried job %d attempt 2", again.ID, again.Attempt, j.ID)
			}
			ok(t, q.Retry(t.Context(), again, "boom"), "retry out of attempts")
			n, err := q.RequeueDead(t.Context(), "q")
			ok(t, err, "requeue dead")
			if n != 1 {
				t.Fatalf("requeued %d, want 1", n)
			}
		}},
		{"Returned", func(t *testing.T, _ backends.Backend, q backends.Queues, j backends.Job) {
			ok(t, q.ReturnJob(t.Context(), j), "return")
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b, _ := fresh(t, h)
			cfg := runtimeConfig("q", spec.DefaultPartitions)
			cfg.VisibilityTimeout, cfg.MaxAttempts, cfg.RetryBackoff = time.Second, 2, 0
			q, _ := runtimeQueue(t, b, cfg)
			var pushed []int64
			for i := range 4 {
				pushed = append(pushed, push(t, q, "q", backends.PushRequest{Payload: fmt.Appendf(nil, "j%d", i)}).ID)
			}
			first := claimOne(t, q, "q", newOwner("w"))
			if first.ID != pushed[0] {
				t.Fatalf("claimed %d, want the first job %d", first.ID, pushed[0])
			}
			c.back(t, b, q, first)
			// One job per claim: a batch comes back sorted by id anyway.
			var got []int64
			for range pushed {
				got = append(got, claimOne(t, q, "q", newOwner("w")).ID)
			}
			if !slices.Equal(got, pushed) {
				t.Fatalf("after the first job came back (%s): claimed %v, want push order %v", c.name, got, pushed)
			}
		})
	}
}
