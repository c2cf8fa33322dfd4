package child

// All tests run real processes (/bin/sh, sleep). Timing assertions only use
// generous bounds; the outcomes and the order of events are what is checked.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const helperEnv = "COORDD_CHILD_TEST_HELPER"

func TestMain(m *testing.M) {
	// The test binary is also the shim of the tests that use one.
	MaybeRunShim()
	// A race-enabled binary that exits 0 sleeps a second first; the shims
	// (this binary) need not.
	if os.Getenv("GORACE") == "" {
		os.Setenv("GORACE", "atexit_sleep_ms=0")
	}
	switch os.Getenv(helperEnv) {
	case "pdeathsig":
		pdeathsigHelper(Spec{Argv: []string{"sleep", "60"}})
		return
	case "group-shim", "group-noshim", "group-guard":
		// A shell with a background job: its pid and the job's are
		// printed by the shell itself.
		s := Spec{Shell: `sleep 60 & echo $$ $!; wait`, Stdout: os.Stdout}
		switch os.Getenv(helperEnv) {
		case "group-shim":
			s.Shim = testExecutable()
		case "group-guard":
			s.Guard = testExecutable()
		}
		pdeathsigHelper(s)
		return
	}
	os.Exit(m.Run())
}

func testExecutable() string {
	exe, err := os.Executable()
	if err != nil {
		panic(err)
	}
	return exe
}

// testShim is the shim that start puts into specs without one: empty, or
// this test binary while TestWithShim reruns tests.
var testShim string

func start(ctx context.Context, s Spec) (*Process, error) {
	if s.Shim == "" {
		s.Shim = testShim
	}
	if s.Guard == "" {
		s.Guard = testGuard
	}
	return Start(ctx, s)
}

// pdeathsigHelper starts s under package child, prints the pid of the group
// leader (the child, or the shim) and blocks until it is killed.
func pdeathsigHelper(s Spec) {
	p, err := Start(context.Background(), s)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(2)
	}
	fmt.Println(p.Pid())
	// Make the runtime retire threads: a goroutine that exits while locked
	// to its thread terminates that thread. Had the child been forked on
	// one of them, Pdeathsig would kill it now (golang/go#27505); it must
	// survive this and die only with the process.
	for {
		done := make(chan struct{})
		go func() {
			defer close(done)
			runtime.LockOSThread()
			time.Sleep(time.Millisecond)
		}()
		<-done
		time.Sleep(5 * time.Millisecond)
	}
}

func run(t *testing.T, s Spec) Result {
	t.Helper()
	p, err := start(context.Background(), s)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	return waitFor(t, p, 20*time.Second)
}

func waitFor(t *testing.T, p *Process, d time.Duration) Result {
	t.Helper()
	select {
	case <-p.Done():
		return p.Wait()
	case <-time.After(d):
		_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
		t.Fatalf("child %d still running after %v", p.Pid(), d)
		return Result{}
	}
}

// gone reports whether pid no longer runs: it does not exist or is a zombie
// (in a container, PID 1 may never reap reparented orphans).
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'Z'
}

