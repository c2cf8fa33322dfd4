package queue_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/sqlite"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/queue"
)

// TestHandlerAfterHungClaim: a claim that hangs in a stalled store for
// most of the visibility timeout still gets its handler a fresh lease (one
// renewal before it starts) and is acked, instead of being lost and run
// again after the timeout.
func TestHandlerAfterHungClaim(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "db.sqlite")
	st, err := sqlite.Open(ctx, "db", path, backends.Options{Version: "0.1.0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	cfg := queueConfig("q")
	// Trusted 1.8 s from the claim's send: long enough that a loaded
	// machine's delays stay small beside the 1.6 s stall.
	cfg.VisibilityTimeout = 2 * time.Second
	if _, err := st.PutQueue(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, st)
	if _, err := c.Push(ctx, "q", []byte("x"), queue.PushOptions{}); err != nil {
		t.Fatal(err)
	}

	stall := &testenv.SQLiteStall{Path: path}
	stall.Kill()
	released := stall.ReleaseAfter(t, 1600*time.Millisecond)
	var stats queue.Stats
	wait := work(ctx, c, "q", queue.WorkerOptions{Drain: true, Stats: &stats}, func(ctx context.Context, j backends.Job) error {
		select {
		case <-time.After(1200 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	err = wait()
	<-released
	if err != nil {
		t.Fatal(err)
	}
	if stats.Acked.Load() != 1 || stats.Lost.Load() != 0 {
		t.Fatalf("acked %d, lost %d; want the job acked by its first claim", stats.Acked.Load(), stats.Lost.Load())
	}
}
