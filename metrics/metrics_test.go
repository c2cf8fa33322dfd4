package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/sqlite"
	"github.com/coordd/coordd/metrics"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// source is a daemon's state as a test sets it; the backends are real.
type source struct {
	mu     sync.Mutex
	health error
	objs   []metrics.Objects
}

func (s *source) Leading() (int64, bool)        { return 7, true }
func (s *source) LastReload() (bool, time.Time) { return true, time.Unix(1700000000, 0) }
func (s *source) Health() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.health
}
func (s *source) Ready(context.Context) error { return s.Health() }
func (s *source) Objects() []metrics.Objects  { return s.objs }

// serve starts m on a free localhost port and returns its base URL; the
// server stops when the test ends, and the test fails if Serve errs.
func serve(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func hasLine(body, line string) bool {
	for _, l := range strings.Split(body, "\n") {
		if l == line {
			return true
		}
	}
	return false
}

func openStore(t *testing.T) *sqlite.Store {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, "local", filepath.Join(t.TempDir(), "coordd.db"), backends.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestMetricsCollectSQLite scrapes semaphores and queues observed on a real
// SQLite store, then closes the store: the scrape still answers and
// reports the backend's observe as failed.
func TestMetricsCollectSQLite(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	if err := st.PutSemaphore(ctx, backends.SemaphoreConfig{Name: "s", Limit: 4, Lease: 10 * time.Second, Mode: "lease", MaxWaiting: -1}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutQueue(ctx, backends.QueueConfig{Name: "q", Partitions: 1, VisibilityTimeout: time.Minute, MaxAttempts: 3}); err != nil {
		t.Fatal(err)
	}
	src := &source{objs: []metrics.Objects{{Backend: "local", B: st, Semaphores: []string{"s"}, Queues: []string{"q"}}}}
	m := metrics.New(src)
	m.CronStarted("t", time.Now().Add(-time.Second), 1, time.Now())
	m.CronFinished("t", backends.RunSucceeded)
	m.Reconciled("resync", errors.New("boom"))
	base := serve(t, m)

	code, body := get(t, base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics = %d", code)
	}
	for _, l := range []string{
		`coordd_leader 1`,
		`coordd_leader_term 7`,
		`coordd_config_last_reload_successful 1`,
		`coordd_config_last_reload_success_timestamp_seconds 1.7e+09`,
		`coordd_backend_observe_successful{backend="local"} 1`,
		`coordd_semaphore_limit{backend="local",semaphore="s"} 4`,
		`coordd_semaphore_holders{backend="local",semaphore="s"} 0`,
		`coordd_queue_ready{backend="local",queue="q"} 0`,
		`coordd_queue_oldest_ready_age_seconds{backend="local",queue="q"} 0`,
		`coordd_cron_runs_total{status="succeeded",task="t"} 1`,
		`coordd_cron_lateness_seconds_count{task="t"} 1`,
		`coordd_reconcile_runs_total{kind="resync"} 1`,
		`coordd_reconcile_errors_total{kind="resync"} 1`,
		`coordd_reconcile_errors_total{kind="apply"} 0`,
	} {
		if !hasLine(body, l) {
			t.Errorf("no line %q in /metrics", l)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	code, body = get(t, base+"/metrics")
	if code != http.StatusOK || !hasLine(body, `coordd_backend_observe_successful{backend="local"} 0`) {
		t.Fatalf("scrape of a closed backend = %d:\n%s", code, body)
	}
	// The first scrape's observe calls were timed (a histogram is gathered
	// beside the collector, so they show from the second scrape on).
	if !strings.Contains(body, `coordd_backend_round_trip_seconds_count{backend="local",op="observe_semaphores"} `) {
		t.Errorf("the observe call was not timed")
	}
}

// TestHealthz: 200 "ok" while healthy; 503 and one line of reason otherwise,
// on /healthz and /readyz alike.
func TestHealthz(t *testing.T) {
	src := &source{}
	base := serve(t, metrics.New(src))
	if code, body := get(t, base+"/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("/healthz = %d %q", code, body)
	}
	src.mu.Lock()
	src.health = errors.New("spec reload failed:\ncoordd.yaml:2: limit must be at least 1")
	src.mu.Unlock()
	for _, p := range []string{"/healthz", "/readyz"} {
		code, body := get(t, base+p)
		if code != http.StatusServiceUnavailable || body != "spec reload failed: coordd.yaml:2: limit must be at least 1\n" {
			t.Fatalf("%s = %d %q", p, code, body)
		}
	}
}

// TestListenerStopsWithContext: Serve returns when its context ends and
// the port is closed (goleak in TestMain checks the goroutines).
func TestListenerStopsWithContext(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- metrics.New(&source{}).Serve(ctx, ln) }()
	if code, _ := get(t, "http://"+addr+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz = %d", code)
	}
	http.DefaultClient.CloseIdleConnections()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatal("the port still accepts connections")
	}
}

// hostSource is a source whose cluster backend keeps a host registry.
type hostSource struct {
	source
	local, applied string
	known          bool
	reg            backends.Cluster
}

func (s *hostSource) SpecHashes() (string, string, bool) { return s.local, s.applied, s.known }
func (s *hostSource) HostRegistry() (string, backends.Cluster) {
	return "local", s.reg
}

// TestMetricsHosts: this host's hash against the applied one, and the
// hosts of a real SQLite registry by state and spec hash.
func TestMetricsHosts(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	defer st.Close()
	beat := func(host, hash string, stopped bool) {
		t.Helper()
		if err := st.Heartbeat(ctx, backends.HostRecord{Host: host, RunID: host + "/1", SpecHash: hash, HeartbeatEvery: time.Minute, Stopped: stopped}); err != nil {
			t.Fatal(err)
		}
	}
	beat("a", "aaaaaaaaaaaaaaaa", false)
	beat("b", "bbbbbbbbbbbbbbbb", false)
	beat("c", "aaaaaaaaaaaaaaaa", true)
	src := &hostSource{local: "bbbbbbbbbbbbbbbb", reg: st}
	base := serve(t, metrics.New(src))

	_, body := get(t, base+"/metrics")
	if strings.Contains(body, "coordd_spec_hash_matches_applied") {
		t.Errorf("coordd_spec_hash_matches_applied before the applied hash is known:\n%s", body)
	}
	for _, l := range []string{
		`coordd_spec_info{applied_hash="",local_hash="bbbbbbbbbbbb"} 1`,
		`coordd_hosts{state="live"} 2`,
		`coordd_hosts{state="stale"} 0`,
		`coordd_hosts{state="stopped"} 1`,
		`coordd_hosts_spec_hashes 2`,
	} {
		if !hasLine(body, l) {
			t.Errorf("no line %q in /metrics:\n%s", l, body)
		}
	}
	for _, c := range []struct {
		applied string
		want    string
	}{
		{"aaaaaaaaaaaaaaaa", `coordd_spec_hash_matches_applied 0`},
		{"bbbbbbbbbbbbbbbb", `coordd_spec_hash_matches_applied 1`},
	} {
		src.applied, src.known = c.applied, true
		if _, body := get(t, base+"/metrics"); !hasLine(body, c.want) {
			t.Errorf("applied %s: no line %q", c.applied, c.want)
		}
	}
}

// TestMetricsKeyedInstances: a keyed semaphore's gauges count the holders
// and waiters of every instance, and coordd_semaphore_instances its live
// instances.
func TestMetricsKeyedInstances(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	defer st.Close()
	if err := st.PutSemaphore(ctx, backends.SemaphoreConfig{Name: "k", Limit: 1, Lease: time.Minute, Mode: "lease", MaxWaiting: -1, Keyed: true}); err != nil {
		t.Fatal(err)
	}
	for i, key := range []string{"a", "b"} {
		if _, err := st.TryAcquire(ctx, backends.SemRef{Name: "k", Key: key}, backends.AcquireRequest{Owner: fmt.Sprintf("o%d", i), Lease: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.EnterWait(ctx, backends.SemRef{Name: "k", Key: "a"}, backends.AcquireRequest{Owner: "w", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	src := &source{objs: []metrics.Objects{{Backend: "local", B: st, Semaphores: []string{"k"}}}}
	base := serve(t, metrics.New(src))
	_, body := get(t, base+"/metrics")
	for _, l := range []string{
		`coordd_semaphore_holders{backend="local",semaphore="k"} 2`,
		`coordd_semaphore_waiters{backend="local",semaphore="k"} 1`,
		`coordd_semaphore_instances{backend="local",semaphore="k"} 2`,
	} {
		if !hasLine(body, l) {
			t.Errorf("no line %q in /metrics", l)
		}
	}
}

// TestMetricsRateLimits: an unkeyed limit reports the permits it would
// grant at once (its burst when idle, fewer after permits), a keyed one
// its busy keys, read from a real store at scrape time.
func TestMetricsRateLimits(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	t.Cleanup(func() { st.Close() })
	for _, c := range []backends.RateLimitConfig{
		{Name: "api", Count: 10, Per: time.Hour, Burst: 5},
		{Name: "per-user", Count: 10, Per: time.Hour, Burst: 1, Keyed: true},
	} {
		if err := st.PutRateLimit(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	src := &source{objs: []metrics.Objects{{Backend: "local", B: st, RateLimits: []string{"api", "per-user"}}}}
	base := serve(t, metrics.New(src))
	_, body := get(t, base+"/metrics")
	for _, l := range []string{
		`coordd_rate_limit_available{backend="local",rate_limit="api"} 5`,
		`coordd_rate_limit_busy_keys{backend="local",rate_limit="per-user"} 0`,
	} {
		if !hasLine(body, l) {
			t.Errorf("idle: no line %q in /metrics:\n%s", l, body)
		}
	}
	for range 2 {
		if p, err := st.TakePermit(ctx, "api", "", 1); err != nil || !p.Allowed {
			t.Fatalf("take: %+v, %v", p, err)
		}
	}
	if p, err := st.TakePermit(ctx, "per-user", "u1", 1); err != nil || !p.Allowed {
		t.Fatalf("take: %+v, %v", p, err)
	}
	_, body = get(t, base+"/metrics")
	for _, l := range []string{
		`coordd_rate_limit_available{backend="local",rate_limit="api"} 3`,
		`coordd_rate_limit_busy_keys{backend="local",rate_limit="per-user"} 1`,
	} {
		if !hasLine(body, l) {
			t.Errorf("after permits: no line %q in /metrics:\n%s", l, body)
		}
	}
}
