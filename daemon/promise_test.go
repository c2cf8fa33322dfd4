package daemon_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordd/coordd/daemon"
	"github.com/coordd/coordd/internal/proctest"
	"github.com/coordd/coordd/reconcile"
)

// Promises of docs/operations.md ("The daemon", "Deploying on N servers",
// "The GitOps flow"), each held to by a test.

// TestPromiseAutoApplyFollowsGuardRails: "Automatic apply follows the
// safety rules of `coordd apply` without flags: an empty spec,
// `prevent_destroy` and queues with jobs block it, and the refusal is
// logged", and "What the leader refuses ... it logs and counts in
// coordd_reconcile_errors_total".
func TestPromiseAutoApplyFollowsGuardRails(t *testing.T) {
	env := proctest.NewEnv(t)
	dir := t.TempDir()
	specPath := filepath.Join(dir, "coordd.yaml")
	const (
		keep      = "  s: {limit: 2, prevent_destroy: true}\n"
		other     = "  t: {limit: 1}\n"
		withQueue = "queues:\n  q: {}\n"
	)
	writeFile(t, specPath, "semaphores:\n"+keep+other+withQueue)
	statusSpec := filepath.Join(dir, "status.yaml")
	writeFile(t, statusSpec, "semaphores:\n"+keep+other+withQueue)
	d := env.Start(t, "daemon", "run", "-f", specPath, "--host-id", "solo", "--listen", "127.0.0.1:0", "--log-level", "debug")
	base := listenBase(t, d)
	proctest.Eventually(t, 20*time.Second, "the first spec applied", func() bool {
		return limitOf(status(t, env, statusSpec), "semaphore.t") == 1
	})
	if out, code := env.Run(t, "queue", "push", "q", "-f", statusSpec, "job"); code != 0 {
		t.Fatalf("queue push: %d %s", code, out)
	}

	errorsSoFar := func() float64 {
		_, body := scrape(t, base+"/metrics")
		v, _ := metricValue(body, "coordd_reconcile_errors_total", `kind="apply"`)
		return v
	}
	for _, c := range []struct {
		what, spec, reason string
	}{
		{"a queue with a job deleted", "semaphores:\n" + keep + other, "queue.q: the queue still holds 1 job(s)"},
		{"a prevent_destroy semaphore deleted", "semaphores:\n" + other + withQueue, "semaphore.s: prevent_destroy is set"},
		{"an empty spec", "# everything removed by mistake\n", "the spec declares no objects but 3 are applied"},
	} {
		before := errorsSoFar()
		writeFile(t, specPath, c.spec)
		proctest.Eventually(t, 20*time.Second, c.what+": the refusal in the log", func() bool {
			return strings.Contains(d.Output(), "apply refused") && strings.Contains(d.Output(), c.reason)
		})
		proctest.Eventually(t, 20*time.Second, c.what+": the refusal counted", func() bool { return errorsSoFar() > before })
		st := status(t, env, statusSpec)
		for _, a := range []string{"semaphore.s", "semaphore.t"} {
			if limitOf(st, a) < 1 {
				t.Fatalf("%s: the refused apply removed %s: %+v", c.what, a, st.Objects)
			}
		}
		if out, code := env.Run(t, "queue", "stats", "q", "-f", statusSpec); code != 0 || !strings.Contains(out, "q") {
			t.Fatalf("%s: the refused apply removed queue.q: %d %s", c.what, code, out)
		}
	}
	d.Signal(syscall.SIGTERM)
	if code := d.Wait(t, 30*time.Second); code != 0 {
		t.Fatalf("daemon exited %d", code)
	}
}

// TestPromiseRunExitsWhenBackendUnreachable: "`coordd run` exits 1 when it
// cannot open its backends at start (the log says which and why)".
func TestPromiseRunExitsWhenBackendUnreachable(t *testing.T) {
	env := proctest.NewEnv(t)
	specPath := filepath.Join(t.TempDir(), "coordd.yaml")
	// Port 1 on loopback: nothing listens, the dial is refused at once.
	for typ, decl := range map[string]string{
		"redis":    `{type: redis, url: "redis://127.0.0.1:1/0"}`,
		"mysql":    `{type: mysql, dsn: "root@tcp(127.0.0.1:1)/coordd"}`,
		"postgres": `{type: postgres, dsn: "postgres://postgres@127.0.0.1:1/coordd?sslmode=disable"}`,
	} {
		t.Run(typ, func(t *testing.T) {
			writeFile(t, specPath, "backends:\n  far: "+decl+"\nsemaphores:\n  s: {limit: 1}\n")
			d := env.Start(t, "daemon", "run", "-f", specPath, "--host-id", "solo")
			if code := d.Wait(t, 60*time.Second); code != 1 {
				t.Fatalf("coordd run with an unreachable backend exited %d, want 1:\n%s", code, d.Output())
			}
			if out := d.Output(); !strings.Contains(out, `"far"`) || !strings.Contains(out, "refused") {
				t.Fatalf("the log does not say which backend and why:\n%s", out)
			}
		})
	}
}

