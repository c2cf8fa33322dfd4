package daemon_test

import (
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/coordd/coordd/daemon"
	"github.com/coordd/coordd/internal/proctest"
)

// signalDaemon starts, in this process, a daemon whose only task runs
// `sleep 2` every second between "start" and "end" lines of the returned
// log, with sigs as its signal channel, and returns once a run started.
func signalDaemon(t *testing.T, ctx context.Context, sigs chan os.Signal) (logs *proctest.SyncBuffer, runs string, done <-chan error) {
	t.Helper()
	t.Setenv("COORDD_DATA_DIR", t.TempDir())
	dir := t.TempDir()
	specPath, runs := filepath.Join(dir, "coordd.yaml"), filepath.Join(dir, "runs.log")
	writeFile(t, specPath, "cron:\n  work:\n    schedule: \"@every 1s\"\n    overlap: forbid\n    command: 'echo start >> "+runs+"; sleep 2; echo end >> "+runs+"'\n")
	logs = &proctest.SyncBuffer{}
	d, err := daemon.New(context.Background(), daemon.Config{SpecPath: specPath, HostID: "solo", Version: "0.1.0",
		Log: hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Debug}), ShutdownGrace: 30 * time.Second, Signals: sigs})
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan error, 1)
	go func() { ch <- d.Run(ctx) }()
	proctest.Eventually(t, 30*time.Second, "a run started", func() bool {
		b, _ := os.ReadFile(runs)
		return strings.Contains(string(b), "start")
	})
	return logs, runs, ch
}

// TestShutdownSignalCountedOnce: coordd's main ends the daemon's context on
// SIGTERM (signal.NotifyContext) and the daemon gets the same SIGTERM on
// its own channel. When that copy came after the daemon saw its context
// end, it was taken for a second signal and killed the running commands at
// once (CI: TestPromiseShutdownLetsCommandsFinish, exit 143 0.5 ms after
// the shutdown began). A SIGHUP during the grace period did the same. Here
// the copy comes late on purpose, then a SIGHUP: the command must finish.
func TestShutdownSignalCountedOnce(t *testing.T) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGUSR1)
	defer stop()
	sigs := make(chan os.Signal, 4)
	logs, runs, done := signalDaemon(t, ctx, sigs)
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	proctest.Eventually(t, 20*time.Second, "the shutdown", func() bool { return strings.Contains(logs.String(), "shutting down") })
	sigs <- syscall.SIGUSR1 // the copy of the signal that ended ctx
	sigs <- syscall.SIGHUP
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the daemon did not stop")
	}
	if strings.Contains(logs.String(), "second signal") {
		t.Errorf("one signal counted twice:\n%s", logs.String())
	}
	if b, _ := os.ReadFile(runs); !strings.Contains(string(b), "end") {
		t.Errorf("the running command did not finish (runs: %q):\n%s", b, logs.String())
	}
}

// TestSecondSignalStopsCommands: a signal after the one that began the
// shutdown (a second SIGTERM) still ends the grace period at once.
func TestSecondSignalStopsCommands(t *testing.T) {
	sigs := make(chan os.Signal, 4)
	logs, runs, done := signalDaemon(t, context.Background(), sigs)
	sigs <- syscall.SIGTERM
	proctest.Eventually(t, 20*time.Second, "the shutdown", func() bool { return strings.Contains(logs.String(), "shutting down") })
	sigs <- syscall.SIGTERM
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the daemon did not stop")
	}
	if !strings.Contains(logs.String(), "second signal") {
		t.Errorf("the second signal was not taken:\n%s", logs.String())
	}
	if b, _ := os.ReadFile(runs); strings.Contains(string(b), "end") {
		t.Errorf("the running command finished despite the second signal (runs: %q)", b)
	}
}
