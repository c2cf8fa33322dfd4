package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/coordd/coordd/daemon"
	"github.com/coordd/coordd/internal/proctest"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/spec"
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

// startInProcess runs a daemon on specPath in this process, logging to the
// returned buffer, and waits until it handles signals. Signals sent to the
// test process while it runs go to it.
func startInProcess(t *testing.T, specPath string, setup func(*daemon.Daemon)) (*proctest.SyncBuffer, <-chan error) {
	t.Helper()
	logs := &proctest.SyncBuffer{}
	log := hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Debug})
	d, err := daemon.New(context.Background(), daemon.Config{SpecPath: specPath, HostID: "solo", Version: "0.1.0", Log: log,
		ShutdownGrace: time.Second, Debounce: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if setup != nil {
		setup(d)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(context.Background()) }()
	// Run logs this once its signal handler is in place.
	proctest.Eventually(t, 20*time.Second, "the daemon running", func() bool { return strings.Contains(logs.String(), "coordd running") })
	return logs, done
}

func signalSelf(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := syscall.Kill(os.Getpid(), sig); err != nil {
		t.Fatal(err)
	}
}

// TestStuckReloadDoesNotBlockShutdown: a reload that never ends (a spec
// read stuck in the file system, as a FIFO was before the loader refused
// them) does not keep SIGTERM from stopping the daemon. SIGHUP used to run
// the reload inside the signal loop, so SIGTERM waited behind it.
func TestStuckReloadDoesNotBlockShutdown(t *testing.T) {
	t.Setenv("COORDD_DATA_DIR", t.TempDir())
	specPath := filepath.Join(t.TempDir(), "coordd.yaml")
	writeFile(t, specPath, "semaphores:\n  s: {limit: 1}\n")
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	_, done := startInProcess(t, specPath, func(d *daemon.Daemon) {
		daemon.SetLoadSpec(d, func(ctx context.Context, p string, o spec.LoadOptions) (*spec.Spec, error) {
			select {
			case entered <- struct{}{}:
			default:
			}
			<-release
			return spec.LoadContext(ctx, p, o)
		})
	})
	signalSelf(t, syscall.SIGHUP)
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		close(release)
		t.Fatal("SIGHUP started no reload")
	}
	signalSelf(t, syscall.SIGTERM)
	select {
	case err := <-done:
		close(release)
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(30 * time.Second):
		close(release) // lets the old code take the SIGTERM and return
		<-done
		t.Fatal("SIGTERM was not handled while a reload was stuck")
	}
}

// withDSNPassword is a MySQL DSN with its password set to pw, the rest
// unchanged (a password-only edit of the spec).
func withDSNPassword(dsn, pw string) string {
	at := strings.Index(dsn, "@")
	user, _, _ := strings.Cut(dsn[:at], ":")
	return user + ":" + pw + dsn[at:]
}

// withURLPassword is a redis URL with its password set to pw.
func withURLPassword(t *testing.T, raw, pw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), pw)
	return u.String()
}

