package queue_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/queue"
	"github.com/coordd/coordd/spec"
)

// TestPushLimitsBeforeTheBackend: a key outside the shared limits is
// refused with spec.ErrInvalidKey before the backend is touched (no round
// trip), so no backend can take one that another refuses (the embedded store
// once took a 300-byte key).
func TestPushLimitsBeforeTheBackend(t *testing.T) {
	st := newStore(t, queueConfig("q"))
	c := newClient(t, st)
	for _, key := range []string{strings.Repeat("k", 300), "\xbf'", "a\x00b", "a\nb", "\x1b[2J"} {
		before := st.RoundTrips()
		_, err := c.Push(t.Context(), "q", []byte("x"), queue.PushOptions{Key: key})
		if !errors.Is(err, spec.ErrInvalidKey) {
			t.Errorf("push key %q: %v, want spec.ErrInvalidKey", key, err)
		}
		if n := st.RoundTrips() - before; n != 0 {
			t.Errorf("push key %q: %d round trips before the refusal, want 0", key, n)
		}
	}
	if q := observe(t, st, "q"); q.Jobs() != 0 {
		t.Fatalf("refused pushes left %d jobs", q.Jobs())
	}
}

// TestWorkOwnerChecked: the owner prefix carries the host id into the
// owner tokens, so Work refuses one that is not a host id (and pid).
func TestWorkOwnerChecked(t *testing.T) {
	st := newStore(t, queueConfig("q"))
	c := newClient(t, st)
	h := func(context.Context, backends.Job) error { return nil }
	for _, owner := range []string{"a\n\x1b[2J", strings.Repeat("h", spec.MaxHostIDLen+1), "web1:x"} {
		if err := c.Work(t.Context(), "q", queue.WorkerOptions{Owner: owner, Drain: true}, h); err == nil {
			t.Errorf("Work with owner %q: nil error", owner)
		}
	}
	for _, owner := range []string{"", "web1", "web1:4242"} {
		if err := c.Work(t.Context(), "q", queue.WorkerOptions{Owner: owner, Drain: true}, h); err != nil {
			t.Errorf("Work with owner %q: %v", owner, err)
		}
	}
}
