package daemon_test

import (
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

// Promises about what the daemon's cron commands run and get: the task
// definition is the applied one (design.md, "The daemon, leader election
// and the scheduler"), and the variables removed from their environment
// follow the daemon's current spec (spec.md, "The environment of
// commands").

// TestPromiseCronRunsAppliedDefinition: "the task definition a run uses is
// always the one stored with the task by apply, never the local file". A
// daemon on a stale checkout (a spec applied once and superseded, which it
// does not apply again) leads and runs the task; its command must be the
// superseding spec's.
func TestPromiseCronRunsAppliedDefinition(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { cronRunsApplied(t, "") })
	t.Run("mysql", func(t *testing.T) {
		cronRunsApplied(t, fmt.Sprintf("backends:\n  db: {type: mysql, dsn: %q}\ncluster: {backend: db}\n", testenv.MySQLDSN(t)))
	})
	t.Run("postgres", func(t *testing.T) {
		cronRunsApplied(t, fmt.Sprintf("backends:\n  db: {type: postgres, dsn: %q, schema: coordd}\ncluster: {backend: db}\n", testenv.PostgresDSN(t)))
	})
	t.Run("redis", func(t *testing.T) {
		url, prefix := testenv.RedisURL(t)
		cronRunsApplied(t, fmt.Sprintf("backends:\n  db: {type: redis, url: %q, key_prefix: %q}\ncluster: {backend: db}\n", url, prefix))
	})
}

func cronRunsApplied(t *testing.T, header string) {
	env := proctest.NewEnv(t)
	dir := t.TempDir()
	log := filepath.Join(dir, "runs.log")
	oldSpec, newSpec := filepath.Join(dir, "old.yaml"), filepath.Join(dir, "new.yaml")
	task := func(word string) string {
		return header + fmt.Sprintf("cron:\n  t: {schedule: \"@every 1s\", command: 'echo %s >> %s'}\n", word, log)
	}
	writeFile(t, oldSpec, task("local"))
	writeFile(t, newSpec, task("applied"))
	for _, p := range []string{oldSpec, newSpec} {
		if out, code := env.Run(t, "apply", "-f", p, "--auto-approve"); code != 0 {
			t.Fatalf("apply %s: %s", p, out)
		}
	}
	d := env.Start(t, "stale", "run", "-f", oldSpec, "--host-id", "stale", "--shutdown-grace", "5s")
	defer func() {
		d.Signal(syscall.SIGTERM)
		d.Wait(t, 30*time.Second)
	}()
	proctest.Eventually(t, 30*time.Second, "three runs", func() bool {
		b, _ := os.ReadFile(log)
		return strings.Count(string(b), "\n") >= 3
	})
	if !strings.Contains(d.Output(), "stale checkout") {
		t.Fatalf("the daemon did not see its spec as a stale checkout:\n%s", d.Output())
	}
	b, _ := os.ReadFile(log)
	if strings.Contains(string(b), "local") {
		t.Fatalf("the daemon ran the local file's command, not the applied one:\n%s", b)
	}
	if st := status(t, env, newSpec); st.Applied == nil || st.Applied.SpecHash != st.LocalHash {
		t.Fatalf("the stale checkout was applied: %+v", st)
	}
}