// cronDaemon starts a daemon whose only task runs cmd every second, with
// the given extra flags, and returns it once a run has started (the task
// appends "start PID" to the returned log before cmd).
func cronDaemon(t *testing.T, env *proctest.Env, cmd string, flags ...string) (d *proctest.Proc, specPath, log string) {
	t.Helper()
	dir := t.TempDir()
	specPath, log = filepath.Join(dir, "coordd.yaml"), filepath.Join(dir, "runs.log")
	writeFile(t, specPath, "cron:\n  work:\n    schedule: \"@every 1s\"\n    overlap: forbid\n    command: 'echo start $$ >> "+log+"; "+cmd+"; echo end $$ >> "+log+"'\n")
	d = env.Start(t, "daemon", append([]string{"run", "-f", specPath, "--host-id", "solo", "--log-level", "debug"}, flags...)...)
	proctest.Eventually(t, 30*time.Second, "a run started", func() bool {
		b, _ := os.ReadFile(log)
		return strings.Contains(string(b), "start ")
	})
	return d, specPath, log
}

// runLines splits the log into the pids that started and those that ended.
func runLines(t *testing.T, log string) (started, ended []int) {
	t.Helper()
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 {
			continue
		}
		pid, _ := strconv.Atoi(f[1])
		if f[0] == "start" {
			started = append(started, pid)
		} else {
			ended = append(ended, pid)
		}
	}
	return started, ended
}

// TestPromiseShutdownLetsCommandsFinish: "SIGTERM stops claiming; running
// commands may finish within --shutdown-grace (30 s) ... The leader lease
// is handed back so another server takes over at once."
func TestPromiseShutdownLetsCommandsFinish(t *testing.T) {
	env := proctest.NewEnv(t)
	d, specPath, log := cronDaemon(t, env, "sleep 2")
	d.Signal(syscall.SIGTERM)
	if code := d.Wait(t, 60*time.Second); code != 0 {
		t.Fatalf("daemon exited %d:\n%s", code, d.Output())
	}
	started, ended := runLines(t, log)
	if len(ended) != len(started) {
		t.Fatalf("runs started %v, ended %v: a running command did not finish within the grace", started, ended)
	}
	if st := status(t, env, specPath); st.Leader != nil {
		t.Fatalf("the leader lease was not handed back at shutdown: %+v", st.Leader)
	}
}

// TestPromiseShutdownGraceEnds: "a second signal, or the end of the grace,
// kills them": a command that outlives --shutdown-grace, or a daemon that
// gets a second SIGTERM, is stopped, and the daemon exits.
func TestPromiseShutdownGraceEnds(t *testing.T) {
	for _, c := range []struct {
		name   string
		flags  []string
		second bool
	}{
		{"grace over", []string{"--shutdown-grace", "1s"}, false},
		{"second signal", []string{"--shutdown-grace", "10m"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := proctest.NewEnv(t)
			d, _, log := cronDaemon(t, env, "sleep 600", c.flags...)
			d.Signal(syscall.SIGTERM)
			if c.second {
				proctest.Eventually(t, 20*time.Second, "the shutdown under way", func() bool {
					return strings.Contains(d.Output(), "shutting down")
				})
				d.Signal(syscall.SIGTERM)
			}
			d.Wait(t, 120*time.Second)
			started, ended := runLines(t, log)
			if len(ended) != 0 {
				t.Fatalf("a 600 s command ended by itself: %v", ended)
			}
			for _, pid := range started {
				proctest.Eventually(t, 20*time.Second, "the command killed", func() bool {
					return syscall.Kill(pid, 0) != nil
				})
			}
		})
	}
}

// TestPromiseLossHoldIsNotAnError: coordd_reconcile_errors_total counts
// "errors include refusals (a blocked plan), not data-loss holds".
func TestPromiseLossHoldIsNotAnError(t *testing.T) {
	if err := daemon.ReconcileErr(fmt.Errorf("apply: %w", reconcile.ErrLossHold)); err != nil {
		t.Errorf("a data-loss hold counts as an error: %v", err)
	}
	for _, err := range []error{fmt.Errorf("apply: %w", reconcile.ErrBlocked), errors.New("backend unreachable")} {
		if daemon.ReconcileErr(err) == nil {
			t.Errorf("%v does not count as an error", err)
		}
	}
}

