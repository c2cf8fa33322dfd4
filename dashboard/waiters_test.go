package dashboard_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/dashboard"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/reconcile"
	"github.com/coordd/coordd/spec"
)

// TestDashboardNoLineOnMemcached: memcached keeps no line of waiters, so
// the semaphores page says so for its semaphores, in place of a waiter
// count that would always read 0, while a semaphore on the embedded store
// beside it shows its line.
func TestDashboardNoLineOnMemcached(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addr, prefix := testenv.MemcachedAddr(t)
	s, e := applied(ctx, t, fmt.Sprintf(`backends:
  local: {type: sqlite}
  mc: {type: memcached, servers: [%q], key_prefix: %q}
cluster: {backend: local}
semaphores:
  on-mc: {backend: mc, limit: 1, lease: 1m}
  on-local: {backend: local, limit: 1, lease: 1m}
`, addr, prefix))
	local := e.Backends["local"]
	if _, err := local.Semaphores().TryAcquire(ctx, backends.SemRef{Name: "on-local"}, backends.AcquireRequest{Owner: "o-1", Host: "web-1", PID: 11, Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := local.Semaphores().Waiters().EnterWait(ctx, backends.SemRef{Name: "on-local"}, backends.AcquireRequest{Owner: "o-2", Host: "web-2", PID: 22, Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	d, err := dashboard.New(&source{s: s, e: e}, dashboard.Options{}, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/semaphores")
	if err != nil {
		t.Fatal(err)
	}
	page, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /semaphores: %d %v", resp.StatusCode, err)
	}
	card := func(name string) string {
		t.Helper()
		c, ok := strings.CutPrefix(string(page)[max(strings.Index(string(page), `id="sem-`+name+`"`), 0):], `id="sem-`+name+`"`)
		if !ok {
			t.Fatalf("no card for %s:\n%s", name, page)
		}
		if end := strings.Index(c, `<div class="card"`); end >= 0 {
			c = c[:end]
		}
		return c
	}
	mcCard, localCard := card("on-mc"), card("on-local")
	for _, want := range []string{"no line of waiters", "keeps no line of waiters"} {
		if !strings.Contains(mcCard, want) {
			t.Errorf("on-mc's card lacks %q:\n%s", want, mcCard)
		}
	}
	if strings.Contains(mcCard, "waiters <b") {
		t.Errorf("on-mc's card shows a waiter count:\n%s", mcCard)
	}
	for _, want := range []string{`waiters <b class="waiters">1</b>`, "Waiting in line", "web-2", ">22<"} {
		if !strings.Contains(localCard, want) {
			t.Errorf("on-local's card lacks %q:\n%s", want, localCard)
		}
	}
}

// applied loads the spec body from a temp dir, opens its backends (closed
// by t.Cleanup) and applies it.
func applied(ctx context.Context, t testing.TB, body string) (*spec.Spec, *reconcile.Engine) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "coordd.yaml"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := spec.Load(dir, spec.LoadOptions{DataDir: filepath.Join(dir, "data"), Getenv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	e, err := reconcile.Open(ctx, s, reconcile.OpenOptions{Version: "0.1.0", Host: "web-1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	if _, err := e.Apply(ctx, reconcile.Options{}, ""); err != nil {
		t.Fatalf("apply: %v", err)
	}
	return s, e
}
