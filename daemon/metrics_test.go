package daemon_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordd/coordd/daemon"
	"github.com/coordd/coordd/internal/proctest"
	"github.com/coordd/coordd/internal/testenv"
)

// scrape GETs url and returns the status code and body.
func scrape(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

// metricValue is testenv.MetricValue.
var metricValue = testenv.MetricValue

var listenAddr = regexp.MustCompile(`serving /metrics and /healthz: addr=(\S+)`)

// TestMetricsAndHealth runs a daemon with --listen on a free port and
// checks /metrics, /healthz and /readyz: leadership, the reload metrics, a
// semaphore's limit, a queue's ready count after a push, a cron run by
// status, and a broken reload that flips the reload metric and /readyz
// (not /healthz) while the last good spec keeps running.
func TestMetricsAndHealth(t *testing.T) {
	env := proctest.NewEnv(t)
	dir := t.TempDir()
	specPath := filepath.Join(dir, "coordd.yaml")
	good := `semaphores:
  s: {limit: 3}
queues:
  q: {}
cron:
  tick:
    schedule: "@every 1s"
    command: "true"
`
	writeFile(t, specPath, good)
	d := env.Start(t, "daemon", "run", "-f", specPath, "--host-id", "solo", "--listen", "127.0.0.1:0", "--log-level", "debug")
	var base string
	proctest.Eventually(t, 20*time.Second, "the listen address in the log", func() bool {
		m := listenAddr.FindStringSubmatch(d.Output())
		if m != nil {
			base = "http://" + m[1]
		}
		return m != nil
	})

	var body string
	want := func(what, name string, value float64, labels ...string) {
		t.Helper()
		proctest.Eventually(t, 20*time.Second, what, func() bool {
			_, body = scrape(t, base+"/metrics")
			v, ok := metricValue(body, name, labels...)
			return ok && v == value
		})
	}
	want("leader 1", "coordd_leader", 1)
	want("reload successful 1", "coordd_config_last_reload_successful", 1)
	want("semaphore limit 3", "coordd_semaphore_limit", 3, `semaphore="s"`)
	if v, ok := metricValue(body, "coordd_leader_term"); !ok || v < 1 {
		t.Errorf("coordd_leader_term = %v, %v", v, ok)
	}
	if v, ok := metricValue(body, "coordd_config_last_reload_success_timestamp_seconds"); !ok || time.Since(time.Unix(int64(v), 0)) > time.Minute {
		t.Errorf("coordd_config_last_reload_success_timestamp_seconds = %v, %v", v, ok)
	}
	if out, code := env.Run(t, "queue", "push", "q", "-f", specPath, "payload"); code != 0 {
		t.Fatalf("queue push: %d %s", code, out)
	}
	want("queue ready 1", "coordd_queue_ready", 1, `queue="q"`)
	want("a cron run counted as succeeded", "coordd_cron_runs_total", 1, `task="tick"`, `status="succeeded"`)
	proctest.Eventually(t, 20*time.Second, "more cron runs", func() bool {
		_, body = scrape(t, base+"/metrics")
		v, _ := metricValue(body, "coordd_cron_runs_total", `task="tick"`, `status="succeeded"`)
		return v >= 2
	})
	for _, name := range []string{
		"coordd_semaphore_holders", "coordd_semaphore_waiters",
		"coordd_queue_in_flight", "coordd_queue_dead", "coordd_queue_oldest_ready_age_seconds",
		"coordd_reconcile_runs_total", "coordd_reconcile_errors_total",
		"coordd_cron_lateness_seconds_count", "coordd_backend_round_trip_seconds_count",
		"coordd_backend_observe_successful",
	} {
		if _, ok := metricValue(body, name); !ok {
			t.Errorf("no %s in /metrics", name)
		}
	}
	if v, _ := metricValue(body, "coordd_reconcile_runs_total", `kind="apply"`); v < 1 {
		t.Errorf("coordd_reconcile_runs_total{kind=apply} = %v", v)
	}
	if v, _ := metricValue(body, "coordd_backend_round_trip_seconds_count", `op="observe_queues"`); v < 1 {
		t.Errorf("no timed observe_queues round trip")
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, h := scrape(t, base+p); code != http.StatusOK || h != "ok\n" {
			t.Fatalf("%s = %d %q", p, code, h)
		}
	}

	// A broken spec: the reload fails, the last good spec keeps running.
	// The process is alive (/healthz: a probe that restarted it would stop
	// the last good spec) but not ready.
	writeFile(t, specPath, "semaphores:\n  s: {limit: 0}\n")
	want("reload successful 0", "coordd_config_last_reload_successful", 0)
	code, h := scrape(t, base+"/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(h, "spec reload failed") || strings.Count(strings.TrimSpace(h), "\n") != 0 {
		t.Fatalf("/readyz after a broken reload = %d %q", code, h)
	}
	if code, h := scrape(t, base+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz after a broken reload = %d %q", code, h)
	}
	want("the last good semaphore limit", "coordd_semaphore_limit", 3, `semaphore="s"`)
	want("still leading", "coordd_leader", 1)

	// A good spec again: healthy.
	writeFile(t, specPath, good)
	want("reload successful 1 again", "coordd_config_last_reload_successful", 1)
	if code, h := scrape(t, base+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz after a good reload = %d %q", code, h)
	}

	d.Signal(syscall.SIGTERM)
	if code := d.Wait(t, 30*time.Second); code != 0 {
		t.Fatalf("daemon exited %d", code)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Errorf("the listener is still open after the daemon stopped")
	}
}

// TestNoListenerWithoutListen: without Config.Listen nothing listens.
func TestNoListenerWithoutListen(t *testing.T) {
	t.Setenv("COORDD_DATA_DIR", t.TempDir())
	specPath := filepath.Join(t.TempDir(), "coordd.yaml")
	writeFile(t, specPath, "semaphores:\n  s: {limit: 1}\n")
	ctx, cancel := context.WithCancel(context.Background())
	d, err := daemon.New(ctx, daemon.Config{SpecPath: specPath, HostID: "h", ShutdownGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if a := d.ListenAddr(); a != "" {
		t.Errorf("ListenAddr = %q without Listen", a)
	}
	cancel()
	if err := d.Run(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestReadyzFollowsTheBackend: while the daemon's Redis is down /readyz
// answers 503 naming the backend and /healthz 200 (the process is fine);
// when Redis is back, /readyz answers 200 again.
func TestReadyzFollowsTheBackend(t *testing.T) {
	env := proctest.NewEnv(t)
	r := testenv.StartRedis(t)
	specPath := filepath.Join(t.TempDir(), "coordd.yaml")
	writeFile(t, specPath, fmt.Sprintf("backends:\n  cache: {type: redis, url: \"redis://127.0.0.1:%d/0\", key_prefix: \"readyz:\"}\ncluster: {backend: cache}\nsemaphores:\n  s: {limit: 1}\n", r.Port))
	d := env.Start(t, "daemon", "run", "-f", specPath, "--host-id", "solo", "--listen", "127.0.0.1:0")
	var base string
	proctest.Eventually(t, 20*time.Second, "the listen address in the log", func() bool {
		m := listenAddr.FindStringSubmatch(d.Output())
		if m != nil {
			base = "http://" + m[1]
		}
		return m != nil
	})
	probe := func(what, path string, want int, text string) {
		t.Helper()
		proctest.Eventually(t, 20*time.Second, what, func() bool {
			code, h := scrape(t, base+path)
			return code == want && strings.Contains(h, text)
		})
	}
	probe("ready", "/readyz", http.StatusOK, "ok")
	r.Kill()
	probe("unready with Redis down", "/readyz", http.StatusServiceUnavailable, "backend cache: unreachable")
	if code, h := scrape(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz with Redis down = %d %q, want 200", code, h)
	}
	r.Start(t)
	probe("ready again", "/readyz", http.StatusOK, "ok")
	d.Signal(syscall.SIGTERM)
	if code := d.Wait(t, 30*time.Second); code != 0 {
		t.Fatalf("daemon exited %d", code)
	}
}