// TestPromiseReloadWarnsOnConnectionChange: "Changing a backend's
// connection fields ... needs a restart: the reload warns `backend
// connections changed; restart coordd to use them` and names the backends
// (never the values)", for a change that is not a password (here an
// embedded store's path).
func TestPromiseReloadWarnsOnConnectionChange(t *testing.T) {
	t.Setenv("COORDD_DATA_DIR", t.TempDir())
	dir := t.TempDir()
	specPath := filepath.Join(dir, "coordd.yaml")
	write := func(file string) {
		writeFile(t, specPath, "backends:\n  local: {type: sqlite}\n  other: {type: sqlite, path: "+file+"}\ncluster: {backend: local}\nsemaphores:\n  s: {backend: other, limit: 1}\n")
	}
	write("first-store.db")
	logs, done := startInProcess(t, specPath, nil)
	defer func() {
		signalSelf(t, syscall.SIGTERM)
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	write("second-store.db")
	signalSelf(t, syscall.SIGHUP)
	proctest.Eventually(t, 20*time.Second, "the warning naming the backend", func() bool {
		return strings.Contains(logs.String(), "backend connections changed; restart coordd to use them") &&
			strings.Contains(logs.String(), "backends=other")
	})
	if strings.Contains(logs.String(), "second-store.db") {
		t.Errorf("the warning shows the new value:\n%s", logs.String())
	}
}

// TestPromiseReloadPollFallback: "A spec deeper in the repository is found
// by the 5 s poll": git-sync swaps the link at the root of a checkout,
// above the directory -f names, where fsnotify watches nothing.
func TestPromiseReloadPollFallback(t *testing.T) {
	env := proctest.NewEnv(t)
	root := t.TempDir()
	sem := func(limit int) string { return "semaphores:\n  s: {limit: " + strconv.Itoa(limit) + "}\n" }
	for rev, limit := range map[string]int{"rev-a": 1, "rev-b": 2} {
		if err := os.MkdirAll(filepath.Join(root, rev, "deploy"), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(root, rev, "deploy", "coordd.yaml"), sem(limit))
	}
	link := filepath.Join(root, "current")
	if err := os.Symlink(filepath.Join(root, "rev-a"), link); err != nil {
		t.Fatal(err)
	}
	statusSpec := filepath.Join(root, "status.yaml")
	writeFile(t, statusSpec, sem(1))
	d := env.Start(t, "daemon", "run", "-f", filepath.Join(link, "deploy"), "--host-id", "solo")
	proctest.Eventually(t, 20*time.Second, "limit 1 applied", func() bool { return limitOf(status(t, env, statusSpec), "semaphore.s") == 1 })
	tmp := filepath.Join(root, "current.tmp")
	if err := os.Symlink(filepath.Join(root, "rev-b"), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, link); err != nil {
		t.Fatal(err)
	}
	proctest.Eventually(t, 30*time.Second, "limit 2 applied after the swap", func() bool { return limitOf(status(t, env, statusSpec), "semaphore.s") == 2 })
	d.Signal(syscall.SIGTERM)
	if code := d.Wait(t, 30*time.Second); code != 0 {
		t.Fatalf("daemon exited %d", code)
	}
}

// TestPromisePrivateDataDir: "The data directory is created 0750 and the
// host id lock 0600" (security.md, Local files are private).
func TestPromisePrivateDataDir(t *testing.T) {
	env := proctest.NewEnv(t)
	env.DataDir = filepath.Join(t.TempDir(), "new", "data")
	specPath := filepath.Join(t.TempDir(), "coordd.yaml")
	writeFile(t, specPath, "semaphores:\n  s: {limit: 1}\n")
	d := env.Start(t, "daemon", "run", "-f", specPath, "--host-id", "solo")
	proctest.Eventually(t, 20*time.Second, "the daemon running", func() bool { return strings.Contains(d.Output(), "coordd running") })
	for path, want := range map[string]os.FileMode{env.DataDir: 0o750, filepath.Join(env.DataDir, "run-solo.lock"): 0o600} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: mode %v, want %v", path, got, want)
		}
	}
	d.Signal(syscall.SIGTERM)
	d.Wait(t, 30*time.Second)
}
