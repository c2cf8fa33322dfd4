package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/fsblock"
	"github.com/coordd/coordd/internal/proctest"
)

// startCoordd starts coordd ARGS and returns it with its combined output
// and a channel that receives its exit code.
func startCoordd(t *testing.T, dataDir string, args ...string) (*exec.Cmd, *proctest.SyncBuffer, <-chan int) {
	t.Helper()
	cmd := coorddCmd(t, dataDir, args...)
	out := &proctest.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan int, 1)
	go func() {
		err := cmd.Wait()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			code = -1
		}
		exited <- code
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
	})
	return cmd, out, exited
}

// exitWithin waits for the process to exit, up to a generous bound (an
// old coordd never exited: nothing here measures speed).
func exitWithin(t *testing.T, what string, exited <-chan int, out *proctest.SyncBuffer) int {
	t.Helper()
	select {
	case code := <-exited:
		return code
	case <-time.After(60 * time.Second):
		t.Fatalf("%s has not exited after 60s:\n%s", what, out.String())
		return 0
	}
}

// TestCommandsRefuseKernelFiles: with a symlink to /proc/kmsg in the spec
// directory, `coordd validate` hung for good, ignoring TERM and INT, and
// `coordd run` hung at start without a log line. Both now report the file
// at once.
func TestCommandsRefuseKernelFiles(t *testing.T) {
	dir := t.TempDir()
	writeSpecAt(t, filepath.Join(dir, "a.yaml"), good)
	link := filepath.Join(dir, "k.yaml")
	if err := os.Symlink("/proc/kmsg", link); err != nil {
		t.Fatal(err)
	}
	want := link + ":1:1: cannot read spec: not a regular file (procfs, a kernel file system)"
	for _, args := range [][]string{{"validate"}, {"plan"}, {"run", "--host-id", "h1"}} {
		_, out, exited := startCoordd(t, t.TempDir(), append(args, "-f", dir)...)
		if code := exitWithin(t, args[0], exited, out); code != 1 || !strings.Contains(out.String(), want) {
			t.Errorf("coordd %s: exit %d, want 1 and %q:\n%s", args[0], code, want, out.String())
		}
	}
}

// TestSignalStopsStuckSpecRead: a spec file whose open never returns (a
// hung network file system) held validate, plan, apply and run at start
// for good: they caught TERM and INT and went on waiting. A signal now
// ends the read and the command, which names the file.
func TestSignalStopsStuckSpecRead(t *testing.T) {
	dir := t.TempDir()
	writeSpecAt(t, filepath.Join(dir, "a.yaml"), good)
	stuck := filepath.Join(dir, "b.yaml")
	writeSpecAt(t, stuck, "queues:\n  q: {}\n")
	b := fsblock.Block(t, stuck)
	for _, c := range []struct {
		args []string
		sig  syscall.Signal
	}{
		{[]string{"validate"}, syscall.SIGTERM},
		{[]string{"validate"}, syscall.SIGINT},
		{[]string{"plan"}, syscall.SIGTERM},
		{[]string{"apply", "--auto-approve"}, syscall.SIGTERM},
		{[]string{"run", "--host-id", "h1"}, syscall.SIGTERM},
		{[]string{"run", "--host-id", "h1"}, syscall.SIGINT},
	} {
		what := strings.Join(c.args, " ") + " " + c.sig.String()
		cmd, out, exited := startCoordd(t, t.TempDir(), append(c.args, "-f", dir)...)
		if pid := b.Opened(t, 60*time.Second); pid != cmd.Process.Pid {
			t.Fatalf("%s: pid %d opened the spec, want coordd's %d", what, pid, cmd.Process.Pid)
		}
		if err := cmd.Process.Signal(c.sig); err != nil {
			t.Fatal(err)
		}
		code := exitWithin(t, what, exited, out)
		want := stuck + ":1:1: cannot read spec: interrupted"
		if code != 1 || !strings.Contains(out.String(), want) {
			t.Errorf("coordd %s: exit %d, want 1 and %q:\n%s", what, code, want, out.String())
		}
	}
}

func writeSpecAt(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
