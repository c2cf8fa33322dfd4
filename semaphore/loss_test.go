package semaphore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/memcached"
	"github.com/coordd/coordd/backends/redis"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/semaphore"
)

// lossStore is a backend that can lose its data, and the semaphore admin
// that stands in for the daemon re-creating the semaphore after the hold.
type lossStore interface {
	backends.Backend
	backends.LossGuard
	backends.Semaphores
}

// TestAcquireWaitsOutLossHold: the semaphore's backend restarted empty (a
// private redis-server without persistence, a private memcached) and the
// loss was recorded with a hold. Acquire with NoWait reports
// ErrNotAcquired, for the hold (backends.ErrLossHold), not a missing
// semaphore; a waiting Acquire says what it waits for (OnLossHold), waits
// through the hold and takes its slot once the semaphore is back.
func TestAcquireWaitsOutLossHold(t *testing.T) {
	for _, typ := range []string{"redis", "memcached"} {
		t.Run(typ, func(t *testing.T) {
			ctx := context.Background()
			var st lossStore
			var restart func()
			switch typ {
			case "redis":
				r := testenv.StartRedis(t)
				s, err := redis.Open(ctx, "r", r.URL(), "loss:", backends.Options{Version: "0.1.0"})
				if err != nil {
					t.Fatal(err)
				}
				st, restart = s, func() { r.Kill(); r.Start(t) }
			case "memcached":
				m := testenv.StartMemcached(t)
				s, err := memcached.Open(ctx, "r", []string{m.Addr()}, "loss:", backends.Options{Version: "0.1.0"})
				if err != nil {
					t.Fatal(err)
				}
				st, restart = s, func() { m.Kill(); m.Start(t) }
			}
			t.Cleanup(func() { st.Close() })
			cfg := backends.SemaphoreConfig{Name: "s", Limit: 1, Lease: 3 * time.Second, Mode: "lease", MaxWaiting: -1}
			if _, err := st.MarkLoss(ctx, false, 0); err != nil {
				t.Fatal(err)
			}
			if err := st.PutSemaphore(ctx, cfg); err != nil {
				t.Fatal(err)
			}
			c := newClient(t, st)
			l, err := c.Acquire(ctx, "s", semaphore.AcquireOptions{Lease: cfg.Lease, NoWait: true})
			if err != nil {
				t.Fatal(err)
			}
			_ = l.Release(ctx)

			restart()
			// The leader (or a sem run) records the loss: a hold of 1 s.
			var marked backends.LossState
			for {
				if marked, err = st.MarkLoss(ctx, true, time.Second); err == nil {
					break
				}
				time.Sleep(50 * time.Millisecond) // the client reconnects
			}
			if !marked.Holding() {
				t.Fatalf("MarkLoss after the restart: %+v, want a hold", marked)
			}

			_, err = c.Acquire(ctx, "s", semaphore.AcquireOptions{Lease: cfg.Lease, NoWait: true})
			if !errors.Is(err, semaphore.ErrNotAcquired) || !errors.Is(err, backends.ErrLossHold) {
				t.Fatalf("NoWait acquire during the hold: %v, want not acquired for the data-loss hold", err)
			}

			told := make(chan backends.LossHoldError, 16)
			type result struct {
				l   *semaphore.Lease
				err error
			}
			done := make(chan result, 1)
			go func() {
				l, err := c.Acquire(ctx, "s", semaphore.AcquireOptions{Lease: cfg.Lease, Wait: time.Minute,
					OnLossHold: func(h backends.LossHoldError) { told <- h }})
				done <- result{l, err}
			}()
			select {
			case h := <-told:
				if h.Backend != "r" || !h.Until.Equal(marked.HoldUntil) {
					t.Errorf("OnLossHold: %+v, want backend r until %v", h, marked.HoldUntil)
				}
			case r := <-done:
				t.Fatalf("the waiting acquire returned before the semaphore came back: %v", r.err)
			case <-time.After(30 * time.Second):
				t.Fatal("no OnLossHold call")
			}
			// The hold ends; the leader re-creates the semaphore.
			for {
				ls, err := st.ObserveLoss(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if !ls.Holding() {
					break
				}
				time.Sleep(ls.HoldUntil.Sub(ls.Now))
			}
			select {
			case r := <-done:
				t.Fatalf("the waiting acquire returned before the semaphore came back: %v", r.err)
			default:
			}
			if err := st.PutSemaphore(ctx, cfg); err != nil {
				t.Fatal(err)
			}
			select {
			case r := <-done:
				if r.err != nil {
					t.Fatalf("the waiting acquire: %v", r.err)
				}
				_ = r.l.Release(ctx)
			case <-time.After(30 * time.Second):
				t.Fatal("the waiting acquire did not take the slot of the semaphore that came back")
			}
		})
	}
}
