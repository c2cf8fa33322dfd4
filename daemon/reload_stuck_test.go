package daemon_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/coordd/coordd/daemon"
	"github.com/coordd/coordd/internal/fsblock"
	"github.com/coordd/coordd/internal/proctest"
	"github.com/coordd/coordd/spec"
)

// listening starts, in this process, a daemon on the spec directory dir
// with a /metrics and /healthz listener and the given read timeout, and
// returns the listener's base URL and the log. setup runs before Run. The
// daemon stops when the test ends.
func listening(t *testing.T, dir string, readTimeout time.Duration, setup func(*daemon.Daemon)) (base string, logs *proctest.SyncBuffer) {
	t.Helper()
	t.Setenv("COORDD_DATA_DIR", t.TempDir())
	logs = &proctest.SyncBuffer{}
	d, err := daemon.New(context.Background(), daemon.Config{SpecPath: dir, HostID: "solo", Version: "0.1.0",
		Log: hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Debug}), ShutdownGrace: time.Second,
		Debounce: 20 * time.Millisecond, Listen: "127.0.0.1:0", LoadOptions: spec.LoadOptions{ReadTimeout: readTimeout}})
	if err != nil {
		t.Fatal(err)
	}
	if setup != nil {
		setup(d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("the daemon did not stop")
		}
	})
	proctest.Eventually(t, 20*time.Second, "the daemon running", func() bool { return strings.Contains(logs.String(), "coordd running") })
	return "http://" + d.ListenAddr(), logs
}

// health waits until /healthz answers code with a body holding want.
func health(t *testing.T, base string, code int, want string) {
	t.Helper()
	probe(t, base+"/healthz", code, want)
}

// ready waits until /readyz answers code with a body holding want.
func ready(t *testing.T, base string, code int, want string) {
	t.Helper()
	probe(t, base+"/readyz", code, want)
}

func probe(t *testing.T, url string, code int, want string) {
	t.Helper()
	proctest.Eventually(t, 30*time.Second, url+" "+want, func() bool {
		got, body := scrape(t, url)
		return got == code && strings.Contains(body, want)
	})
}

// metric waits until the value of name (with labels) satisfies ok.
func metric(t *testing.T, base, name string, ok func(float64) bool, labels ...string) {
	t.Helper()
	proctest.Eventually(t, 30*time.Second, name, func() bool {
		_, body := scrape(t, base+"/metrics")
		v, found := metricValue(body, name, labels...)
		return found && ok(v)
	})
}

func is(want float64) func(float64) bool { return func(v float64) bool { return v == want } }

// TestReloadOfKernelFileFails: a symlink to /proc/kmsg added to the spec
// directory of a running daemon wedged its reloads for good (a read of it
// waits for the next kernel message), while the health check said ok and
// coordd_config_last_reload_successful stayed 1. The reload now fails at
// once, /readyz and the metric show it (/healthz stays 200: the last good
// spec runs), and the daemon recovers when the link goes.
func TestReloadOfKernelFileFails(t *testing.T) {
	env := proctest.NewEnv(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), "semaphores:\n  s: {limit: 3}\n")
	d := env.Start(t, "daemon", "run", "-f", dir, "--host-id", "solo", "--listen", "127.0.0.1:0", "--log-level", "debug")
	var base string
	proctest.Eventually(t, 20*time.Second, "the listen address in the log", func() bool {
		m := listenAddr.FindStringSubmatch(d.Output())
		if m != nil {
			base = "http://" + m[1]
		}
		return m != nil
	})
	health(t, base, http.StatusOK, "ok")

	link := filepath.Join(dir, "k.yaml")
	if err := os.Symlink("/proc/kmsg", link); err != nil {
		t.Fatal(err)
	}
	d.Signal(syscall.SIGHUP)
	ready(t, base, http.StatusServiceUnavailable, "not a regular file (procfs, a kernel file system)")
	metric(t, base, "coordd_config_last_reload_successful", is(0))
	health(t, base, http.StatusOK, "ok")
	metric(t, base, "coordd_semaphore_limit", is(3)) // the last good spec runs

	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	d.Signal(syscall.SIGHUP)
	ready(t, base, http.StatusOK, "ok")
	metric(t, base, "coordd_config_last_reload_successful", is(1))
	d.Signal(syscall.SIGTERM)
	if code := d.Wait(t, 30*time.Second); code != 0 {
		t.Fatalf("daemon exited %d:\n%s", code, d.Output())
	}
}

// TestReloadStuckInFileSystemFails: a spec file whose open never returns
// (a hung network file system) fails the reload at the read deadline;
// /readyz and coordd_config_last_reload_successful show it, while
// /healthz stays 200 (the last good spec runs).
func TestReloadStuckInFileSystemFails(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), "semaphores:\n  s: {limit: 3}\n")
	base, logs := listening(t, dir, 200*time.Millisecond, nil)
	health(t, base, http.StatusOK, "ok")
	stuck := filepath.Join(dir, "b.yaml")
	writeFile(t, stuck, "semaphores:\n  t: {limit: 1}\n")
	metric(t, base, "coordd_semaphore_limit", is(1), `semaphore="t"`) // b.yaml was read once
	b := fsblock.Block(t, stuck)
	writeFile(t, filepath.Join(dir, "a.yaml"), "semaphores:\n  s: {limit: 4}\n") // a change: reload
	if pid := b.Opened(t, 30*time.Second); pid != os.Getpid() {
		t.Fatalf("pid %d opened the spec, want the daemon's %d", pid, os.Getpid())
	}
	ready(t, base, http.StatusServiceUnavailable, "the file system did not answer within 200ms")
	metric(t, base, "coordd_config_last_reload_successful", is(0))
	health(t, base, http.StatusOK, "ok")
	if !strings.Contains(logs.String(), "b.yaml:1:1: cannot read spec: the file system did not answer") {
		t.Errorf("the log does not name the stuck file:\n%s", logs.String())
	}
	b.Release()
	writeFile(t, filepath.Join(dir, "a.yaml"), "semaphores:\n  s: {limit: 5}\n")
	ready(t, base, http.StatusOK, "ok")
	metric(t, base, "coordd_config_last_reload_successful", is(1))
}

// TestStuckReloadShowsInHealth: a reload stuck where no read deadline
// reaches makes /healthz fail once it has run twice the read timeout, and
// coordd_config_reload_in_progress_seconds counts it; both clear when it
// ends.
func TestStuckReloadShowsInHealth(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), "semaphores:\n  s: {limit: 3}\n")
	release := make(chan struct{})
	var once bool
	base, _ := listening(t, dir, 100*time.Millisecond, func(d *daemon.Daemon) {
		daemon.SetLoadSpec(d, func(ctx context.Context, p string, o spec.LoadOptions) (*spec.Spec, error) {
			if !once {
				once = true // reloads run one at a time
				<-release
			}
			return spec.LoadContext(ctx, p, o)
		})
	})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	metric(t, base, "coordd_config_reload_in_progress_seconds", is(0))
	writeFile(t, filepath.Join(dir, "a.yaml"), "semaphores:\n  s: {limit: 4}\n")
	health(t, base, http.StatusServiceUnavailable, "spec reload stuck: running for")
	ready(t, base, http.StatusServiceUnavailable, "spec reload stuck: running for")
	metric(t, base, "coordd_config_reload_in_progress_seconds", func(v float64) bool { return v > 0.2 })
	close(release)
	health(t, base, http.StatusOK, "ok")
	metric(t, base, "coordd_config_reload_in_progress_seconds", is(0))
	metric(t, base, "coordd_semaphore_limit", is(4))
}
