package daemon_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/coordd/coordd/daemon"
	"github.com/coordd/coordd/internal/proctest"
	"github.com/coordd/coordd/internal/testenv"
)

// TestSameHostIDRefusedOnOneMachine: a second `coordd run` with the host id
// of a running one, on the same machine and data directory, refuses to
// start and names the first one's pid; the first keeps running. Once the
// first is killed with kill -9 (no chance to clean up), the id is free at
// once.
func TestSameHostIDRefusedOnOneMachine(t *testing.T) {
	env := proctest.NewEnv(t)
	specPath := filepath.Join(t.TempDir(), "coordd.yaml")
	writeFile(t, specPath, "semaphores:\n  s: {limit: 1}\n")
	first := env.Start(t, "first", "run", "-f", specPath, "--host-id", "web1", "--shutdown-grace", "2s")
	proctest.Eventually(t, 20*time.Second, "the first daemon running", func() bool {
		return strings.Contains(first.Output(), "coordd running")
	})

	second := env.Start(t, "second", "run", "-f", specPath, "--host-id", "web1")
	code, out := second.Wait(t, 20*time.Second), second.Output()
	want := fmt.Sprintf(`another coordd run with host id "web1" runs on this machine (pid %d`, first.Cmd.Process.Pid)
	if code != 1 || !strings.Contains(out, want) {
		t.Fatalf("second daemon with the same host id: exit %d, want 1 with %q:\n%s", code, want, out)
	}
	if !first.Running() {
		t.Fatalf("the first daemon stopped:\n%s", first.Output())
	}
	// Another host id on the same machine is fine.
	other := env.Start(t, "other", "run", "-f", specPath, "--host-id", "web2", "--shutdown-grace", "2s")
	proctest.Eventually(t, 20*time.Second, "a daemon with another host id running", func() bool {
		return strings.Contains(other.Output(), "coordd running")
	})

	first.Kill9()
	again := env.Start(t, "again", "run", "-f", specPath, "--host-id", "web1", "--shutdown-grace", "2s")
	proctest.Eventually(t, 20*time.Second, "a restart after kill -9 running", func() bool {
		return strings.Contains(again.Output(), "coordd running")
	})
}

// TestHostIDConflictAcrossMachines: two daemons with one host id on
// different machines (here: in-process, so no machine lock is taken) share
// a cluster backend. Each notices, at its next heartbeat, that another run
// rewrote its host record, and logs it at error; once the other stops
// cleanly, the conflict's end is logged. Run on every backend with a host
// registry.
func TestHostIDConflictAcrossMachines(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		db := filepath.Join(t.TempDir(), "shared.db")
		hostIDConflict(t, fmt.Sprintf("backends:\n  db: {type: sqlite, path: %q}\n", db))
	})
	t.Run("mysql", func(t *testing.T) {
		hostIDConflict(t, fmt.Sprintf("backends:\n  db: {type: mysql, dsn: %q, table_prefix: \"hg_\"}\n", testenv.MySQLDSN(t)))
	})
	t.Run("postgres", func(t *testing.T) {
		hostIDConflict(t, fmt.Sprintf("backends:\n  db: {type: postgres, dsn: %q, schema: coordd, table_prefix: \"hg_\"}\n", testenv.PostgresDSN(t)))
	})
	t.Run("redis", func(t *testing.T) {
		url, prefix := testenv.RedisURL(t)
		hostIDConflict(t, fmt.Sprintf("backends:\n  db: {type: redis, url: %q, key_prefix: %q}\n", url, prefix))
	})
}

func hostIDConflict(t *testing.T, header string) {
	t.Setenv("COORDD_DATA_DIR", t.TempDir())
	specPath := filepath.Join(t.TempDir(), "coordd.yaml")
	writeFile(t, specPath, header+"semaphores:\n  s: {limit: 1}\n")

	type running struct {
		logs   *proctest.SyncBuffer
		cancel context.CancelFunc
		done   chan error
	}
	start := func(name string) *running {
		r := &running{logs: &proctest.SyncBuffer{}, done: make(chan error, 1)}
		log := hclog.New(&hclog.LoggerOptions{Name: name, Output: r.logs, Level: hclog.Debug})
		var ctx context.Context
		ctx, r.cancel = context.WithCancel(context.Background())
		d, err := daemon.New(ctx, daemon.Config{SpecPath: specPath, HostID: "clone", Version: "0.1.0", Log: log,
			ShutdownGrace: time.Second, HeartbeatEvery: 100 * time.Millisecond, Debounce: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		go func() { r.done <- d.Run(ctx) }()
		t.Cleanup(func() {
			r.cancel()
			<-r.done
		})
		return r
	}
	const conflict = "another daemon runs with this host id"
	a := start("a")
	// Alone, a daemon sees only its own record.
	proctest.Eventually(t, 20*time.Second, "a leads", func() bool { return strings.Contains(a.logs.String(), "coordd running") })
	time.Sleep(500 * time.Millisecond)
	if strings.Contains(a.logs.String(), conflict) {
		t.Fatalf("a daemon alone reported a conflict:\n%s", a.logs.String())
	}

	b := start("b")
	for name, r := range map[string]*running{"a": a, "b": b} {
		proctest.Eventually(t, 20*time.Second, name+" reports the conflict", func() bool {
			return strings.Contains(r.logs.String(), conflict)
		})
	}
	b.cancel()
	if err := <-b.done; err != nil {
		t.Fatalf("b: %v", err)
	}
	b.done <- nil // for the cleanup
	proctest.Eventually(t, 20*time.Second, "a logs the conflict's end", func() bool {
		return strings.Contains(a.logs.String(), "no other daemon rewrote this host's record")
	})
}
