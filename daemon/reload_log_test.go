package daemon_test

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/proctest"
)

// TestReloadLogsBrokenSpecOnce: a broken spec is logged once
// per broken version, not again at every reload that finds it unchanged
// (each event in its directory and each SIGHUP reloads), and the recovery
// is logged.
func TestReloadLogsBrokenSpecOnce(t *testing.T) {
	env := proctest.NewEnv(t)
	dir := t.TempDir()
	specPath := filepath.Join(dir, "coordd.yaml")
	writeFile(t, specPath, "semaphores:\n  s: {limit: 1}\n")
	d := env.Start(t, "daemon", "run", "-f", dir, "--host-id", "solo", "--log-level", "debug")
	proctest.Eventually(t, 20*time.Second, "the daemon running", func() bool { return strings.Contains(d.Output(), "coordd running") })

	const failed, again, recovered = "spec reload failed; keeping the last good spec", "the same errors as the last one", "spec reload recovered"
	writeFile(t, specPath, "semaphores:\n  s: {limit: 0}\n")
	proctest.Eventually(t, 20*time.Second, "the reload error", func() bool { return strings.Count(d.Output(), failed) == 1 })
	// Three more reloads of the same broken spec.
	for i := range 3 {
		d.Signal(syscall.SIGHUP)
		proctest.Eventually(t, 20*time.Second, "a reload that finds the same errors", func() bool { return strings.Count(d.Output(), again) >= i+1 })
	}
	if n := strings.Count(d.Output(), failed); n != 1 {
		t.Errorf("the same broken spec was logged %d times, want once", n)
	}

	// Another broken version is logged again.
	writeFile(t, specPath, "semaphores:\n  s: {limit: -3}\n")
	proctest.Eventually(t, 20*time.Second, "the new error", func() bool { return strings.Count(d.Output(), failed) == 2 })

	// Fixed: the recovery is logged, once.
	writeFile(t, specPath, "semaphores:\n  s: {limit: 2}\n")
	proctest.Eventually(t, 20*time.Second, "the recovery", func() bool { return strings.Contains(d.Output(), recovered) })
	d.Signal(syscall.SIGHUP)
	proctest.Eventually(t, 20*time.Second, "one more reload", func() bool { return strings.Count(d.Output(), "SIGHUP") >= 4 })
	d.Signal(syscall.SIGTERM)
	if code := d.Wait(t, 30*time.Second); code != 0 {
		t.Fatalf("daemon exited %d", code)
	}
	if n := strings.Count(d.Output(), recovered); n != 1 {
		t.Errorf("recovery logged %d times, want once", n)
	}
}
