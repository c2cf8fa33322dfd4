package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/testenv"
)

// proc is a real coordd process: the test binary re-executed as main.
func coorddCmd(t *testing.T, dataDir string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "COORDD_TEST_AS_MAIN=1", "COORDD_DATA_DIR="+dataDir)
	return cmd
}

func exitCode(t *testing.T, err error) int {
	t.Helper()
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	t.Fatalf("run: %v", err)
	return -1
}

// semFixture applies a spec with one semaphore and returns its path.
func semFixture(t *testing.T, limit int, lease string) (specPath, dataDir string) {
	t.Helper()
	dataDir = t.TempDir()
	specPath = writeSpec(t, fmt.Sprintf("semaphores:\n  s: {limit: %d, lease: %s}\n", limit, lease))
	out, err := coorddCmd(t, dataDir, "apply", "-f", specPath, "--auto-approve").CombinedOutput()
	if err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	return specPath, dataDir
}

func TestSemRunEnvAndExitCodes(t *testing.T) {
	specPath, dataDir := semFixture(t, 1, "10s")
	out, err := coorddCmd(t, dataDir, "sem", "run", "s", "-f", specPath, "--", "sh", "-c", `echo "$COORDD_SEMAPHORE $COORDD_SLOT $COORDD_FENCING_TOKEN"; exit 7`).Output()
	if code := exitCode(t, err); code != 7 {
		t.Fatalf("exit %d, want the child's 7", code)
	}
	f := strings.Fields(string(out))
	if len(f) != 3 || f[0] != "s" || f[1] != "0" {
		t.Fatalf("child env: %q", out)
	}
	first, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil || first <= 0 {
		t.Fatalf("fencing token %q", f[2])
	}
	// Fencing keeps increasing.
	out, _ = coorddCmd(t, dataDir, "sem", "run", "-f", specPath, "s", "--", "sh", "-c", `echo $COORDD_FENCING_TOKEN`).Output()
	if second, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64); err != nil || second <= first {
		t.Fatalf("second fencing token %q after %d", out, first)
	}
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"sem", "run", "s", "-f", specPath, "--", "/nonexistent/cmd"}, 127},
		{[]string{"sem", "run", "nope", "-f", specPath, "--", "true"}, 125},
		{[]string{"sem", "run", "s", "-f", specPath, "--", "sh", "-c", "kill -TERM $$"}, 128 + 15},
	} {
		err := coorddCmd(t, dataDir, tc.args...).Run()
		if code := exitCode(t, err); code != tc.want {
			t.Errorf("%v: exit %d, want %d", tc.args, code, tc.want)
		}
	}
}

