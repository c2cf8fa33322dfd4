package queue_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/queue"
)

// TestWorkAddsItsCounts: the jobs a worker acked and the attempts that
// failed reach the store's queue counts by the time Work returns, and the
// counts of two workers add up.
func TestWorkAddsItsCounts(t *testing.T) {
	st := newStore(t, queueConfig("q"))
	ctx := context.Background()
	for i := range 6 {
		p := fmt.Sprintf("job-%d", i)
		if i < 2 {
			p = "flaky-" + p
		}
		if _, err := newClient(t, st).Push(ctx, "q", []byte(p), queue.PushOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	h := func(_ context.Context, j backends.Job) error {
		if strings.HasPrefix(string(j.Payload), "flaky-") && j.Attempt == 1 {
			return errors.New("first attempt fails")
		}
		return nil
	}
	for _, c := range []*queue.Client{newClient(t, st), newClient(t, st)} {
		if err := c.Work(ctx, "q", queue.WorkerOptions{Concurrency: 2, Drain: true}, h); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Push(ctx, "q", []byte("second"), queue.PushOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := st.ReadQueueCounts(ctx, "q", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// The first worker drains all six and fails two attempts; the second
	// takes the job pushed after the first one returned.
	if sum := got.Since(time.Hour); sum != (backends.QueueCount{Processed: 7, Failed: 2}) {
		t.Fatalf("counts %+v (minutes %+v); want 7 processed, 2 failed", sum, got.Minutes)
	}
}
