package daemon_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/proctest"
	"github.com/coordd/coordd/internal/testenv"
)

type statusJSON struct {
	Leader *struct {
		Holder string `json:"holder"`
		Term   int64  `json:"term"`
	} `json:"leader"`
	LocalHash string `json:"local_spec_hash"`
	Applied   *struct {
		SpecHash   string `json:"spec_hash"`
		Generation int64  `json:"generation"`
	} `json:"applied"`
	Objects []struct {
		Address string `json:"address"`
		Limit   *int   `json:"limit"`
	} `json:"objects"`
}

func status(t *testing.T, env *proctest.Env, specPath string) statusJSON {
	t.Helper()
	out, code := env.Run(t, "status", "-f", specPath, "--json")
	if code != 0 {
		t.Fatalf("status: %d\n%s", code, out)
	}
	var s statusJSON
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("status json: %v\n%s", err, out)
	}
	return s
}

// hostOf is the host id in an elector's holder id (host/pid/nonce).
func hostOf(holder string) string { return strings.SplitN(holder, "/", 2)[0] }

func limitOf(s statusJSON, addr string) int {
	for _, o := range s.Objects {
		if o.Address == addr && o.Limit != nil {
			return *o.Limit
		}
	}
	return -1
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestThreeDaemonsEveryOccurrenceOnce runs three daemons sharing one store
// and an `@every 1s` task, kills the leader with kill -9 half-way, and
// checks the commands' own log: every occurrence started exactly once, none
// missed (catch_up: all), and another daemon took over.
func TestThreeDaemonsEveryOccurrenceOnce(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { threeDaemons(t, "cluster: {leader_lease: 2s}") })
	t.Run("mysql", func(t *testing.T) {
		dsn := testenv.MySQLDSN(t)
		threeDaemons(t, fmt.Sprintf(`backends:
  db: {type: mysql, dsn: %q, table_prefix: "t3_"}
cluster: {backend: db, leader_lease: 2s}`, dsn))
	})
	t.Run("redis", func(t *testing.T) {
		url, prefix := testenv.RedisURL(t)
		threeDaemons(t, fmt.Sprintf(`backends:
  cache: {type: redis, url: %q, key_prefix: %q}
cluster: {backend: cache, leader_lease: 2s}`, url, prefix))
	})
}

// threeDaemons is TestThreeDaemonsEveryOccurrenceOnce on the backend that
// header declares.
func threeDaemons(t *testing.T, header string) {
	env := proctest.NewEnv(t)
	dir := t.TempDir()
	logPath := filepath.Join(dir, "occurrences.log")
	specPath := filepath.Join(dir, "coordd.yaml")
	writeFile(t, specPath, header+fmt.Sprintf(`
cron:
  tick:
    schedule: "@every 1s"
    catch_up: all
    command: %q
`, proctest.LogCommand(logPath)))

	procs := map[string]*proctest.Proc{}
	for _, h := range []string{"h1", "h2", "h3"} {
		procs[h] = env.StartWith(t, h, []string{"COORDD_TEST_HOST=" + h}, "run", "-f", specPath, "--host-id", h, "--log-level", "debug", "--shutdown-grace", "5s")
	}
	proctest.Eventually(t, 20*time.Second, "three occurrences", func() bool { return len(proctest.ReadLog(t, logPath)) >= 3 })
	st := status(t, env, specPath)
	if st.Leader == nil || procs[hostOf(st.Leader.Holder)] == nil {
		t.Fatalf("no leader among the daemons: %+v", st.Leader)
	}
	leader := hostOf(st.Leader.Holder)
	before := len(proctest.ReadLog(t, logPath))
	procs[leader].Kill9()
	killedAt := time.Now()
	proctest.Eventually(t, 20*time.Second, "occurrences after the leader's death", func() bool {
		return len(proctest.ReadLog(t, logPath)) >= before+4
	})
	t.Logf("leader %s killed; next starts within %s", leader, time.Since(killedAt).Round(100*time.Millisecond))
	for h, p := range procs {
		if h != leader {
			p.Signal(syscall.SIGTERM)
		}
	}
	for h, p := range procs {
		if h != leader {
			if code := p.Wait(t, 30*time.Second); code != 0 {
				t.Errorf("%s exited %d", h, code)
			}
		}
	}
	lines := proctest.ReadLog(t, logPath)
	n := proctest.Continuity(t, lines, time.Second)
	hosts := map[string]int{}
	for _, l := range lines {
		hosts[l.Host]++
	}
	if len(hosts) < 2 {
		t.Errorf("one host ran everything (%v): the leader's death was not taken over", hosts)
	}
	t.Logf("%d occurrences, by host %v", n, hosts)
}

