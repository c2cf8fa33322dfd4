package memcached_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/memcached"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/spec"
)

// TestTwoServers: with two servers, semaphores spread over both; a
// restart of one loses the holders of its semaphores only, and the loss
// marker reports the store as not marked until it is written again.
func TestTwoServers(t *testing.T) {
	a, b := testenv.StartMemcached(t), testenv.StartMemcached(t)
	s, err := memcached.Open(context.Background(), "mc", []string{a.Addr(), b.Addr()}, "coordd-test:", backends.Options{Version: "0.1.0"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	if _, err := s.MarkLoss(ctx, false, time.Minute); err != nil {
		t.Fatal(err)
	}
	const n = 8 // each new semaphore costs up to a second (the fencing counter's creation)
	for i := range n {
		name := fmt.Sprintf("s%d", i)
		if err := s.PutSemaphore(ctx, backends.SemaphoreConfig{Name: name, Limit: 1, Lease: time.Minute, Mode: spec.ModeLease, MaxWaiting: -1}); err != nil {
			t.Fatal(err)
		}
		mustAcquire(t, s, name, "o"+name, time.Minute)
	}
	a.Kill()
	a.Start(t)
	lost := 0
	for i := range n {
		name := fmt.Sprintf("s%d", i)
		_, err := s.Extend(ctx, backends.SemRef{Name: name}, "o"+name, time.Minute)
		switch {
		case errors.Is(err, backends.ErrLost):
			lost++
		case err != nil:
			t.Fatalf("extend %s: %v", name, err)
		}
	}
	if lost == 0 || lost == n {
		t.Fatalf("%d of %d holders lost after one of two servers restarted; want some, not all", lost, n)
	}
	if st, err := s.ObserveLoss(ctx); err != nil || st.Marked {
		t.Fatalf("ObserveLoss after one restart: %+v, %v; want not marked", st, err)
	}
	t.Logf("%d of %d semaphores lived on the restarted server", lost, n)
}