func waitGone(t *testing.T, pid int, d time.Duration) {
	t.Helper()
	end := time.Now().Add(d)
	for !gone(pid) {
		if time.Now().After(end) {
			t.Fatalf("pid %d still alive after %v", pid, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func killOnCleanup(t *testing.T, pid int) {
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
}

// killGroupOnCleanup kills p's group at the end of a failed test; once p
// exited, its pgid may belong to someone else and is left alone.
func killGroupOnCleanup(t *testing.T, p *Process) {
	t.Cleanup(func() { _ = p.Signal(syscall.SIGKILL) })
}

func TestExitCodePassthrough(t *testing.T) {
	r := run(t, Spec{Shell: "exit 3"})
	if r.ExitCode != 3 || r.Signaled || ExitCode(r) != 3 {
		t.Fatalf("got %+v, ExitCode %d; want 3", r, ExitCode(r))
	}
	r = run(t, Spec{Argv: []string{"sh", "-c", "exit 0"}})
	if ExitCode(r) != 0 {
		t.Fatalf("got %+v; want 0", r)
	}
}

func TestShellVersusArgv(t *testing.T) {
	var out bytes.Buffer
	// Argv is not interpreted by a shell.
	run(t, Spec{Argv: []string{"echo", "a  $HOME;", "b"}, Stdout: &out})
	if got := out.String(); got != "a  $HOME; b\n" {
		t.Fatalf("argv output %q", got)
	}
	out.Reset()
	run(t, Spec{Shell: `x=1; echo "v=$x" | tr v w`, Stdout: &out})
	if got := out.String(); got != "w=1\n" {
		t.Fatalf("shell output %q", got)
	}
}

func TestEnvDirStdin(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("COORDD_CHILD_INHERITED", "inh")
	var out, errOut bytes.Buffer
	r := run(t, Spec{
		Shell:  `echo "$COORDD_CHILD_X $COORDD_CHILD_INHERITED"; pwd -P; cat; echo oops >&2`,
		Dir:    dir,
		Env:    []string{"COORDD_CHILD_X=first", "COORDD_CHILD_X=second"},
		Stdin:  strings.NewReader("from stdin\n"),
		Stdout: &out,
		Stderr: &errOut,
	})
	if ExitCode(r) != 0 {
		t.Fatalf("result %+v", r)
	}
	want := "second inh\n" + dir + "\nfrom stdin\n"
	if out.String() != want {
		t.Fatalf("stdout %q, want %q", out.String(), want)
	}
	if errOut.String() != "oops\n" {
		t.Fatalf("stderr %q", errOut.String())
	}
}

func TestKilledBySignal(t *testing.T) {
	r := run(t, Spec{Shell: "kill -TERM $$; sleep 5"})
	if !r.Signaled || r.Signal != syscall.SIGTERM {
		t.Fatalf("result %+v, want killed by TERM", r)
	}
	if got := ExitCode(r); got != 128+15 {
		t.Fatalf("ExitCode %d, want 143", got)
	}
}

func TestNotFound(t *testing.T) {
	for _, argv := range [][]string{
		{"coordd-no-such-command-xyz"},
		{filepath.Join(t.TempDir(), "missing")},
	} {
		_, err := start(context.Background(), Spec{Argv: argv})
		if !errors.Is(err, ErrNotFound) {
			t.Fatalf("%v: err %v, want ErrNotFound", argv, err)
		}
		if got := ExitCode(Result{StartErr: err}); got != ExitNotFound {
			t.Fatalf("%v: ExitCode %d, want 127", argv, got)
		}
	}
	// Through the shell, sh itself reports 127.
	if r := run(t, Spec{Shell: "coordd-no-such-command-xyz 2>/dev/null"}); ExitCode(r) != 127 {
		t.Fatalf("shell: %+v", r)
	}
}

func TestNotExecutable(t *testing.T) {
	dir := t.TempDir()
	noX := filepath.Join(dir, "nox")
	if err := os.WriteFile(noX, []byte("#!/bin/sh\necho hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	badFormat := filepath.Join(dir, "badformat")
	if err := os.WriteFile(badFormat, []byte{0x7f, 'E', 'L', 'F', 0, 1, 2, 3}, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{noX, badFormat, dir} {
		_, err := start(context.Background(), Spec{Argv: []string{path}})
		if !errors.Is(err, ErrNotExecutable) {
			t.Fatalf("%s: err %v, want ErrNotExecutable", path, err)
		}
		if got := ExitCode(Result{StartErr: err}); got != ExitNotExecutable {
			t.Fatalf("%s: ExitCode %d, want 126", path, got)
		}
	}
}

// startWithPipe starts s with stdout on a pipe and returns a line reader.
func startWithPipe(t *testing.T, ctx context.Context, s Spec) (*Process, *bufio.Reader) {
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pr.Close() })
	s.Stdout = pw
	p, err := start(ctx, s)
	pw.Close()
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	killGroupOnCleanup(t, p)
	return p, bufio.NewReader(pr)
}

func readLine(t *testing.T, br *bufio.Reader) string {
	t.Helper()
	ch := make(chan string, 1)
	go func() {
		l, _ := br.ReadString('\n')
		ch <- strings.TrimSpace(l)
	}()
	select {
	case l := <-ch:
		return l
	case <-time.After(10 * time.Second):
		t.Fatal("no output from child")
		return ""
	}
}

func readPid(t *testing.T, br *bufio.Reader) int {
	t.Helper()
	l := readLine(t, br)
	pid, err := strconv.Atoi(l)
	if err != nil || pid <= 0 {
		t.Fatalf("bad pid line %q", l)
	}
	return pid
}

// waitExec waits until pid runs the program named comm: a signal that
// reaches a shell's child between fork and exec may be lost.
func waitExec(t *testing.T, pid int, comm string) {
	t.Helper()
	end := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if strings.TrimSpace(string(b)) == comm {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("pid %d runs %q, not %q", pid, b, comm)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestSignalReachesGroup(t *testing.T) {
	p, br := startWithPipe(t, context.Background(), Spec{Shell: "sleep 30 & echo $!; wait"})
	grandchild := readPid(t, br)
	killOnCleanup(t, grandchild)
	waitExec(t, grandchild, "sleep")
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	r := waitFor(t, p, 10*time.Second)
	if !r.Signaled || r.Signal != syscall.SIGTERM || ExitCode(r) != 143 {
		t.Fatalf("result %+v", r)
	}
	waitGone(t, p.Pid(), 5*time.Second)
	waitGone(t, grandchild, 5*time.Second)
	if err := p.Signal(syscall.SIGTERM); !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("Signal after exit: %v", err)
	}
}

// The grandchild gets the signal itself, not only through its parent: here
// the shell traps TERM (before starting its job, so the job keeps the default
// disposition), survives, and sees its background job die.
func TestSignalReachesGrandchildDirectly(t *testing.T) {
	p, br := startWithPipe(t, context.Background(), Spec{
		Shell: `trap : TERM; sleep 30 & echo $!; wait $!; wait $!; echo "waited $?"; sleep 30`,
	})
	grandchild := readPid(t, br)
	killOnCleanup(t, grandchild)
	waitExec(t, grandchild, "sleep")
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if l := readLine(t, br); l != "waited 143" {
		t.Fatalf("shell said %q", l)
	}
	waitGone(t, grandchild, 5*time.Second)
	if gone(p.Pid()) {
		t.Fatal("shell died although it ignores TERM")
	}
	_ = p.Signal(syscall.SIGKILL)
	waitFor(t, p, 10*time.Second)
}

// leftovers in the group are killed when the leader exits.
func TestGroupKilledOnExit(t *testing.T) {
	p, br := startWithPipe(t, context.Background(), Spec{
		Shell: `sleep 30 >/dev/null 2>&1 & echo $!`,
	})
	grandchild := readPid(t, br)
	killOnCleanup(t, grandchild)
	r := waitFor(t, p, 10*time.Second)
	if ExitCode(r) != 0 {
		t.Fatalf("result %+v", r)
	}
	waitGone(t, grandchild, 5*time.Second)
}

// trapScript ignores TERM except for writing a marker, and keeps running.
const trapScript = `trap 'touch "$MARKER"' TERM; echo ready; while :; do sleep 0.05; done`

func TestLeaseLostWithoutRenewal(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "term")
	acquired := time.Now()
	p, br := startWithPipe(t, context.Background(), Spec{
		Shell: trapScript, Env: []string{"MARKER=" + marker},
		Lease: 1500 * time.Millisecond, Margin: 200 * time.Millisecond, Grace: 400 * time.Millisecond,
		AcquiredAt: acquired,
	})
	if l := readLine(t, br); l != "ready" {
		t.Fatalf("child said %q", l)
	}
	r := waitFor(t, p, 15*time.Second)
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("TERM was not sent before KILL: %v", err)
	}
	if !r.LeaseLost || r.TimedOut || !r.Signaled || r.Signal != syscall.SIGKILL {
		t.Fatalf("result %+v", r)
	}
	if got := ExitCode(r); got != ExitLeaseLost {
		t.Fatalf("ExitCode %d, want %d", got, ExitLeaseLost)
	}
	// KILL at the deadline (1.3s), never before it.
	if el := time.Since(acquired); el < 1300*time.Millisecond {
		t.Fatalf("killed after %v, before the deadline", el)
	}
	waitGone(t, p.Pid(), 5*time.Second)
}

func TestLeaseRenewedSurvives(t *testing.T) {
	p, err := start(context.Background(), Spec{
		Shell: "sleep 2.5; exit 4",
		Lease: 1500 * time.Millisecond, Margin: 200 * time.Millisecond, Grace: 400 * time.Millisecond,
		AcquiredAt: time.Now(),
	})
	if err != nil {
		t.Fatal(err)
	}
	killGroupOnCleanup(t, p)
	tick := time.NewTicker(300 * time.Millisecond)
	defer tick.Stop()
	end := time.After(20 * time.Second)
loop:
	for {
		select {
		case <-tick.C:
			p.Renewed(time.Now())
			// An old renewal never moves the deadline back.
			p.Renewed(time.Now().Add(-time.Hour))
		case <-p.Done():
			break loop
		case <-end:
			t.Fatal("child did not exit")
		}
	}
	r := p.Wait()
	if r.LeaseLost || r.Signaled || ExitCode(r) != 4 {
		t.Fatalf("result %+v", r)
	}
}

func TestTimeout(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "term")
	start := time.Now()
	p, br := startWithPipe(t, context.Background(), Spec{
		Shell: trapScript, Env: []string{"MARKER=" + marker},
		Timeout: 500 * time.Millisecond, KillGrace: 500 * time.Millisecond,
	})
	if l := readLine(t, br); l != "ready" {
		t.Fatalf("child said %q", l)
	}
	r := waitFor(t, p, 15*time.Second)
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("TERM was not sent before KILL: %v", err)
	}
	if !r.TimedOut || r.LeaseLost || !r.Signaled || r.Signal != syscall.SIGKILL || ExitCode(r) != 137 {
		t.Fatalf("result %+v, ExitCode %d", r, ExitCode(r))
	}
	if el := time.Since(start); el < time.Second {
		t.Fatalf("killed after %v, before timeout+grace", el)
	}
}

func TestTimeoutChildHonoursTerm(t *testing.T) {
	r := run(t, Spec{Argv: []string{"sleep", "30"}, Timeout: 200 * time.Millisecond, KillGrace: 10 * time.Second})
	if !r.TimedOut || r.Signal != syscall.SIGTERM {
		t.Fatalf("result %+v", r)
	}
}

func TestContextCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	marker := filepath.Join(t.TempDir(), "term")
	p, br := startWithPipe(t, ctx, Spec{
		Shell: trapScript, Env: []string{"MARKER=" + marker}, KillGrace: 300 * time.Millisecond,
	})
	if l := readLine(t, br); l != "ready" {
		t.Fatalf("child said %q", l)
	}
	cancel()
	r := waitFor(t, p, 15*time.Second)
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("TERM was not sent before KILL: %v", err)
	}
	if !r.Canceled || !r.Signaled || r.Signal != syscall.SIGKILL {
		t.Fatalf("result %+v", r)
	}
}

