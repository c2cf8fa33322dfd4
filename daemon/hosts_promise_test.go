package daemon_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/coordd/coordd/daemon"
	"github.com/coordd/coordd/internal/proctest"
	"github.com/coordd/coordd/internal/testenv"
)

// Promises of docs/design.md's "Host registry" about the daemon's side of
// it: a failed heartbeat is logged and never stops the daemon, and records
// of hosts not seen for a day are pruned at start and then periodically.

// runDaemon runs a daemon in this process on specPath with cfg's timings
// (SpecPath, HostID, Version and Log are set here) and returns its log and
// a function that stops it and returns Run's error.
func runDaemon(t *testing.T, specPath string, cfg daemon.Config) (*proctest.SyncBuffer, <-chan error, func() error) {
	t.Helper()
	logs := &proctest.SyncBuffer{}
	cfg.SpecPath, cfg.HostID, cfg.Version = specPath, "solo", "0.1.0"
	cfg.Log = hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Debug})
	cfg.ShutdownGrace, cfg.Debounce = time.Second, 20*time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	d, err := daemon.New(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	stopped := false
	var runErr error
	stop := func() error {
		if !stopped {
			stopped = true
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("the daemon did not stop within 30 s of its context's end")
			}
		}
		return runErr
	}
	t.Cleanup(func() { _ = stop() })
	return logs, done, stop
}

// TestPromiseHeartbeatFailureLoggedOnce: "a heartbeat that fails is logged
// and never stops the daemon", at warn the first time and at debug while
// it lasts, and its end at info. The embedded store is stalled (its write
// lock held) for many heartbeats.
func TestPromiseHeartbeatFailureLoggedOnce(t *testing.T) {
	dataDir := t.TempDir()
	t.Setenv("COORDD_DATA_DIR", dataDir)
	specPath := filepath.Join(t.TempDir(), "coordd.yaml")
	writeFile(t, specPath, "semaphores:\n  s: {limit: 1}\n")
	logs, done, stop := runDaemon(t, specPath, daemon.Config{HeartbeatEvery: 100 * time.Millisecond})
	proctest.Eventually(t, 20*time.Second, "the daemon running", func() bool { return strings.Contains(logs.String(), "coordd running") })

	const (
		failed = "host heartbeat failed; status shows this host stale"
		again  = "host heartbeat failed again"
		works  = "host heartbeat works again"
	)
	stall := &testenv.SQLiteStall{Path: filepath.Join(dataDir, "coordd.db")}
	stall.Kill()
	if stall.Running() {
		t.Fatal("could not stall the embedded store")
	}
	proctest.Eventually(t, 30*time.Second, "several failed heartbeats", func() bool {
		out := logs.String()
		return strings.Count(out, failed)+strings.Count(out, again) >= 5
	})
	select {
	case err := <-done:
		stall.Start(t)
		t.Fatalf("the daemon stopped while its heartbeats failed: %v\n%s", err, logs.String())
	default:
	}
	stall.Start(t)
	proctest.Eventually(t, 30*time.Second, "the heartbeat working again", func() bool { return strings.Contains(logs.String(), works) })

	out := logs.String()
	if n := strings.Count(out, failed); n != 1 {
		t.Fatalf("the failure was logged at warn %d times, want once:\n%s", n, out)
	}
	warn := out[strings.Index(out, failed)-200 : strings.Index(out, failed)]
	if !strings.Contains(warn[strings.LastIndex(warn, "\n")+1:], "[WARN]") {
		t.Fatalf("the first failure is not at warn:\n%s", out)
	}
	if err := stop(); err != nil {
		t.Fatalf("run: %v", err)
	}
}

// insertHost writes a host record last seen `ago` before now into the
// embedded store at path, behind coordd's back.
func insertHost(t *testing.T, path, host string, ago time.Duration) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	at := time.Now().Add(-ago).UnixMicro()
	if _, err := db.Exec(`INSERT INTO hosts (host, run_id, pid, started_at, last_seen) VALUES (?, ?, 1, ?, ?)`,
		host, host+"/1/aa", at, at); err != nil {
		t.Fatalf("inserting host %s: %v", host, err)
	}
}

// hostListed reports whether status lists host.
func hostListed(t *testing.T, env *proctest.Env, specPath, host string) bool {
	t.Helper()
	for _, h := range hostsStatus(t, env, specPath).Hosts {
		if h.Host == host {
			return true
		}
	}
	return false
}

// TestPromiseHostPruneAtStartAndPeriodically: "records not seen for 24 h
// are pruned at start and hourly". A record two days old is gone once a
// daemon started; one written while it runs is gone within the next
// period (shortened here), and one an hour old stays.
func TestPromiseHostPruneAtStartAndPeriodically(t *testing.T) {
	env := proctest.NewEnv(t)
	t.Setenv("COORDD_DATA_DIR", env.DataDir)
	specPath := filepath.Join(t.TempDir(), "coordd.yaml")
	writeFile(t, specPath, "semaphores:\n  s: {limit: 1}\n")
	if out, code := env.Run(t, "apply", "-f", specPath, "--auto-approve"); code != 0 {
		t.Fatalf("apply: %d %s", code, out)
	}
	store := filepath.Join(env.DataDir, "coordd.db")
	insertHost(t, store, "ghost-start", 48*time.Hour)
	insertHost(t, store, "recent", time.Hour)
	if !hostListed(t, env, specPath, "ghost-start") {
		t.Fatal("status does not list the old record written before the start")
	}

	// The default period (an hour): only the prune at start can remove it.
	logs, _, stop := runDaemon(t, specPath, daemon.Config{HeartbeatEvery: 100 * time.Millisecond})
	proctest.Eventually(t, 20*time.Second, "the record from before the start pruned", func() bool {
		return !hostListed(t, env, specPath, "ghost-start")
	})
	if !strings.Contains(logs.String(), "forgot hosts not seen for a day") {
		t.Errorf("the prune was not logged:\n%s", logs.String())
	}
	if err := stop(); err != nil {
		t.Fatalf("run: %v", err)
	}

	// A short period: a record that ages past the retention while the
	// daemon runs is pruned by a later pass.
	_, _, stop = runDaemon(t, specPath, daemon.Config{HeartbeatEvery: 100 * time.Millisecond, PruneEvery: 300 * time.Millisecond})
	proctest.Eventually(t, 20*time.Second, "the daemon's record", func() bool { return hostListed(t, env, specPath, "solo") })
	insertHost(t, store, "ghost-later", 25*time.Hour)
	proctest.Eventually(t, 20*time.Second, "the record written while the daemon runs pruned", func() bool {
		return !hostListed(t, env, specPath, "ghost-later")
	})
	if !hostListed(t, env, specPath, "recent") {
		t.Fatal("a record an hour old was pruned")
	}
	if err := stop(); err != nil {
		t.Fatalf("run: %v", err)
	}
}