// TestPromiseChildEnvFollowsReload: the variables a cron command does not
// inherit are those the daemon's current spec references: "the daemon's
// current spec (a reload changes it)". A backend's path references A;
// after a reload it references B instead: runs before lack A and have B,
// runs after have A and lack B. A and B hold the same value, as when a
// secret moves to a new variable: the spec's hash and connections do not
// change, and the daemon used to keep the old spec, passing B (the secret)
// on to every command.
func TestPromiseChildEnvFollowsReload(t *testing.T) {
	env := proctest.NewEnv(t)
	dir := t.TempDir()
	runs := filepath.Join(dir, "runs")
	if err := os.Mkdir(runs, 0o755); err != nil {
		t.Fatal(err)
	}
	const a, b = "COORDD_TEST_RELOAD_A", "COORDD_TEST_RELOAD_B"
	specPath := filepath.Join(dir, "coordd.yaml")
	// The cluster store is the implicit embedded one; "other" only holds
	// the reference (a second backend no object uses).
	write := func(ref string) {
		writeFile(t, specPath, fmt.Sprintf(`backends:
  embedded: {type: sqlite}
  other: {type: sqlite, path: "${%s}/other.db"}
cluster: {backend: embedded}
cron:
  t: {schedule: "@every 1s", backend: embedded, command: 'env | grep ^COORDD_TEST_RELOAD_ > %s/$COORDD_RUN_ID; echo done >> %s/$COORDD_RUN_ID'}
`, ref, runs, runs))
	}
	write(a)
	d := env.StartWith(t, "daemon", []string{a + "=" + dir, b + "=" + dir}, "run", "-f", specPath, "--host-id", "solo", "--shutdown-grace", "5s")
	defer func() {
		d.Signal(syscall.SIGTERM)
		d.Wait(t, 30*time.Second)
	}()
	// runsSeen returns the finished runs' environments, by run id.
	runsSeen := func() map[string]string {
		ents, _ := os.ReadDir(runs)
		out := map[string]string{}
		for _, e := range ents {
			b, _ := os.ReadFile(filepath.Join(runs, e.Name()))
			if strings.HasSuffix(string(b), "done\n") {
				out[e.Name()] = string(b)
			}
		}
		return out
	}
	proctest.Eventually(t, 30*time.Second, "a run", func() bool { return len(runsSeen()) > 0 })
	before := runsSeen()
	for id, out := range before {
		if strings.Contains(out, a+"=") || !strings.Contains(out, b+"=") {
			t.Fatalf("run %s before the reload: got\n%swant %s removed and %s passed on", id, out, a, b)
		}
	}

	write(b)
	proctest.Eventually(t, 30*time.Second, "a run under the reloaded spec", func() bool {
		for id, out := range runsSeen() {
			if _, old := before[id]; !old && strings.Contains(out, a+"=") && !strings.Contains(out, b+"=") {
				return true
			}
		}
		return false
	})
}

// TestPromiseDaemonCronTakesPermits: the daemon's scheduled runs of a task
// that names a rate limit take a permit each before their command starts:
// a task due every second under a limit of one run per 2 s starts its
// commands 2 s apart (the times in between wait, as a run that waits is
// still running under overlap forbid). The starts are the commands' own
// clocks, which a loaded host's slow spawn (seen: 0.4 s) moves: over four
// runs, the span must be 6 s less one such spawn, and no gap may be near
// the 1 s of the schedule alone.
func TestPromiseDaemonCronTakesPermits(t *testing.T) {
	env := proctest.NewEnv(t)
	dir := t.TempDir()
	log := filepath.Join(dir, "starts")
	p := filepath.Join(dir, "coordd.yaml")
	writeFile(t, p, fmt.Sprintf("rate_limits:\n  slow: {rate: 1/2s}\ncron:\n  t: {schedule: \"@every 1s\", command: 'date +%%s%%N >> %s', rate_limit: slow}\n", log))
	d := env.Start(t, "daemon", "run", "-f", p, "--host-id", "solo", "--shutdown-grace", "5s")
	defer func() {
		d.Signal(syscall.SIGTERM)
		d.Wait(t, 30*time.Second)
	}()
	var starts []int64
	proctest.Eventually(t, 30*time.Second, "four runs", func() bool {
		b, _ := os.ReadFile(log)
		starts = starts[:0]
		for _, f := range strings.Fields(string(b)) {
			var ns int64
			fmt.Sscan(f, &ns)
			starts = append(starts, ns)
		}
		return len(starts) >= 4
	})
	const slowSpawn = 500 * time.Millisecond
	for i := 1; i < len(starts); i++ {
		if gap := time.Duration(starts[i] - starts[i-1]); gap < 2*time.Second-slowSpawn-300*time.Millisecond {
			t.Fatalf("runs %d and %d started %v apart, under the limit's 2 s\n%s", i, i+1, gap, d.Output())
		}
	}
	n := len(starts) - 1
	if span := time.Duration(starts[n] - starts[0]); span < time.Duration(n)*2*time.Second-slowSpawn {
		t.Fatalf("%d runs started within %v, under the limit's %v\n%s", n+1, span, time.Duration(n)*2*time.Second, d.Output())
	}
}