func TestSpecValidation(t *testing.T) {
	now := time.Now()
	for _, s := range []Spec{
		{},
		{Argv: []string{"true"}, Shell: "true"},
		{Argv: []string{""}},
		{Shell: "true", Lease: time.Second, Grace: 100 * time.Millisecond},                                                  // no AcquiredAt
		{Shell: "true", Lease: time.Second, AcquiredAt: now},                                                                // no Grace
		{Shell: "true", Lease: time.Second, Grace: 500 * time.Millisecond, AcquiredAt: now},                                 // Grace > Lease/3
		{Shell: "true", Lease: time.Second, Margin: 800 * time.Millisecond, Grace: 300 * time.Millisecond, AcquiredAt: now}, // no room
	} {
		if _, err := Start(context.Background(), s); err == nil {
			t.Fatalf("Start(%+v) succeeded", s)
		}
	}
}

// If coordd is killed -9, its child dies with it (Pdeathsig), even though
// the Go runtime creates and retires threads meanwhile.
func TestPdeathsig(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=pdeathsig")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killOnCleanup(t, cmd.Process.Pid)
	pid := readPid(t, bufio.NewReader(out))
	killOnCleanup(t, pid)

	// Let the helper run for a while: the child must not die early.
	time.Sleep(time.Second)
	if gone(pid) {
		t.Fatal("child died while the helper was alive")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	waitGone(t, pid, 5*time.Second)
}

// TestWithShim reruns the tests above with the command under a shim (this
// test binary): exit codes, signals, start errors, the lease and the timeout
// must all behave the same.
func TestWithShim(t *testing.T) {
	testShim = testExecutable()
	defer func() { testShim = "" }()
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
	} {
		t.Run(tc.name, tc.f)
	}
}

