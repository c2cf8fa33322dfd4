package child

import (
	"bytes"
	"context"
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
)

// testGuard is the guard that start puts into specs without one: empty, or
// this test binary while TestWithGuard reruns tests.
var testGuard string

// TestWithGuard reruns the tests of child_test.go with the command started
// by the guard (this test binary): exit codes, signals, start errors,
// stdio, the lease and the timeout must all behave as for a child of
// coordd.
func TestWithGuard(t *testing.T) {
	testGuard = testExecutable()
	defer func() { testGuard = "" }()
	for _, tc := range []struct {
		name string
		f    func(*testing.T)
	}{
		{"ExitCodePassthrough", TestExitCodePassthrough},
		{"ShellVersusArgv", TestShellVersusArgv},
		{"EnvDirStdin", TestEnvDirStdin},
		{"KilledBySignal", TestKilledBySignal},
		{"NotFound", TestNotFound},
		{"NotExecutable", TestNotExecutable},
		{"SignalReachesGroup", TestSignalReachesGroup},
		{"SignalReachesGrandchildDirectly", TestSignalReachesGrandchildDirectly},
		{"GroupKilledOnExit", TestGroupKilledOnExit},
		{"LeaseLostWithoutRenewal", TestLeaseLostWithoutRenewal},
		{"LeaseRenewedSurvives", TestLeaseRenewedSurvives},
		{"Timeout", TestTimeout},
		{"TimeoutChildHonoursTerm", TestTimeoutChildHonoursTerm},
		{"ContextCancel", TestContextCancel},
		{"UnsetEnv", TestUnsetEnv},
		{"Resolve", TestResolve},
		{"ExitStatus", TestShimExitStatus},
	} {
		t.Run(tc.name, tc.f)
	}
}

// parentOf is pid's parent pid, from /proc.
func parentOf(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatal(err)
	}
	return ppid
}

// Commands started at once share one guard process: their parent, which
// is neither this process nor one process per command.
func TestGuardShared(t *testing.T) {
	const n = 20
	guard := testExecutable()
	procs := make([]*Process, n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			procs[i], errs[i] = Start(context.Background(), Spec{Argv: []string{"sleep", "30"}, Guard: guard})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
		killGroupOnCleanup(t, procs[i])
	}
	parent := parentOf(t, procs[0].Pid())
	if parent == os.Getpid() {
		t.Fatal("the command is a child of this process, not of a guard")
	}
	for _, p := range procs {
		if got := parentOf(t, p.Pid()); got != parent {
			t.Fatalf("commands have parents %d and %d, want one guard", parent, got)
		}
		if err := p.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range procs {
		if r := waitFor(t, p, 10*time.Second); !r.Signaled || r.Signal != syscall.SIGTERM || r.WaitErr != nil {
			t.Fatalf("result %+v, want killed by TERM", r)
		}
	}
	// Reaped: the guard keeps no zombie once coordd read the status.
	for _, p := range procs {
		waitGone(t, p.Pid(), 5*time.Second)
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", p.Pid())); err == nil {
			t.Fatalf("pid %d still in /proc after Wait", p.Pid())
		}
	}
}

// If coordd is killed -9, the guard kills the whole process group of every
// command: the shell and its background job die, not only the shell.
func TestGuardKill9KillsGroup(t *testing.T) {
	helper, leader, sh, job := startGroupHelper(t, "group-guard")
	if leader != sh {
		t.Fatalf("leader %d is not the shell %d: the guard leads no group", leader, sh)
	}
	guard := parentOf(t, sh)
	if guard == helper.Process.Pid {
		t.Fatal("the shell is the helper's child, not the guard's")
	}
	killOnCleanup(t, guard)
	// The helper churns threads meanwhile: nothing may die early.
	time.Sleep(time.Second)
	for _, pid := range []int{guard, sh, job} {
		if gone(pid) {
			t.Fatalf("pid %d died while the helper was alive", pid)
		}
	}
	if err := helper.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = helper.Wait()
	for _, pid := range []int{sh, job, guard} {
		waitGone(t, pid, 5*time.Second)
	}
}

