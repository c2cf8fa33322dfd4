package queue_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"testing"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/queue"
)

// TestHandlerCannotStart: a handler whose command cannot be executed
// returns ErrCannotStart. Work stops and returns that error, and every job
// it claimed is ready again with its attempt not counted: a mistyped
// command must not send the queue's jobs to the dead set.
func TestHandlerCannotStart(t *testing.T) {
	for _, conc := range []int{1, 3} {
		t.Run(fmt.Sprintf("concurrency=%d", conc), func(t *testing.T) {
			ctx := context.Background()
			cfg := queueConfig("q")
			cfg.MaxAttempts = 1 // one counted attempt would kill a job
			st := newStore(t, cfg)
			c := newClient(t, st)
			for i := range 5 {
				if _, err := c.Push(ctx, "q", []byte{byte(i)}, queue.PushOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			var stats queue.Stats
			err := work(ctx, c, "q", queue.WorkerOptions{Concurrency: conc, Stats: &stats}, func(ctx context.Context, j backends.Job) error {
				err := exec.CommandContext(ctx, "/no/such/command").Run()
				return fmt.Errorf("%w: %w", queue.ErrCannotStart, err)
			})()
			if !errors.Is(err, queue.ErrCannotStart) {
				t.Fatalf("Work returned %v, want ErrCannotStart", err)
			}
			claimed, returned := stats.Claimed.Load(), stats.Returned.Load()
			if claimed < 1 || returned != claimed || stats.Retried.Load() != 0 || stats.Lost.Load() != 0 {
				t.Fatalf("claimed %d, returned %d, retried %d, lost %d; want every claimed job returned",
					claimed, returned, stats.Retried.Load(), stats.Lost.Load())
			}
			if s := observe(t, st, "q"); s.Ready != 5 || s.InFlight != 0 || s.Dead != 0 {
				t.Fatalf("after the failed start: %d ready, %d in flight, %d dead; want 5 ready", s.Ready, s.InFlight, s.Dead)
			}
			// The attempts were not spent: a working handler gets every job
			// as its first attempt and acks it.
			var ok queue.Stats
			err = work(ctx, c, "q", queue.WorkerOptions{Drain: true, Stats: &ok}, func(ctx context.Context, j backends.Job) error {
				if j.Attempt != 1 {
					return fmt.Errorf("job %d attempt %d", j.ID, j.Attempt)
				}
				return nil
			})()
			if err != nil || ok.Acked.Load() != 5 {
				t.Fatalf("second worker: %v, acked %d of 5", err, ok.Acked.Load())
			}
		})
	}
}

// TestHandlerFailureStillCounts: any other handler error (the command ran
// and exited 127 itself, say) is a failed attempt, as before.
func TestHandlerFailureStillCounts(t *testing.T) {
	ctx := context.Background()
	cfg := queueConfig("q")
	cfg.MaxAttempts = 1
	st := newStore(t, cfg)
	c := newClient(t, st)
	if _, err := c.Push(ctx, "q", []byte("x"), queue.PushOptions{}); err != nil {
		t.Fatal(err)
	}
	var stats queue.Stats
	err := work(ctx, c, "q", queue.WorkerOptions{Drain: true, Stats: &stats}, func(ctx context.Context, j backends.Job) error {
		return errors.New("exit status 127")
	})()
	if err != nil || stats.Retried.Load() != 1 || stats.Returned.Load() != 0 {
		t.Fatalf("Work: %v, retried %d, returned %d; want one retry", err, stats.Retried.Load(), stats.Returned.Load())
	}
	if s := observe(t, st, "q"); s.Dead != 1 {
		t.Fatalf("dead %d, want the job dead after its one attempt", s.Dead)
	}
}