// The command's own exit status comes back through the shim, not the
// shim's: 128+N when signal N killed it.
func TestShimExitStatus(t *testing.T) {
	shim := testExecutable()
	for _, tc := range []struct {
		shell string
		code  int
		sig   syscall.Signal
	}{
		{"exit 0", 0, 0},
		{"exit 42", 42, 0},
		{"exit 255", 255, 0},
		{"kill -INT $$; sleep 5", -1, syscall.SIGINT},
		{"kill -KILL $$", -1, syscall.SIGKILL},
		{"kill -SEGV $$; sleep 5", -1, syscall.SIGSEGV},
	} {
		r := run(t, Spec{Shell: tc.shell, Shim: shim})
		if r.ExitCode != tc.code || r.Signaled != (tc.sig != 0) || r.Signal != tc.sig || r.WaitErr != nil {
			t.Errorf("%q: result %+v", tc.shell, r)
		}
		want := tc.code
		if tc.sig != 0 {
			want = 128 + int(tc.sig)
		}
		if got := ExitCode(r); got != want {
			t.Errorf("%q: ExitCode %d, want %d", tc.shell, got, want)
		}
	}
}

// A shim that cannot run, or does not speak the protocol, is coordd's
// failure (125), not the command's 127.
func TestShimBroken(t *testing.T) {
	trueBin, err := exec.LookPath("true")
	if err != nil {
		t.Fatal(err)
	}
	for _, shim := range []string{filepath.Join(t.TempDir(), "no-shim"), trueBin} {
		_, err := Start(context.Background(), Spec{Argv: []string{"true"}, Shim: shim})
		if err == nil {
			t.Fatalf("shim %s: Start succeeded", shim)
		}
		if got := ExitCode(Result{StartErr: err}); got != ExitCoorddFailed {
			t.Fatalf("shim %s: %v: ExitCode %d, want %d", shim, err, got, ExitCoorddFailed)
		}
	}
	// A missing working directory is still the command's problem.
	_, err = Start(context.Background(), Spec{Argv: []string{"true"}, Shim: testExecutable(), Dir: filepath.Join(t.TempDir(), "gone")})
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing dir: %v", err)
	}
}