// TestReloadWarnsOnPasswordChange: a reload whose only change is a
// backend's password (in a MySQL DSN, then in a redis URL, then in a
// PostgreSQL URL) warns that a restart is needed, as other connection changes do, and names the backend
// without printing the password. A password is not part of the spec hash,
// so such a reload used to say nothing.
func TestReloadWarnsOnPasswordChange(t *testing.T) {
	t.Setenv("COORDD_DATA_DIR", t.TempDir())
	// An empty password ("user:@"), so that setting one changes nothing
	// but the password: the redacted DSN and URL stay the same.
	dsn := withDSNPassword(testenv.MySQLDSN(t), "")
	redisURL, prefix := testenv.RedisURL(t)
	redisURL = withURLPassword(t, redisURL, "")
	pgURL := withURLPassword(t, testenv.PostgresDSN(t), "")
	specPath := filepath.Join(t.TempDir(), "coordd.yaml")
	write := func(dsn, redisURL, pgURL string) {
		writeFile(t, specPath, fmt.Sprintf(`backends:
  local: {type: sqlite}
  db: {type: mysql, dsn: %q, table_prefix: "pw_"}
  cache: {type: redis, url: %q, key_prefix: %q}
  pg: {type: postgres, dsn: %q, schema: coordd, table_prefix: "pw_"}
cluster: {backend: local}
semaphores:
  s: {backend: db, limit: 1}
  p: {backend: pg, limit: 1}
`, dsn, redisURL, prefix, pgURL))
	}
	write(dsn, redisURL, pgURL)
	logs, done := startInProcess(t, specPath, nil)
	defer func() {
		signalSelf(t, syscall.SIGTERM)
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()

	const warning = "backend connections changed; restart coordd to use them"
	const dbPW, cachePW, pgPW = "rot4ted-db-pw", "rot4ted-cache-pw", "rot4ted-pg-pw"
	newDSN, newURL, newPG := withDSNPassword(dsn, dbPW), withURLPassword(t, redisURL, cachePW), withURLPassword(t, pgURL, pgPW)
	if spec.RedactDSN(newDSN) != spec.RedactDSN(dsn) || spec.RedactURL(newURL) != spec.RedactURL(redisURL) || spec.RedactURL(newPG) != spec.RedactURL(pgURL) {
		t.Fatalf("not a password-only change: %s, %s, %s", spec.RedactDSN(newDSN), spec.RedactURL(newURL), spec.RedactURL(newPG))
	}
	write(newDSN, redisURL, pgURL)
	signalSelf(t, syscall.SIGHUP)
	proctest.Eventually(t, 20*time.Second, "the warning for db", func() bool {
		return strings.Contains(logs.String(), warning) && strings.Contains(logs.String(), "backends=db")
	})
	write(newDSN, newURL, pgURL)
	signalSelf(t, syscall.SIGHUP)
	proctest.Eventually(t, 20*time.Second, "the warning for cache", func() bool { return strings.Contains(logs.String(), "backends=cache") })
	write(newDSN, newURL, newPG)
	signalSelf(t, syscall.SIGHUP)
	proctest.Eventually(t, 20*time.Second, "the warning for pg", func() bool { return strings.Contains(logs.String(), "backends=pg") })
	out := logs.String()
	if n := strings.Count(out, warning); n != 3 {
		t.Errorf("%d warnings, want 3:\n%s", n, out)
	}
	if strings.Contains(out, dbPW) || strings.Contains(out, cachePW) || strings.Contains(out, pgPW) {
		t.Errorf("the log shows a password:\n%s", out)
	}
}

// TestReloadWarnsOnFileSecretChange: a password read from a file
// (${file:...}, or a systemd credential) that changes between two reloads
// warns that a restart is needed, as a password in the spec or in a
// variable does, without printing it.
func TestReloadWarnsOnFileSecretChange(t *testing.T) {
	t.Setenv("COORDD_DATA_DIR", t.TempDir())
	secrets := t.TempDir()
	t.Setenv(spec.CredentialsDirVar, secrets)
	dbPWFile, cachePWFile := filepath.Join(secrets, "db-pw"), filepath.Join(secrets, "cache-pw")
	// Empty passwords first: the test servers have none.
	writeFile(t, dbPWFile, "\n")
	writeFile(t, cachePWFile, "")
	redisURL, prefix := testenv.RedisURL(t)
	specPath := filepath.Join(t.TempDir(), "coordd.yaml")
	writeFile(t, specPath, fmt.Sprintf(`backends:
  local: {type: sqlite}
  db: {type: mysql, dsn: %q, table_prefix: "fpw_"}
  cache: {type: redis, url: %q, key_prefix: %q}
cluster: {backend: local}
semaphores:
  s: {backend: db, limit: 1}
`, withDSNPassword(testenv.MySQLDSN(t), "${file:"+dbPWFile+"}"), strings.Replace(withURLPassword(t, redisURL, ""), ":@", ":${credential:cache-pw}@", 1), prefix))
	logs, done := startInProcess(t, specPath, nil)
	defer func() {
		signalSelf(t, syscall.SIGTERM)
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	const warning = "backend connections changed; restart coordd to use them"
	const dbPW, cachePW = "f1le-db-pw", "cr3dential-cache-pw"
	writeFile(t, dbPWFile, dbPW+"\n")
	signalSelf(t, syscall.SIGHUP)
	proctest.Eventually(t, 20*time.Second, "the warning for db", func() bool {
		return strings.Contains(logs.String(), warning) && strings.Contains(logs.String(), "backends=db")
	})
	writeFile(t, cachePWFile, cachePW)
	signalSelf(t, syscall.SIGHUP)
	proctest.Eventually(t, 20*time.Second, "the warning for cache", func() bool { return strings.Contains(logs.String(), "backends=cache") })
	out := logs.String()
	if n := strings.Count(out, warning); n != 2 {
		t.Errorf("%d warnings, want 2:\n%s", n, out)
	}
	if strings.Contains(out, dbPW) || strings.Contains(out, cachePW) {
		t.Errorf("the log shows a password:\n%s", out)
	}
}
