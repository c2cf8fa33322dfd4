package redis_test

import (
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/backendtest"
	"github.com/coordd/coordd/backends/redis"
	"github.com/coordd/coordd/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// openStore opens a handle closed by t.Cleanup (before testenv deletes the
// prefix's keys, as cleanups run last-registered first).
func openStore(t testing.TB, url, prefix string, opts backends.Options) *redis.Store {
	t.Helper()
	s, err := redis.Open(context.Background(), "cluster", url, prefix, opts)
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

func harness() backendtest.Harness {
	return backendtest.Harness{
		New: func(t *testing.T) func() backends.Backend {
			url, prefix := testenv.RedisURL(t)
			return func() backends.Backend { return openStore(t, url, prefix, backends.Options{Version: "0.1.0"}) }
		},
		DeleteSlot:   deleteSlot,
		InsertJobs:   insertJobs,
		InstanceRows: instanceRows,
	}
}

func TestConformance(t *testing.T) { backendtest.Run(t, harness()) }

// TestCapabilities: the Redis store holds every area of the contract, so
// the conformance suite runs every group on it (a missing area would make
// the suite skip that group silently).
func TestCapabilities(t *testing.T) {
	url, prefix := testenv.RedisURL(t)
	var b backends.Backend = openStore(t, url, prefix, backends.Options{Version: "0.1.0"})
	for name, ok := range map[string]bool{
		"Cluster":        b.Cluster() != nil,
		"Semaphores":     b.Semaphores() != nil,
		"Waiters":        b.Semaphores() != nil && b.Semaphores().Waiters() != nil,
		"Crons":          b.Crons() != nil,
		"Queues":         b.Queues() != nil,
		"LossGuard":      is[backends.LossGuard](b),
		"PayloadLimiter": is[backends.PayloadLimiter](b),
	} {
		if !ok {
			t.Errorf("the redis store does not hold %s", name)
		}
	}
}

func is[T any](b backends.Backend) bool {
	_, ok := b.(T)
	return ok
}