// startGroupHelper runs the test binary as a coordd-like parent (mode
// group-shim or group-noshim) and returns it with the pids of the group
// leader, the shell and the shell's background job.
func startGroupHelper(t *testing.T, mode string) (helper *exec.Cmd, leader, sh, job int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killOnCleanup(t, cmd.Process.Pid)
	// The helper prints the leader's pid, the shell "$$ $!", in either
	// order.
	br := bufio.NewReader(out)
	for range 2 {
		l := readLine(t, br)
		f := strings.Fields(l)
		switch len(f) {
		case 1:
			leader, _ = strconv.Atoi(f[0])
		case 2:
			sh, _ = strconv.Atoi(f[0])
			job, _ = strconv.Atoi(f[1])
		}
	}
	if leader <= 0 || sh <= 0 || job <= 0 {
		t.Fatalf("helper said leader %d, shell %d, job %d", leader, sh, job)
	}
	killOnCleanup(t, leader)
	killOnCleanup(t, sh)
	killOnCleanup(t, job)
	waitExec(t, job, "sleep")
	return cmd, leader, sh, job
}

// If coordd is killed -9, the shim kills the whole process group: the shell
// and its background job die, not only the direct child.
func TestShimKill9KillsGroup(t *testing.T) {
	helper, shim, sh, job := startGroupHelper(t, "group-shim")
	if shim == sh {
		t.Fatal("no shim between the helper and the shell")
	}
	// The helper churns threads meanwhile: nothing may die early.
	time.Sleep(time.Second)
	for _, pid := range []int{shim, sh, job} {
		if gone(pid) {
			t.Fatalf("pid %d died while the helper was alive", pid)
		}
	}
	if err := helper.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = helper.Wait()
	for _, pid := range []int{shim, sh, job} {
		waitGone(t, pid, 5*time.Second)
	}
}

// Why the shim exists: without it, kill -9 of coordd kills the shell
// (Pdeathsig) but its background job runs on.
func TestNoShimKill9LeavesGrandchild(t *testing.T) {
	helper, leader, sh, job := startGroupHelper(t, "group-noshim")
	if leader != sh {
		t.Fatalf("leader %d is not the shell %d", leader, sh)
	}
	if err := helper.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = helper.Wait()
	waitGone(t, sh, 5*time.Second)
	time.Sleep(500 * time.Millisecond)
	if gone(job) {
		t.Fatal("the background job died without a shim; the shim test proves nothing")
	}
}
