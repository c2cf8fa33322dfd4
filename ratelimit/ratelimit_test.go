package ratelimit_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/sqlite"
	"github.com/coordd/coordd/ratelimit"
)

// newClient opens a migrated SQLite store holding limit cfg.
func newClient(t *testing.T, cfg backends.RateLimitConfig) *ratelimit.Client {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, "db", filepath.Join(t.TempDir(), "db.sqlite"), backends.Options{Version: "0.1.0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := st.PutRateLimit(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	c, err := ratelimit.New(st)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestAllowRefusesBeyondTheBurst: Allow grants the burst, then refuses
// with ErrNotGranted and the time of the next permit.
func TestAllowRefusesBeyondTheBurst(t *testing.T) {
	c := newClient(t, backends.RateLimitConfig{Name: "r", Count: 1, Per: time.Hour, Burst: 2})
	ctx := context.Background()
	for range 2 {
		if _, err := c.Allow(ctx, "r", ""); err != nil {
			t.Fatal(err)
		}
	}
	p, err := c.Allow(ctx, "r", "")
	if !errors.Is(err, ratelimit.ErrNotGranted) || p.Allowed || p.RetryAfter < 59*time.Minute {
		t.Fatalf("third permit = %+v, %v; want ErrNotGranted with about an hour to wait", p, err)
	}
	if _, err := c.Allow(ctx, "absent", ""); !errors.Is(err, backends.ErrNotFound) {
		t.Fatalf("an absent limit: %v, want ErrNotFound", err)
	}
}

// TestWaitTakesThePermitWhenDue: Wait returns once the next permit is
// due, and gives up at once, without waiting, when that is past its
// deadline.
func TestWaitTakesThePermitWhenDue(t *testing.T) {
	c := newClient(t, backends.RateLimitConfig{Name: "r", Count: 5, Per: time.Second, Burst: 1}) // one per 200ms
	ctx := context.Background()
	if _, err := c.Allow(ctx, "r", ""); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := c.Wait(ctx, "r", "", 50*time.Millisecond); !errors.Is(err, ratelimit.ErrNotGranted) {
		t.Fatalf("Wait with a deadline before the next permit: %v, want ErrNotGranted", err)
	}
	if d := time.Since(start); d > 40*time.Millisecond {
		t.Fatalf("Wait gave up after %v: it should not wait for a permit past its deadline", d)
	}
	p, err := c.Wait(ctx, "r", "", 5*time.Second)
	if err != nil || !p.Allowed {
		t.Fatalf("Wait = %+v, %v", p, err)
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Fatalf("the next permit came after %v, before its interval", d)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.Wait(cctx, "r", "", 0); err == nil {
		t.Fatal("Wait with an ended context succeeded")
	}
}
