package queue_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/queue"
)

// TestPausedQueueClaimsNothing: a worker of a paused queue claims nothing,
// even with jobs ready and pushes arriving, and says so once; once the
// queue is resumed it claims and runs them, and says so; a job in flight
// when the pause came finishes.
func TestPausedQueueClaimsNothing(t *testing.T) {
	st := newStore(t, queueConfig("q"))
	c := newClient(t, st)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	push := func() {
		t.Helper()
		if _, err := c.Push(ctx, "q", []byte("x"), queue.PushOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	push()
	var ran atomic.Int32
	inFlight := make(chan struct{})
	release := make(chan struct{})
	var logs atomic.Value
	logs.Store("")
	stop := make(chan struct{})
	wait := work(ctx, c, "q", queue.WorkerOptions{Concurrency: 2, Stop: stop, Logf: func(f string, a ...any) {
		logs.Store(logs.Load().(string) + "\n" + f)
	}}, func(ctx context.Context, j backends.Job) error {
		if ran.Add(1) == 1 {
			close(inFlight)
			<-release
		}
		return nil
	})
	<-inFlight
	if _, _, err := st.PauseQueue(ctx, "q", "web-1", "maintenance"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // past one pause read
	close(release)                      // the job in flight finishes
	for range 3 {
		push()
	}
	time.Sleep(2500 * time.Millisecond)
	if n := ran.Load(); n != 1 {
		t.Fatalf("%d jobs ran while the queue was paused, want only the one in flight", n)
	}
	if s := observe(t, st, "q"); s.ReadyNow() != 3 || s.InFlight != 0 {
		t.Fatalf("while paused: %+v, want 3 ready and none in flight", s)
	}
	if _, err := st.ResumeQueue(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for ran.Load() < 4 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := ran.Load(); n != 4 {
		t.Fatalf("%d jobs ran after the resume, want 4", n)
	}
	close(stop)
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	l := logs.Load().(string)
	if !strings.Contains(l, "paused by %s at %s (%s); claiming nothing") || !strings.Contains(l, "resumed; claiming again") {
		t.Fatalf("the worker did not say it paused and resumed:%s", l)
	}
}
