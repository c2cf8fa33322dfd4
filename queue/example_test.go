package queue_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/sqlite"
	"github.com/coordd/coordd/queue"
)

// Push jobs, then work them until the queue is drained. Jobs with one key
// go to one partition and run in push order there.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "coordd-example")
	defer os.RemoveAll(dir)
	st, _ := sqlite.Open(ctx, "db", filepath.Join(dir, "coordd.db"), backends.Options{})
	defer st.Close()
	_ = st.Migrate(ctx)
	// coordd apply creates queues; the example does it by hand.
	_, _ = st.PutQueue(ctx, backends.QueueConfig{Name: "thumbnails", Partitions: 4, VisibilityTimeout: time.Minute, MaxAttempts: 5, Unique: "none", MaxPayload: 1 << 20, Claim: "partition"})

	c, _ := queue.New(st)
	for _, img := range []string{"a.png", "b.png", "c.png"} {
		_, _ = c.Push(ctx, "thumbnails", []byte(img), queue.PushOptions{Key: "album-1"})
	}
	_, _ = c.Push(ctx, "thumbnails", []byte("d.png"), queue.PushOptions{Key: "album-2"})

	// One handler at a time: jobs of one key then run in push order.
	done := map[string][]string{}
	err := c.Work(ctx, "thumbnails", queue.WorkerOptions{Concurrency: 1, Drain: true}, func(ctx context.Context, j backends.Job) error {
		done[j.Key] = append(done[j.Key], fmt.Sprintf("%s (attempt %d)", j.Payload, j.Attempt))
		return nil
	})
	fmt.Println("drained:", err)
	fmt.Println("album-1:", done["album-1"])
	fmt.Println("album-2:", done["album-2"])
	// Output:
	// drained: <nil>
	// album-1: [a.png (attempt 1) b.png (attempt 1) c.png (attempt 1)]
	// album-2: [d.png (attempt 1)]
}

// Under unique: pending, a second push of a key that is still pending is
// refused and returns the job already queued, as `coordd queue push --key`
// prints the existing id.
func ExampleClient_Push_unique() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "coordd-example")
	defer os.RemoveAll(dir)
	st, _ := sqlite.Open(ctx, "db", filepath.Join(dir, "coordd.db"), backends.Options{})
	defer st.Close()
	_ = st.Migrate(ctx)
	_, _ = st.PutQueue(ctx, backends.QueueConfig{Name: "reindex", Partitions: 1, VisibilityTimeout: time.Minute, MaxAttempts: 5, Unique: "pending", MaxPayload: 1 << 20, Claim: "partition"})

	c, _ := queue.New(st)
	first, _ := c.Push(ctx, "reindex", []byte("user 42"), queue.PushOptions{Key: "user-42"})
	again, err := c.Push(ctx, "reindex", []byte("user 42"), queue.PushOptions{Key: "user-42"})
	fmt.Println(errors.Is(err, backends.ErrDuplicate), again.ID == first.ID)
	// Output: true true
}
