package memcached_test

import (
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/backendtest"
	"github.com/coordd/coordd/backends/memcached"
	"github.com/coordd/coordd/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// openStore opens a handle closed by t.Cleanup.
func openStore(t testing.TB, addr, prefix string, opts backends.Options) *memcached.Store {
	t.Helper()
	s, err := memcached.Open(context.Background(), "cache", []string{addr}, prefix, opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return s
}

// deleteSlot removes slot `slot` of semaphore name behind coordd's back, as
// an eviction would.
func deleteSlot(t *testing.T, b backends.Backend, name string, slot int) {
	t.Helper()
	s, ok := b.(*memcached.Store)
	if !ok {
		t.Fatalf("deleteSlot: %T is not a *memcached.Store", b)
	}
	if err := memcached.DeleteSemSlot(s, name, slot); err != nil {
		t.Fatalf("deleteSlot %s/%d: %v", name, slot, err)
	}
}

func harness() backendtest.Harness {
	return backendtest.Harness{
		New: func(t *testing.T) func() backends.Backend {
			addr, prefix := testenv.MemcachedAddr(t)
			return func() backends.Backend { return openStore(t, addr, prefix, backends.Options{Version: "0.1.0"}) }
		},
		DeleteSlot:    deleteSlot,
		HeldSlotsOnly: true,
		NoMaxWaiting:  true,
		NoKeyed:       true,
	}
}

func TestConformance(t *testing.T) { backendtest.Run(t, harness()) }

// TestCapabilities: memcached holds semaphores and the loss marker, and
// nothing else (no waiter line: the semaphore client polls).
func TestCapabilities(t *testing.T) {
	addr, prefix := testenv.MemcachedAddr(t)
	var b backends.Backend = openStore(t, addr, prefix, backends.Options{Version: "0.1.0"})
	for name, c := range map[string]struct{ has, want bool }{
		"Semaphores": {b.Semaphores() != nil, true},
		"LossGuard":  {is[backends.LossGuard](b), true},
		"Waiters":    {b.Semaphores().Waiters() != nil, false},
		"Cluster":    {b.Cluster() != nil, false},
		"Crons":      {b.Crons() != nil, false},
		"Queues":     {b.Queues() != nil, false},
	} {
		if c.has != c.want {
			t.Errorf("the memcached store holds %s: %v, want %v", name, c.has, c.want)
		}
	}
}

func is[T any](b backends.Backend) bool {
	_, ok := b.(T)
	return ok
}