// A guard killed -9 takes its commands with it (Pdeathsig); their results
// say so, and the next command gets a new guard.
func TestGuardDies(t *testing.T) {
	guardPath := testExecutable()
	p, err := Start(context.Background(), Spec{Argv: []string{"sleep", "30"}, Guard: guardPath})
	if err != nil {
		t.Fatal(err)
	}
	killGroupOnCleanup(t, p)
	guard := parentOf(t, p.Pid())
	if err := syscall.Kill(guard, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r := waitFor(t, p, 10*time.Second)
	if !errors.Is(r.WaitErr, errGuardGone) || ExitCode(r) != ExitCoorddFailed {
		t.Fatalf("result %+v (ExitCode %d), want the guard's death reported", r, ExitCode(r))
	}
	waitGone(t, p.Pid(), 5*time.Second)
	// Until the guard has exited, a request could still be queued to it
	// (and lost with it): a command handed over at that instant fails to
	// start. Once it is reaped (a zombie leader may still have threads
	// that hold its sockets), the next start gets a new guard.
	deadline := time.Now().Add(5 * time.Second)
	for syscall.Kill(guard, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("guard %d not reaped", guard)
		}
		time.Sleep(10 * time.Millisecond)
	}
	var out bytes.Buffer
	p2, err := Start(context.Background(), Spec{Shell: "echo again", Guard: guardPath, Stdout: &out})
	if err != nil {
		t.Fatalf("start after the guard died: %v", err)
	}
	if r := waitFor(t, p2, 10*time.Second); ExitCode(r) != 0 || out.String() != "again\n" {
		t.Fatalf("after the guard died: %+v, output %q", r, out.String())
	}
}

// A guard that cannot run, or does not speak the protocol, is coordd's
// failure (125), not the command's 127.
func TestGuardBroken(t *testing.T) {
	trueBin, err := exec.LookPath("true")
	if err != nil {
		t.Fatal(err)
	}
	for _, guard := range []string{filepath.Join(t.TempDir(), "no-guard"), trueBin} {
		_, err := Start(context.Background(), Spec{Argv: []string{"true"}, Guard: guard})
		if err == nil {
			t.Fatalf("guard %s: Start succeeded", guard)
		}
		if got := ExitCode(Result{StartErr: err}); got != ExitCoorddFailed {
			t.Fatalf("guard %s: %v: ExitCode %d, want %d", guard, err, got, ExitCoorddFailed)
		}
	}
	// A missing working directory is still the command's problem.
	_, err = Start(context.Background(), Spec{Argv: []string{"true"}, Guard: testExecutable(), Dir: filepath.Join(t.TempDir(), "gone")})
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing dir: %v", err)
	}
}

// Output written by many commands at once through the guard arrives
// whole, each on its own writer, and none of the guard's descriptors
// leaks into a command.
func TestGuardOutputAndDescriptors(t *testing.T) {
	const n = 30
	guard := testExecutable()
	outs := make([]bytes.Buffer, n)
	errs := make([]bytes.Buffer, n)
	procs := make([]*Process, n)
	for i := range n {
		p, err := Start(context.Background(), Spec{
			Shell:  fmt.Sprintf(`echo out %d; echo err %d >&2; ls -l /proc/self/fd/ | grep -c socket`, i, i),
			Guard:  guard,
			Stdout: &outs[i], Stderr: &errs[i],
		})
		if err != nil {
			t.Fatal(err)
		}
		procs[i] = p
	}
	for i, p := range procs {
		waitFor(t, p, 10*time.Second) // grep -c exits 1 when it counts 0
		// No socket: neither the control socket nor any command's
		// status socket reaches a command.
		if outs[i].String() != fmt.Sprintf("out %d\n0\n", i) {
			t.Fatalf("command %d: stdout %q, want its line and 0 sockets", i, outs[i].String())
		}
		if errs[i].String() != fmt.Sprintf("err %d\n", i) {
			t.Fatalf("command %d: stderr %q", i, errs[i].String())
		}
	}
}

// A request larger than the guard's socket takes (a huge environment) is
// started under a shim of its own instead, and the command still gets it.
func TestGuardLargeRequestFallsBackToShim(t *testing.T) {
	var env []string
	for i := range 4 {
		env = append(env, fmt.Sprintf("COORDD_BIG%d=%s", i, strings.Repeat("x", 100<<10)))
	}
	var out bytes.Buffer
	p, err := Start(context.Background(), Spec{
		Shell: `echo ${#COORDD_BIG0} ${#COORDD_BIG3}`, Env: env, Stdout: &out,
		Guard: testExecutable(), Shim: testExecutable(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if r := waitFor(t, p, 10*time.Second); ExitCode(r) != 0 || out.String() != "102400 102400\n" {
		t.Fatalf("result %+v, output %q", r, out.String())
	}
}