// TestReload covers an editor's rename over the file, a broken file (the
// last good spec stays), SIGHUP, and an atomic swap of a symlinked
// directory; each good change is applied by the leader.
func TestReload(t *testing.T) {
	env := proctest.NewEnv(t)
	root := t.TempDir()
	a, b := filepath.Join(root, "rev-a"), filepath.Join(root, "rev-b")
	for _, d := range []string{a, b} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sem := func(limit int) string { return fmt.Sprintf("semaphores:\n  s: {limit: %d}\n", limit) }
	writeFile(t, filepath.Join(a, "coordd.yaml"), sem(1))
	link := filepath.Join(root, "current")
	if err := os.Symlink(a, link); err != nil {
		t.Fatal(err)
	}
	d := env.Start(t, "daemon", "run", "-f", link, "--host-id", "solo", "--log-level", "debug")
	// status reads the applied state through a spec of its own, since the
	// watched one is broken on purpose below.
	statusSpec := filepath.Join(root, "status.yaml")
	writeFile(t, statusSpec, sem(1))
	waitLimit := func(want int) {
		t.Helper()
		proctest.Eventually(t, 20*time.Second, fmt.Sprintf("limit %d applied", want), func() bool {
			return limitOf(status(t, env, statusSpec), "semaphore.s") == want
		})
	}
	waitLimit(1)

	// An editor writes a temp file and renames it over the spec.
	tmp := filepath.Join(a, ".coordd.yaml.swp")
	writeFile(t, tmp, sem(2))
	if err := os.Rename(tmp, filepath.Join(a, "coordd.yaml")); err != nil {
		t.Fatal(err)
	}
	waitLimit(2)

	// A broken file is refused and the last good spec keeps running.
	writeFile(t, filepath.Join(a, "coordd.yaml"), "semaphores:\n  s: {limit: 0}\n")
	proctest.Eventually(t, 20*time.Second, "the reload error in the log", func() bool {
		return strings.Contains(d.Output(), "keeping the last good spec") && strings.Contains(d.Output(), "coordd.yaml:2:")
	})
	if got := limitOf(status(t, env, statusSpec), "semaphore.s"); got != 2 {
		t.Fatalf("a broken spec changed the applied limit to %d", got)
	}

	// SIGHUP forces a reload.
	writeFile(t, filepath.Join(a, "coordd.yaml"), sem(3))
	d.Signal(syscall.SIGHUP)
	waitLimit(3)
	if !strings.Contains(d.Output(), "SIGHUP") {
		t.Errorf("no SIGHUP in the log")
	}

	// git-sync style: the directory symlink is swapped atomically.
	writeFile(t, filepath.Join(b, "coordd.yaml"), sem(4))
	tmpLink := filepath.Join(root, "current.tmp")
	if err := os.Symlink(b, tmpLink); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmpLink, link); err != nil {
		t.Fatal(err)
	}
	waitLimit(4)

	d.Signal(syscall.SIGTERM)
	if code := d.Wait(t, 30*time.Second); code != 0 {
		t.Fatalf("daemon exited %d", code)
	}
}

// supersededSpecs writes two specs and applies both in turn: old.yaml is
// then a stale checkout (applied once, superseded) and new.yaml the
// applied one.
func supersededSpecs(t *testing.T, env *proctest.Env) (oldSpec, newSpec string) {
	t.Helper()
	dir := t.TempDir()
	oldSpec, newSpec = filepath.Join(dir, "old.yaml"), filepath.Join(dir, "new.yaml")
	writeFile(t, oldSpec, "semaphores:\n  s: {limit: 1}\n")
	writeFile(t, newSpec, "semaphores:\n  s: {limit: 5}\n")
	for _, p := range []string{oldSpec, newSpec} {
		if out, code := env.Run(t, "apply", "-f", p, "--auto-approve"); code != 0 {
			t.Fatalf("apply %s: %s", p, out)
		}
	}
	return oldSpec, newSpec
}

// TestStaleCheckoutNotApplied: a daemon whose spec was applied before and
// then superseded reports it and does not apply it, even as the leader.
func TestStaleCheckoutNotApplied(t *testing.T) {
	env := proctest.NewEnv(t)
	oldSpec, newSpec := supersededSpecs(t, env)
	d := env.Start(t, "stale", "run", "-f", oldSpec, "--host-id", "stale", "--resync", "1s")
	proctest.Eventually(t, 20*time.Second, "the stale checkout warning", func() bool {
		return strings.Contains(d.Output(), "stale checkout")
	})
	st := status(t, env, newSpec)
	if st.Leader == nil || hostOf(st.Leader.Holder) != "stale" {
		t.Fatalf("the stale daemon should lead: %+v", st.Leader)
	}
	if limitOf(st, "semaphore.s") != 5 || st.Applied == nil || st.Applied.SpecHash != st.LocalHash {
		t.Fatalf("the stale spec was applied: %+v", st)
	}
	d.Signal(syscall.SIGTERM)
	d.Wait(t, 30*time.Second)
}
