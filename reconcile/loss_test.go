package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/redis"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/reconcile"
)

// TestRedisDataLossHold: a semaphore on Redis whose data is lost (every key
// of the prefix deleted, as FLUSHDB or a restart without persistence does)
// while a holder runs is not re-created at once: plan shows it waiting,
// apply records the loss and still waits, and only once the longest lease
// has passed does apply bring the tokens back. A first creation is
// immediate. The inventory lives in the embedded store, so it survives.
func TestRedisDataLossHold(t *testing.T) {
	const lease = 2 * time.Second
	url, prefix := testenv.RedisURL(t)
	f := newFixture(t)
	f.write(fmt.Sprintf(`backends:
  local: {type: sqlite}
  cache: {type: redis, url: %q, key_prefix: %q}
cluster: {backend: local}
semaphores:
  s: {backend: cache, limit: 1, lease: %s}
`, url, prefix, lease))
	start := time.Now()
	f.apply(reconcile.Options{})
	st, err := redis.Open(context.Background(), "cache", url, prefix, backends.Options{Version: "0.1.0"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	if _, err := st.TryAcquire(ctx, backends.SemRef{Name: "s"}, backends.AcquireRequest{Owner: "old", Host: "h", PID: 1, Lease: lease}); err != nil {
		t.Fatalf("first creation is immediate: acquire: %v (%s after apply)", err, time.Since(start))
	}

	if _, err := testenv.DeleteRedisPrefix(ctx, st.Client(), prefix); err != nil {
		t.Fatal(err)
	}
	lost := time.Now()
	p := f.plan(reconcile.Options{})
	if p.HasChanges() || len(p.Waiting) != 1 || !strings.Contains(text(p), "lost its data (its marker is missing)") {
		t.Fatalf("plan after the loss: want one waiting entry for the lost data:\n%s", text(p))
	}
	f.applyHeld()
	p = f.plan(reconcile.Options{})
	if p.HasChanges() || len(p.Waiting) != 1 || !strings.Contains(text(p), "the semaphore comes back at") {
		t.Fatalf("plan after apply recorded the loss: want the hold:\n%s", text(p))
	}
	if _, err := st.TryAcquire(ctx, backends.SemRef{Name: "s"}, backends.AcquireRequest{Owner: "new", Host: "h", PID: 1, Lease: lease}); !errors.Is(err, backends.ErrNotFound) {
		t.Fatalf("acquire during the hold: %v, want ErrNotFound (nothing re-created)", err)
	}
	// The old holder learns it lost the slot at its next extend.
	if _, err := st.Extend(ctx, backends.SemRef{Name: "s"}, "old", lease); !errors.Is(err, backends.ErrLost) {
		t.Fatalf("the old holder's extend: %v, want ErrLost", err)
	}

	for {
		f.applyHeld()
		if m, err := st.ObserveSemaphores(ctx, []string{"s"}); err != nil {
			t.Fatal(err)
		} else if m["s"] != nil {
			break
		}
		if time.Since(lost) > lease+10*time.Second {
			t.Fatalf("not re-created %s after the loss", time.Since(lost))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if waited := time.Since(lost); waited < lease {
		t.Fatalf("re-created %s after the loss, before the lease (%s) passed", waited, lease)
	}
	if _, err := st.TryAcquire(ctx, backends.SemRef{Name: "s"}, backends.AcquireRequest{Owner: "new", Host: "h", PID: 1, Lease: lease}); err != nil {
		t.Fatalf("acquire after the hold: %v", err)
	}
	if p := f.plan(reconcile.Options{}); p.HasChanges() || len(p.Waiting) != 0 {
		t.Fatalf("plan after the hold:\n%s", text(p))
	}

	// A restart that kept the marker (it names an earlier process) may
	// have lost the last writes before it: apply records the new server
	// and holds the semaphores for the lease, which exist but grant no
	// slot meanwhile.
	if err := st.Client().HSet(ctx, prefix+"{global}:marker", "run_id", "an-earlier-process").Err(); err != nil {
		t.Fatal(err)
	}
	if ls, err := st.ObserveLoss(ctx); err != nil || !ls.Changed || ls.Holding() {
		t.Fatalf("observed after a restart: %+v %v; want the change seen, no hold yet", ls, err)
	}
	f.applyHeld()
	ls, err := st.ObserveLoss(ctx)
	if err != nil || !ls.Holding() || ls.Cause != backends.LossCauseChanged || ls.Changed || ls.RunID == "an-earlier-process" {
		t.Fatalf("after a restart that kept the marker: %+v %v; want a hold for the change, the new run_id recorded", ls, err)
	}
	if left := ls.HoldUntil.Sub(ls.Now); left > lease || left < lease-time.Second {
		t.Fatalf("hold after a restart: %v, want the lease %v", left, lease)
	}
	if p := f.plan(reconcile.Options{}); len(p.Lost) != 1 || p.Lost[0].Cause != backends.LossCauseChanged {
		t.Fatalf("plan during the hold of a restart: lost %+v, want the change listed", p.Lost)
	}
}

// applyHeld applies and accepts ErrLossHold (the data-loss hold still
// runs); any other error fails the test.
func (f *fixture) applyHeld() {
	f.t.Helper()
	if _, err := f.engine(false).Apply(context.Background(), reconcile.Options{}, ""); err != nil && !errors.Is(err, reconcile.ErrLossHold) {
		f.t.Fatalf("apply: %v", err)
	}
}

// TestRedisDataLossSameCluster: the cluster state lives on the Redis that
// loses its data, so the inventory goes with it. A process that saw the
// marker (the daemon keeps a LossMemory) still holds the semaphore back
// until the lease has passed; without that memory it would look new.
func TestRedisDataLossSameCluster(t *testing.T) {
	const lease = 2 * time.Second
	url, prefix := testenv.RedisURL(t)
	f := newFixture(t)
	f.write(fmt.Sprintf(`backends:
  cache: {type: redis, url: %q, key_prefix: %q}
semaphores:
  s: {limit: 1, lease: %s}
`, url, prefix, lease))
	mem := &reconcile.LossMemory{}
	apply := func() error {
		e := f.engine(false)
		e.Loss = mem
		_, err := e.Apply(context.Background(), reconcile.Options{}, "")
		return err
	}
	if err := apply(); err != nil {
		t.Fatalf("first apply: %v", err)
	}
	st, err := redis.Open(context.Background(), "cache", url, prefix, backends.Options{Version: "0.1.0"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	if _, err := testenv.DeleteRedisPrefix(ctx, st.Client(), prefix); err != nil {
		t.Fatal(err)
	}
	lost := time.Now()
	for {
		err := apply()
		if err == nil {
			break
		}
		if !errors.Is(err, reconcile.ErrLossHold) {
			t.Fatalf("apply after the loss: %v", err)
		}
		if time.Since(lost) > lease+10*time.Second {
			t.Fatalf("still held %s after the loss", time.Since(lost))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if waited := time.Since(lost); waited < lease {
		t.Fatalf("re-created %s after the loss, before the lease (%s) passed", waited, lease)
	}
	if _, err := st.TryAcquire(ctx, backends.SemRef{Name: "s"}, backends.AcquireRequest{Owner: "new", Host: "h", PID: 1, Lease: lease}); err != nil {
		t.Fatalf("acquire after the hold: %v", err)
	}
}
