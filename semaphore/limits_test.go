package semaphore_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/semaphore"
	"github.com/coordd/coordd/spec"
)

// TestNewChecksHost: the host is recorded with every holder and printed by
// `sem status`, so New refuses one outside spec.CheckHostID: a host with a newline and
// terminal escapes is never stored as is.
func TestNewChecksHost(t *testing.T) {
	st := newStore(t, t.TempDir(), "s", 1)
	for _, host := range []string{"", "a\n\x1b[2J", "web 1", strings.Repeat("h", spec.MaxHostIDLen+1)} {
		if _, err := semaphore.New(st, host); !errors.Is(err, spec.ErrInvalidHostID) {
			t.Errorf("New(%q): %v, want spec.ErrInvalidHostID", host, err)
		}
	}
}

// TestAcquireChecksKey: a keyed semaphore's key is data from whoever runs
// `sem run --key`; Acquire refuses one outside spec.CheckKey before the
// backend is touched.
func TestAcquireChecksKey(t *testing.T) {
	st := newStore(t, t.TempDir(), "s", 1)
	c := newClient(t, st)
	for _, key := range []string{"a\nb", "\x1b[2J", strings.Repeat("k", spec.MaxKeyLen+1), "\xff"} {
		before := st.RoundTrips()
		_, err := c.Acquire(t.Context(), "s", semaphore.AcquireOptions{Lease: time.Minute, NoWait: true, Key: key})
		if !errors.Is(err, spec.ErrInvalidKey) {
			t.Errorf("Acquire with key %q: %v, want spec.ErrInvalidKey", key, err)
		}
		if st.RoundTrips() != before {
			t.Errorf("Acquire with key %q touched the backend", key)
		}
	}
}

// TestAcquireKeyed: a lease of a keyed semaphore names its key, and the
// key must match the semaphore's declaration both ways.
func TestAcquireKeyed(t *testing.T) {
	st := newStore(t, t.TempDir(), "plain", 1)
	ctx := t.Context()
	if err := st.PutSemaphore(ctx, backends.SemaphoreConfig{Name: "k", Limit: 1, Lease: time.Minute, Mode: "lease", MaxWaiting: -1, Keyed: true}); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, st)
	l, err := c.Acquire(ctx, "k", semaphore.AcquireOptions{Lease: time.Minute, NoWait: true, Key: "user-7"})
	if err != nil {
		t.Fatal(err)
	}
	if l.Name != "k" || l.Key != "user-7" || l.Slot != 0 {
		t.Errorf("lease %q key %q slot %d", l.Name, l.Key, l.Slot)
	}
	if err := l.Extend(ctx); err != nil {
		t.Errorf("extend: %v", err)
	}
	if _, err := c.Acquire(ctx, "k", semaphore.AcquireOptions{Lease: time.Minute, NoWait: true, Key: "user-7"}); !errors.Is(err, semaphore.ErrNotAcquired) {
		t.Errorf("second acquire of user-7: %v, want ErrNotAcquired", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("release: %v", err)
	}
	if _, err := c.Acquire(ctx, "k", semaphore.AcquireOptions{Lease: time.Minute, NoWait: true}); !errors.Is(err, backends.ErrKeyRequired) {
		t.Errorf("acquire of a keyed semaphore without a key: %v, want ErrKeyRequired", err)
	}
	if _, err := c.Acquire(ctx, "plain", semaphore.AcquireOptions{Lease: time.Minute, NoWait: true, Key: "x"}); !errors.Is(err, backends.ErrNotKeyed) {
		t.Errorf("acquire of a plain semaphore with a key: %v, want ErrNotKeyed", err)
	}
}
