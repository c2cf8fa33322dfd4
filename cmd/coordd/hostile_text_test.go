package main

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/proctest"
)

// forged is what a hostile file name or command output tries to pass off
// as a line of coordd's own log.
const forged = "2026-01-01T00:00:00.000Z [INFO]  coordd: forged line"

// checkNoForgery fails the test if out holds a raw terminal control
// character or a line that starts like a forged log line.
func checkNoForgery(t *testing.T, what, out string) {
	t.Helper()
	if strings.ContainsAny(out, "\x1b\r\x07") {
		t.Errorf("%s: raw control characters in the output:\n%q", what, out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, forged[:10]) {
			t.Errorf("%s: a forged line:\n%q", what, out)
		}
	}
}

// TestHostileFileNamesEscaped: a spec file whose name holds a newline and
// an escape sequence was printed as it was by validate and by run at
// start, forging a line of their output and driving the terminal. File
// names are now printed escaped.
func TestHostileFileNamesEscaped(t *testing.T) {
	dir := t.TempDir()
	writeSpecAt(t, filepath.Join(dir, "a.yaml"), good)
	name := "x\n" + forged + "\x1b[2J.yaml"
	writeSpecAt(t, filepath.Join(dir, name), "semaphores: [\n")
	for _, args := range [][]string{{"validate"}, {"run", "--host-id", "h1"}} {
		_, out, exited := startCoordd(t, t.TempDir(), append(args, "-f", dir)...)
		if code := exitWithin(t, args[0], exited, out); code != 1 {
			t.Errorf("coordd %s: exit %d, want 1:\n%s", args[0], code, out.String())
		}
		checkNoForgery(t, "coordd "+args[0], out.String())
		if want := `x\n` + forged + `\x1b[2J.yaml"`; !strings.Contains(out.String(), want) {
			t.Errorf("coordd %s does not name the file escaped (%s):\n%s", args[0], want, out.String())
		}
	}
}

// TestCronOutputEscapedInLog: a cron command's output lines reach the
// daemon's log prefixed with the task and run; a line holding a carriage
// return or an escape sequence went through raw, and could clear the
// terminal of whoever follows the log or forge a line of it. A reload
// that fails on a hostile file name is logged escaped too.
func TestCronOutputEscapedInLog(t *testing.T) {
	dir := t.TempDir()
	writeSpecAt(t, filepath.Join(dir, "a.yaml"), `cron:
  noisy: {schedule: "@every 1s", command: ["/bin/sh", "-c", "printf '\\033[2J\\r%s\\n' '`+forged+`'; echo done"]}
`)
	d := coorddCmd(t, t.TempDir(), "run", "-f", dir, "--host-id", "h1", "--shutdown-grace", "5s")
	logs := &proctest.SyncBuffer{}
	d.Stdout, d.Stderr = logs, logs
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- d.Wait() }()
	defer func() {
		_ = d.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = d.Process.Kill()
			<-exited
		}
	}()
	proctest.Eventually(t, 30*time.Second, "the command's output in the log", func() bool {
		return strings.Contains(logs.String(), "] done")
	})
	writeSpecAt(t, filepath.Join(dir, "x\n"+forged+"\x1b[2J.yaml"), "semaphores: [\n")
	if err := d.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	proctest.Eventually(t, 30*time.Second, "the failed reload in the log", func() bool {
		return strings.Contains(logs.String(), "spec reload failed")
	})
	out := logs.String()
	checkNoForgery(t, "the daemon's log", out)
	if !strings.Contains(out, `\x1b[2J\r`+forged) {
		t.Errorf("the output line is not in the log, escaped:\n%s", out)
	}
}