// waitFile polls until path exists and returns its content.
func waitFile(t *testing.T, path string, d time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		b, err := os.ReadFile(path)
		if err == nil && len(bytes.TrimSpace(b)) > 0 {
			return strings.TrimSpace(string(b))
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear within %s", path, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// A zombie is dead; nobody may have reaped it yet.
	f := strings.Fields(string(b))
	return len(f) < 3 || f[2] != "Z"
}

// TestSemRunKill9 kills a holder with kill -9: its child dies with it, and
// the slot comes back after the lease.
func TestSemRunKill9(t *testing.T) {
	specPath, dataDir := semFixture(t, 1, "2s")
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	holder := coorddCmd(t, dataDir, "sem", "run", "s", "-f", specPath, "--", "sh", "-c", "echo $$ > "+pidFile+"; exec sleep 60")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	childPid, _ := strconv.Atoi(waitFile(t, pidFile, 10*time.Second))

	// While held, --no-wait gives 75.
	if code := exitCode(t, coorddCmd(t, dataDir, "sem", "run", "s", "-f", specPath, "--no-wait", "--", "true").Run()); code != 75 {
		t.Fatalf("--no-wait while held: exit %d, want 75", code)
	}
	_ = holder.Process.Signal(syscall.SIGKILL)
	_ = holder.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for alive(childPid) {
		if time.Now().After(deadline) {
			t.Fatalf("child %d outlived its killed coordd", childPid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The lease (2s) expires and a waiter gets the slot.
	if code := exitCode(t, coorddCmd(t, dataDir, "sem", "run", "s", "-f", specPath, "--wait", "20s", "--", "true").Run()); code != 0 {
		t.Fatalf("acquire after the dead holder's lease: exit %d", code)
	}
}

// TestSemRunKill9KillsGroup: kill -9 of sem run also ends what the command
// left running in its process group (through the child shim), not only the
// command itself.
func TestSemRunKill9KillsGroup(t *testing.T) {
	specPath, dataDir := semFixture(t, 1, "10s")
	dir := t.TempDir()
	shFile, jobFile := filepath.Join(dir, "sh.pid"), filepath.Join(dir, "job.pid")
	holder := coorddCmd(t, dataDir, "sem", "run", "s", "-f", specPath, "--",
		"sh", "-c", "echo $$ > "+shFile+"; sleep 60 & echo $! > "+jobFile+"; wait")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Process.Kill() })
	shPid, _ := strconv.Atoi(waitFile(t, shFile, 10*time.Second))
	jobPid, _ := strconv.Atoi(waitFile(t, jobFile, 10*time.Second))
	if shPid <= 0 || jobPid <= 0 {
		t.Fatalf("pids %d %d", shPid, jobPid)
	}
	t.Cleanup(func() { _ = syscall.Kill(jobPid, syscall.SIGKILL); _ = syscall.Kill(shPid, syscall.SIGKILL) })

	_ = holder.Process.Signal(syscall.SIGKILL)
	_ = holder.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range []int{shPid, jobPid} {
		for alive(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("pid %d outlived its killed coordd", pid)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// TestSemRunWitness runs twenty sem run processes on limit 3; a witness
// outside coordd (flock on a counter file) records how many ran at once.
func TestSemRunWitness(t *testing.T) {
	if _, err := exec.LookPath("flock"); err != nil {
		t.Fatal("flock(1) is needed by the witness: install util-linux")
	}
	specPath, dataDir := semFixture(t, 3, "10s")
	w := t.TempDir()
	cur, peaks, lock := filepath.Join(w, "cur"), filepath.Join(w, "peaks"), filepath.Join(w, "lock")
	if err := os.WriteFile(cur, []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`flock %[1]s sh -c 'n=$(($(cat %[2]s)+1)); echo $n > %[2]s; echo $n >> %[3]s'
sleep 0.2
flock %[1]s sh -c 'echo $(($(cat %[2]s)-1)) > %[2]s'`, lock, cur, peaks)
	var wg sync.WaitGroup
	codes := make([]int, 20)
	for i := range codes {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			err := coorddCmd(t, dataDir, "sem", "run", "s", "-f", specPath, "--wait", "2m", "--", "sh", "-c", script).Run()
			var ee *exec.ExitError
			switch {
			case err == nil:
			case errors.As(err, &ee):
				codes[i] = ee.ExitCode()
			default:
				codes[i] = -1
			}
		}(i)
	}
	wg.Wait()
	for i, c := range codes {
		if c != 0 {
			t.Errorf("run %d exited %d", i, c)
		}
	}
	b, err := os.ReadFile(peaks)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(string(b))
	peak := 0
	for _, l := range lines {
		n, _ := strconv.Atoi(l)
		peak = max(peak, n)
	}
	if len(lines) != 20 || peak > 3 || peak < 1 {
		t.Fatalf("witness: %d runs, peak %d holders (limit 3)", len(lines), peak)
	}
	t.Logf("witness: 20 runs, peak %d concurrent holders", peak)
}

func TestSemStatus(t *testing.T) {
	specPath, dataDir := semFixture(t, 2, "10s")
	pidFile := filepath.Join(t.TempDir(), "pid")
	holder := coorddCmd(t, dataDir, "sem", "run", "s", "-f", specPath, "--host-id", "web7", "--", "sh", "-c", "echo $$ > "+pidFile+"; exec sleep 60")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Process.Signal(syscall.SIGTERM); _ = holder.Wait() }()
	waitFile(t, pidFile, 10*time.Second)
	out, err := coorddCmd(t, dataDir, "sem", "status", "-f", specPath).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(string(out), "limit 2") || !strings.Contains(string(out), "host web7") || !strings.Contains(string(out), "holders 1") {
		t.Fatalf("status:\n%s", out)
	}
	// SIGTERM to sem run is forwarded: the child ends, sem run exits 143.
	_ = holder.Process.Signal(syscall.SIGTERM)
	err = holder.Wait()
	if code := exitCode(t, err); code != 143 {
		t.Fatalf("after SIGTERM: exit %d, want 143", code)
	}
}

// TestSemRunAfterHungAcquire: an acquire that hangs in a stalled store for
// most of the lease renews the lease before the command starts, so the
// command runs to the end instead of being stopped at once (exit 122).
func TestSemRunAfterHungAcquire(t *testing.T) {
	// The stall takes more than half of the lease (the acquire then comes
	// back with little of it left) and the command runs longer than what
	// is left; the lease is long enough that a loaded machine's renewals
	// stay within it.
	specPath, dataDir := semFixture(t, 1, "3s")
	stall := &testenv.SQLiteStall{Path: filepath.Join(dataDir, "coordd.db")}
	cmd := coorddCmd(t, dataDir, "sem", "run", "s", "-f", specPath, "--", "sh", "-c", "sleep 1.8")
	stall.Kill()
	released := stall.ReleaseAfter(t, 2400*time.Millisecond) // the acquire waits on the lock meanwhile
	if err := cmd.Start(); err != nil {
		<-released
		t.Fatal(err)
	}
	err := cmd.Wait()
	<-released
	if code := exitCode(t, err); code != 0 {
		t.Fatalf("sem run after a hung acquire exited %d, want 0", code)
	}
}
