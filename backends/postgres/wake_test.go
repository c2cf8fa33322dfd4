package postgres_test

import (
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/postgres"
	"github.com/coordd/coordd/internal/testenv"
)

// twoHosts opens two migrated handles on one fresh database, as two hosts
// would, with queue q applied.
func twoHosts(t *testing.T, opts backends.Options) (a, b *postgres.Store) {
	t.Helper()
	dsn := testenv.PostgresDSN(t)
	opts.Version = "0.1.0"
	a = openStore(t, dsn, "coordd", opts)
	b = openStore(t, dsn, "coordd", opts)
	if err := a.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := a.PutQueue(t.Context(), backends.QueueConfig{Name: "q", Partitions: 1, VisibilityTimeout: time.Minute, MaxAttempts: 3}); err != nil {
		t.Fatal(err)
	}
	return a, b
}

// waitReturns runs WaitQueue on s and returns a channel that gets its
// result.
func waitReturns(t *testing.T, s *postgres.Store, maxWait time.Duration) <-chan error {
	done := make(chan error, 1)
	go func() { done <- s.WaitQueue(t.Context(), "q", maxWait) }()
	return done
}

// TestIdleWorkerWokenByAnotherHostsPush: a worker waiting on one handle is
// woken by a push through another (NOTIFY), long before its fallback
// poll, and a delayed job wakes it when it comes due.
func TestIdleWorkerWokenByAnotherHostsPush(t *testing.T) {
	a, b := twoHosts(t, backends.Options{})
	for _, delay := range []time.Duration{0, 300 * time.Millisecond} {
		done := waitReturns(t, a, time.Minute)
		select {
		case err := <-done:
			t.Fatalf("WaitQueue returned on an empty queue: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
		pushed := time.Now()
		if _, err := b.Push(t.Context(), "q", backends.PushRequest{Payload: []byte("x"), Delay: delay}); err != nil {
			t.Fatal(err)
		}
		// As a worker does: wait, claim, and wait again while nothing is
		// claimable (a delayed job wakes the wait before it is due).
		var jobs []backends.Job
		for len(jobs) == 0 {
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(time.Minute):
				t.Fatalf("delay %v: not woken", delay)
			}
			var err error
			if jobs, err = a.Claim(t.Context(), "q", "w", 1); err != nil {
				t.Fatal(err)
			}
			if len(jobs) == 0 {
				done = waitReturns(t, a, time.Minute)
			}
		}
		// The bound is the fallback claim (2 s): a job found by it, not
		// by the push's notification or its due time, would take that
		// long.
		if took := time.Since(pushed); took < delay || took > delay+1500*time.Millisecond {
			t.Errorf("delay %v: claimed %v after the push", delay, took)
		}
		if err := a.Ack(t.Context(), jobs[0]); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPollWakeNeedsNoNotifications: with wake: poll (PgBouncer in
// transaction mode) a worker still finds another host's push.
func TestPollWakeNeedsNoNotifications(t *testing.T) {
	a, b := twoHosts(t, backends.Options{PollWake: true})
	done := waitReturns(t, a, time.Minute)
	if _, err := b.Push(t.Context(), "q", backends.PushRequest{Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("not woken")
	}
}

// TestQueueWaitKeyBlocked: a worker idle while the next job of a key waits
// behind a job running on another host is woken by that job's ack (the
// NOTIFY of the job table's trigger), well before its fallback claim, and
// then claims the next job of the key.
func TestQueueWaitKeyBlocked(t *testing.T) {
	waiter, worker := twoHosts(t, backends.Options{})
	ctx := t.Context()
	for _, payload := range []string{"k1", "k2"} {
		if _, err := worker.Push(ctx, "q", backends.PushRequest{Payload: []byte(payload), Key: "k"}); err != nil {
			t.Fatal(err)
		}
	}
	held, err := worker.Claim(ctx, "q", "worker", 1)
	if err != nil || len(held) != 1 || string(held[0].Payload) != "k1" {
		t.Fatalf("worker's claim = %+v, %v; want k1", held, err)
	}
	if jobs, err := waiter.Claim(ctx, "q", "waiter", 5); err != nil || len(jobs) != 0 {
		t.Fatalf("waiter's claim = %+v, %v; want nothing while k1 runs", jobs, err)
	}
	done := waitReturns(t, waiter, time.Minute)
	select {
	case err := <-done:
		t.Fatalf("the wait returned (%v) while k2 waits behind k1", err)
	case <-time.After(200 * time.Millisecond):
	}
	acked := time.Now()
	if err := worker.Ack(ctx, held[0]); err != nil {
		t.Fatalf("ack k1: %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the ack of k1 through another handle did not wake the waiter")
	}
	// The fallback claim comes notifyFallback (2 s) after the wait began,
	// about 1.8 s after the ack: a wake-up later than 1 s is not the ack's.
	if took := time.Since(acked); took > time.Second {
		t.Errorf("woken %v after the ack, want the ack's notification", took)
	}
	if jobs, err := waiter.Claim(ctx, "q", "waiter", 5); err != nil || len(jobs) != 1 || string(jobs[0].Payload) != "k2" {
		t.Fatalf("claim after the ack = %+v, %v; want k2", jobs, err)
	}
}
