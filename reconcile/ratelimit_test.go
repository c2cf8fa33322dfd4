package reconcile_test

import (
	"context"
	"errors"
	"testing"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/reconcile"
	"github.com/coordd/coordd/spec"
)

// TestPlanRefusesRateLimits: a spec that declares rate limits is refused
// by plan, never applied with its rate limits silently left out.
func TestPlanRefusesRateLimits(t *testing.T) {
	s, err := spec.LoadFiles(map[string][]byte{"a.yaml": []byte("rate_limits:\n  api: {rate: 100/1m}\n")}, spec.LoadOptions{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	e, err := reconcile.Open(context.Background(), s, reconcile.OpenOptions{Version: "0.1.0", Host: "test-" + t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	_, err = e.Plan(context.Background(), reconcile.Options{})
	if !errors.Is(err, backends.ErrUnsupported) {
		t.Fatalf("Plan = %v, want %v", err, backends.ErrUnsupported)
	}
}
