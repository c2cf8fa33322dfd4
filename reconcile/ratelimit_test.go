package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/reconcile"
	"github.com/coordd/coordd/spec"
)

// TestPromiseRateLimitsReconciled: on every backend that holds rate
// limits, apply creates a declared limit, a plan shows a change of rate as
// an update that apply writes, a limit deleted behind coordd's back is
// drift that apply re-creates, and a limit removed from the spec is
// deleted (prevent_destroy refuses that until it is lifted).
func TestPromiseRateLimitsReconciled(t *testing.T) {
	each(t, clusterTypes, func(t *testing.T, x *target) {
		f := newFixture(t)
		head := fmt.Sprintf("backends:\n  local: {type: sqlite, path: ../data/local.db}\n  x: %s\ncluster: {backend: local}\n", x.decl)
		f.write(head + "rate_limits:\n  api: {backend: x, rate: 100/1m, burst: 10, prevent_destroy: true}\n")
		p := f.plan(reconcile.Options{})
		if out := text(p); !strings.Contains(out, "+ rate_limit.api") || !strings.Contains(out, "rate:") || p.Summary.Add != 1 {
			t.Fatalf("plan of a new rate limit:\n%s", out)
		}
		f.apply(reconcile.Options{})
		noChanges(t, f, "after the create")
		h := f.handle("x")
		rl := backends.RateLimitsOf(h)
		ctx := context.Background()
		want := backends.RateLimitConfig{Name: "api", Count: 100, Per: time.Minute, Burst: 10}
		if got := observeRate(t, rl, "api"); got == nil || got.Config != want || got.Available != 10 {
			t.Fatalf("applied limit %+v, want %+v with 10 available", got, want)
		}

		f.write(head + "rate_limits:\n  api: {backend: x, rate: 10/s, burst: 2, prevent_destroy: true}\n")
		p = f.plan(reconcile.Options{})
		if out := text(p); p.Summary.Change != 1 || !strings.Contains(out, "~ rate_limit.api") || !strings.Contains(out, "keep counting") {
			t.Fatalf("plan of a rate change:\n%s", out)
		}
		f.apply(reconcile.Options{})
		want = backends.RateLimitConfig{Name: "api", Count: 10, Per: time.Second, Burst: 2}
		if got := observeRate(t, rl, "api"); got == nil || got.Config != want {
			t.Fatalf("updated limit %+v, want %+v", got, want)
		}

		if err := rl.DeleteRateLimit(ctx, "api"); err != nil {
			t.Fatal(err)
		}
		p = f.plan(reconcile.Options{})
		if out := text(p); len(p.Drift) != 1 || !strings.Contains(out, "rate_limit.api") || !strings.Contains(out, "missing in backend x") {
			t.Fatalf("plan after a delete behind coordd's back:\n%s", out)
		}
		f.apply(reconcile.Options{})
		noChanges(t, f, "after the repair")
		if p, err := rl.TakePermit(ctx, "api", "", 1); err != nil || !p.Allowed {
			t.Fatalf("permit after the repair: %+v, %v", p, err)
		}

		f.write(head + "semaphores:\n  s: {backend: x, limit: 1}\n")
		if p := f.plan(reconcile.Options{}); len(p.Blocked) == 0 || !strings.Contains(strings.Join(p.Blocked, "\n"), "prevent_destroy") {
			t.Fatalf("a delete under prevent_destroy is not blocked: %v", p.Blocked)
		}
		f.write(head + "rate_limits:\n  api: {backend: x, rate: 10/s, burst: 2}\n")
		f.apply(reconcile.Options{})
		f.write(head + "semaphores:\n  s: {backend: x, limit: 1}\n")
		f.apply(reconcile.Options{})
		if got := observeRate(t, rl, "api"); got != nil {
			t.Fatalf("limit left after its delete: %+v", got)
		}
		if _, err := rl.TakePermit(ctx, "api", "", 1); !errors.Is(err, backends.ErrNotFound) {
			t.Fatalf("permit of a deleted limit: %v, want ErrNotFound", err)
		}
	})
}

// TestPlanRefusesRateLimitsOnMemcached: validate refuses a rate limit on
// memcached at its file and line, so nothing is planned.
func TestPlanRefusesRateLimitsOnMemcached(t *testing.T) {
	_, err := spec.LoadFiles(map[string][]byte{"a.yaml": []byte("backends:\n  db: {type: sqlite}\n  mc: {type: memcached, servers: [\"127.0.0.1:1\"]}\ncluster: {backend: db}\nrate_limits:\n  api: {backend: mc, rate: 100/1m}\n")}, spec.LoadOptions{DataDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "a.yaml:6") || !strings.Contains(err.Error(), "whole seconds") {
		t.Fatalf("load = %v, want a refusal at a.yaml:6 that says why", err)
	}
}

func observeRate(t *testing.T, rl backends.RateLimits, name string) *backends.RateLimitState {
	t.Helper()
	m, err := rl.ObserveRateLimits(context.Background(), []string{name})
	if err != nil {
		t.Fatal(err)
	}
	return m[name]
}
