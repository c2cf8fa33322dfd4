package main

// A backend losing its data (docs/design.md, "When Redis loses its data"
// and memcached's "Eviction and restart"): a semaphore lives on a private
// redis-server or memcached that the test kills and restarts empty, or
// flushes, while a `sem run` holder runs.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/coordd/coordd/internal/proctest"
	"github.com/coordd/coordd/internal/testenv"
)

// lossLease is the semaphore's lease: the hold after a loss, and the most
// an old holder may run on without a renewal.
const lossLease = 3 * time.Second

// TestBackendLossHolderStops: after the backend lost its data (a kill -9
// and a start without persistence, or FLUSHDB), the running holder's next
// renewal finds its slot gone: sem run stops the command and exits 122.
// The daemon (resync every second) records the loss and re-creates the
// semaphore only after the lease; a contender that tries all along gets
// the slot only after the old holder's command has died.
//
// redis/restart and memcached/restart keep the cluster state in the
// embedded store (the inventory survives); redis/flushdb keeps it on the
// same Redis, where only the daemon's memory of the marker tells a loss
// from a first use.
func TestBackendLossHolderStops(t *testing.T) {
	for _, c := range []string{"redis/restart", "redis/flushdb", "memcached/restart"} {
		t.Run(c, func(t *testing.T) {
			typ, how, _ := strings.Cut(c, "/")
			backendLoss(t, typ, how)
		})
	}
}

func backendLoss(t *testing.T, typ, how string) {
	cluster := "  local: {type: sqlite}\ncluster: {backend: local}\n"
	if how == "flushdb" {
		cluster = "cluster: {backend: cache, leader_lease: 2s}\n"
	}
	var decl string
	var r *testenv.Redis
	var m *testenv.Memcached
	switch typ {
	case "redis":
		r = testenv.StartRedis(t)
		decl = fmt.Sprintf("{type: redis, url: %q, key_prefix: \"loss:\"}", r.URL())
	case "memcached":
		m = testenv.StartMemcached(t)
		decl = fmt.Sprintf("{type: memcached, servers: [%q], key_prefix: \"loss:\"}", m.Addr())
	}
	dir := t.TempDir()
	specPath := filepath.Join(dir, "coordd.yaml")
	writeFileT(t, specPath, fmt.Sprintf(`backends:
  cache: %s
%ssemaphores:
  s: {backend: cache, limit: 1, lease: %s}
`, decl, cluster, lossLease))
	env := proctest.NewEnv(t)
	if out, code := env.Run(t, "apply", "-f", specPath, "--auto-approve"); code != 0 {
		t.Fatalf("apply: %d\n%s", code, out)
	}
	daemon := env.StartWith(t, "daemon", []string{"COORDD_TEST_HOST=h1"},
		"run", "-f", specPath, "--host-id", "h1", "--resync", "1s", "--shutdown-grace", "5s")

	pidFile := filepath.Join(dir, "old.pid")
	holder := env.Start(t, "holder", "sem", "run", "s", "-f", specPath, "--no-wait", "--",
		"sh", "-c", "echo $$ > "+pidFile+"; exec sleep 60")
	child, err := strconv.Atoi(waitFile(t, pidFile, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}

	switch {
	case how == "restart" && r != nil:
		r.Kill()
		r.Start(t)
	case how == "restart":
		m.Kill()
		m.Start(t)
	case how == "flushdb":
		opts, err := goredis.ParseURL(r.URL())
		if err != nil {
			t.Fatal(err)
		}
		c := goredis.NewClient(opts)
		defer c.Close()
		if err := c.FlushDB(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	lost := time.Now()

	// A contender tries from the moment of the loss; it must not start
	// before the old command died.
	var oldDead time.Time
	started := filepath.Join(dir, "new.started")
	for i := 0; ; i++ {
		if oldDead.IsZero() && !alive(child) {
			oldDead = time.Now()
		}
		_, code := env.Run(t, "sem", "run", "s", "-f", specPath, "--no-wait", "--",
			"sh", "-c", `date +%s.%N > `+started)
		if code == 0 {
			break
		}
		if time.Since(lost) > lossLease+30*time.Second {
			t.Fatalf("the slot never came back (%s after the loss); last exit %d\ndaemon:\n%s", time.Since(lost), code, daemon.Output())
		}
		time.Sleep(100 * time.Millisecond)
	}
	b, err := os.ReadFile(started)
	if err != nil {
		t.Fatal(err)
	}
	sec, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
	if err != nil {
		t.Fatal(err)
	}
	newStart := time.Unix(0, int64(sec*1e9))
	if newStart.Sub(lost) < lossLease {
		t.Errorf("the semaphore came back %s after the loss, before its lease (%s) passed", newStart.Sub(lost), lossLease)
	}
	if oldDead.IsZero() || !newStart.After(oldDead) {
		t.Fatalf("the contender's command started at %s while the old one (pid %d) still ran (dead at %s)", newStart.Format(time.StampMilli), child, oldDead.Format(time.StampMilli))
	}
	if code := holder.Wait(t, 10*time.Second); code != 122 {
		t.Errorf("old holder: exit %d, want 122 (slot lost)\n%s", code, holder.Output())
	}
	t.Logf("loss (%s) at %s; old command dead after %s; new holder started after %s",
		how, lost.Format(time.StampMilli), oldDead.Sub(lost).Round(time.Millisecond), newStart.Sub(lost).Round(time.Millisecond))
	if !strings.Contains(daemon.Output(), "lost its data") {
		t.Errorf("the daemon did not report the loss:\n%s", daemon.Output())
	}
}
