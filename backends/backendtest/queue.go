package backendtest

import (
	"reflect"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

func queueConfig(name string, partitions int) backends.QueueConfig {
	return backends.QueueConfig{
		Name: name, Partitions: partitions, VisibilityTimeout: 30 * time.Second, MaxAttempts: 5,
		RetryBackoff: 10 * time.Second, Timeout: time.Hour, Unique: spec.UniquePending,
		MaxPayload: 1 << 20, Claim: spec.ClaimPartition,
	}
}

func needInsertJobs(t *testing.T, h Harness) {
	t.Helper()
	if h.InsertJobs == nil {
		t.Fatal("backendtest: Harness.InsertJobs is nil; the queue tests need it")
	}
}

// observeQueue returns the queue's state, nil when absent.
func observeQueue(t *testing.T, q backends.Queues, name string) *backends.QueueState {
	t.Helper()
	m, err := q.ObserveQueues(t.Context(), []string{name})
	ok(t, err, "observe queue "+name)
	return m[name]
}

// wantQueue checks partitions and job counts.
func wantQueue(t *testing.T, q backends.Queues, name string, partitions int, ready, stranded int64) *backends.QueueState {
	t.Helper()
	st := observeQueue(t, q, name)
	if st == nil {
		t.Fatalf("queue %s is absent", name)
	}
	if st.PartitionsPresent != partitions || st.Config.Partitions != partitions || st.Ready != ready ||
		st.InFlight != 0 || st.Dead != 0 || st.Stranded != stranded {
		t.Fatalf("queue %s observed as %+v, want %d partitions, %d ready, %d stranded", name, st, partitions, ready, stranded)
	}
	return st
}

func putQueue(t *testing.T, q backends.Queues, cfg backends.QueueConfig, wantMoved int64) {
	t.Helper()
	moved, err := q.PutQueue(t.Context(), cfg)
	ok(t, err, "put queue "+cfg.Name)
	if moved != wantMoved {
		t.Fatalf("put queue %s with %d partitions: moved %d jobs, want %d", cfg.Name, cfg.Partitions, moved, wantMoved)
	}
}

// testQueueAdmin checks reconcile's view of queues.
func testQueueAdmin(t *testing.T, h Harness) {
	t.Run("Partitions", func(t *testing.T) {
		t.Parallel()
		needInsertJobs(t, h)
		b, _ := fresh(t, h)
		q := queuesOf(t, b)
		cfg := queueConfig("mail", 4)
		putQueue(t, q, cfg, 0)
		putQueue(t, q, cfg, 0) // idempotent
		st := wantQueue(t, q, "mail", 4, 0, 0)
		if !reflect.DeepEqual(st.Config, cfg) {
			t.Errorf("observed config %+v, want %+v", st.Config, cfg)
		}
		h.InsertJobs(t, b, "mail", 0, 1)
		h.InsertJobs(t, b, "mail", 2, 3)
		h.InsertJobs(t, b, "mail", 3, 2)
		wantQueue(t, q, "mail", 4, 6, 0)

		putQueue(t, q, queueConfig("mail", 2), 5)
		wantQueue(t, q, "mail", 2, 6, 0)
		putQueue(t, q, queueConfig("mail", 3), 0)
		wantQueue(t, q, "mail", 3, 6, 0)
	})
	t.Run("Stranded", func(t *testing.T) {
		t.Parallel()
		needInsertJobs(t, h)
		b, _ := fresh(t, h)
		q := queuesOf(t, b)
		putQueue(t, q, queueConfig("q", 2), 0)
		h.InsertJobs(t, b, "q", 1, 1)
		h.InsertJobs(t, b, "q", 5, 2) // behind coordd's back
		wantQueue(t, q, "q", 2, 3, 2)
		putQueue(t, q, queueConfig("q", 2), 2)
		wantQueue(t, q, "q", 2, 3, 0)
	})
	t.Run("Delete", func(t *testing.T) {
		t.Parallel()
		needInsertJobs(t, h)
		b, _ := fresh(t, h)
		q := queuesOf(t, b)
		ctx := t.Context()
		putQueue(t, q, queueConfig("full", 2), 0)
		h.InsertJobs(t, b, "full", 1, 4)
		wantErr(t, q.DeleteQueue(ctx, "full", false), backends.ErrHasJobs, "delete a queue with jobs")
		wantQueue(t, q, "full", 2, 4, 0)
		ok(t, q.DeleteQueue(ctx, "full", true), "force delete")
		if st := observeQueue(t, q, "full"); st != nil {
			t.Fatalf("force-deleted queue observed as %+v", st)
		}
		// Recreating starts empty: the jobs went with the queue.
		putQueue(t, q, queueConfig("full", 2), 0)
		wantQueue(t, q, "full", 2, 0, 0)

		putQueue(t, q, queueConfig("empty", 1), 0)
		ok(t, q.DeleteQueue(ctx, "empty", false), "delete an empty queue")
		if st := observeQueue(t, q, "empty"); st != nil {
			t.Fatalf("deleted queue observed as %+v", st)
		}
		ok(t, q.DeleteQueue(ctx, "never", false), "delete an absent queue")
	})
	t.Run("ObserveMany", func(t *testing.T) {
		t.Parallel()
		b, _ := fresh(t, h)
		q := queuesOf(t, b)
		names := []string{"a", "b", "c", `it's "q"; DROP TABLE x; -- {k}:*`, "e"}
		for i, n := range names {
			if i%2 == 0 {
				putQueue(t, q, queueConfig(n, i+1), 0)
			}
		}
		m, err := q.ObserveQueues(t.Context(), names)
		ok(t, err, "observe many")
		if len(m) != 3 {
			t.Fatalf("observed %d queues, want 3", len(m))
		}
		for i, n := range names {
			st := m[n]
			switch {
			case i%2 == 1 && st != nil:
				t.Errorf("absent %s observed as %+v", n, st)
			case i%2 == 0 && (st == nil || st.Config.Name != n || st.PartitionsPresent != i+1):
				t.Errorf("%s observed as %+v, want %d partitions", n, st, i+1)
			}
		}
	})
}
