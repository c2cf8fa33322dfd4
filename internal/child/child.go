package child

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// Exit codes used by `coordd sem run` and `coordd cron run`.
const (
	ExitNotAcquired   = 75  // the lease could not be acquired (EX_TEMPFAIL)
	ExitLeaseLost     = 122 // the child was stopped because the lease was lost
	ExitCoorddFailed  = 125 // coordd itself failed
	ExitNotExecutable = 126 // the command was found but could not be executed
	ExitNotFound      = 127 // the command was not found
)

// DefaultKillGrace is the time between SIGTERM and SIGKILL after a timeout or
// a context cancellation when Spec.KillGrace is zero.
const DefaultKillGrace = 10 * time.Second

// WaitDelay bounds how long Wait keeps copying the child's output after the
// child exited, when processes outside its group still hold the pipes.
const WaitDelay = 2 * time.Second

var (
	// ErrNotFound is returned (wrapping the exec error) when the command
	// does not exist.
	ErrNotFound = errors.New("command not found")
	// ErrNotExecutable is returned (wrapping the exec error) when the
	// command exists but cannot be executed.
	ErrNotExecutable = errors.New("command not executable")
)

// Spec describes the command to run and how to supervise it.
type Spec struct {
	// Argv is run directly (Argv[0] is looked up in PATH when it contains
	// no slash). Exactly one of Argv and Shell must be set.
	Argv []string
	// Shell is run with /bin/sh -c.
	Shell string
	// Dir is the working directory; empty means coordd's.
	Dir string
	// Env is appended to os.Environ(); later entries win.
	Env []string
	// Unset names variables of os.Environ() that the command must not
	// inherit (the backends' secrets: spec.Spec.ChildEnvUnset); Vars are
	// never inherited either. Entries of Env are kept even when named
	// here. With a shim, the shim gets the reduced environment and passes
	// it on, so neither has them.
	Unset []string

	Stdin          io.Reader
	Stdout, Stderr io.Writer

	// Lease enables lease supervision when non-zero: see the package doc.
	// AcquiredAt is the send time of the request that acquired the lease
	// (time.Now() taken before sending; required with Lease).
	Lease, Margin, Grace time.Duration
	AcquiredAt           time.Time

	// Timeout, when non-zero, stops the child after it ran that long:
	// SIGTERM, then SIGKILL KillGrace later. KillGrace also applies to a
	// cancelled context; zero means DefaultKillGrace.
	Timeout, KillGrace time.Duration

	// Shim, when set, is the path of an executable that calls
	// MaybeRunShim first thing (coordd's own). The command then runs under
	// a shim process that leads the process group and kills the whole
	// group if coordd dies: see the package doc. Empty: no shim.
	Shim string
	// Guard, when set, is such an executable too, run once per process as
	// the guard: the one process that starts every command whose Spec
	// names it, and kills each one's whole group if coordd dies, at the
	// cost of one process in all rather than one per command (see the
	// package doc). It takes precedence over Shim, which is used instead
	// for a command too large to hand to the guard.
	Guard string
}

// Result is the outcome of a child process.
type Result struct {
	ExitCode int            // the child's exit code, -1 when killed by a signal
	Signaled bool           // the child was killed by Signal
	Signal   syscall.Signal // valid when Signaled
	// Why coordd stopped the child, if it did (several may be set).
	LeaseLost, TimedOut, Canceled bool
	// StartErr is the error of Start; Start returns it too. Only useful to
	// hand a failed start to ExitCode.
	StartErr error
	// WaitErr is an unexpected error from waiting (not the exit status).
	WaitErr error
}

// ExitCode maps a result to the exit code of `sem run` / `cron run`:
// ExitLeaseLost when the lease was lost, 126/127/125 for a failed start,
// otherwise the child's own exit code, or 128+N when signal N killed it.
func ExitCode(r Result) int {
	switch {
	case r.StartErr != nil:
		switch {
		case errors.Is(r.StartErr, ErrNotFound):
			return ExitNotFound
		case errors.Is(r.StartErr, ErrNotExecutable):
			return ExitNotExecutable
		default:
			return ExitCoorddFailed
		}
	case r.LeaseLost:
		return ExitLeaseLost
	case r.Signaled:
		return 128 + int(r.Signal)
	case r.WaitErr != nil && r.ExitCode < 0:
		return ExitCoorddFailed
	default:
		return r.ExitCode
	}
}

// Process is a started child under supervision.
type Process struct {
	spec      Spec
	cmd       *exec.Cmd // the command, or the shim that runs it
	path      string    // the command's path, for errors reported by the shim
	pid       int
	killGrace time.Duration

	// With a shim: the read end of its status pipe, and the write end
	// until the shim has been started.
	statusR *bufio.Reader
	statusF *os.File
	statusW *os.File

	mu       sync.Mutex
	exited   bool      // leader exited: never signal the group again
	deadline time.Time // lease deadline (monotonic)

	renewed      chan struct{} // wakes the supervisor; buffered 1
	leaderExited chan struct{}
	done         chan struct{}
	result       Result
}

// Start starts the command described by s and supervises it until it exits.
// Cancelling ctx stops the child (TERM, then KILL after KillGrace). Start
// errors wrap ErrNotFound or ErrNotExecutable when they apply.
func Start(ctx context.Context, s Spec) (*Process, error) {
	if err := validate(s); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var cmd *exec.Cmd
	if s.Shell != "" {
		cmd = exec.Command("/bin/sh", "-c", s.Shell)
	} else {
		cmd = exec.Command(s.Argv[0], s.Argv[1:]...)
	}
	path := cmd.Path
	if s.Guard != "" {
		// The lookup in PATH happens here, with coordd's PATH, as
		// without a guard.
		if cmd.Err != nil {
			return nil, mapStartErr(cmd.Err)
		}
		cmd.Dir = s.Dir
		cmd.Env = append(without(os.Environ(), slices.Concat(s.Unset, Vars)), s.Env...)
		return startGuarded(ctx, s, cmd)
	}
	// The shim's (or the child's) death signal: the shim catches SIGTERM to
	// kill the whole group; a direct child just dies.
	deathSig := syscall.SIGKILL
	var statusR, statusW *os.File
	if s.Shim != "" {
		// The lookup in PATH happens here, with coordd's PATH, as
		// without a shim.
		if cmd.Err != nil {
			return nil, mapStartErr(cmd.Err)
		}
		var err error
		if statusR, statusW, err = os.Pipe(); err != nil {
			return nil, fmt.Errorf("child: %w", err)
		}
		cmd = shimCommand(s.Shim, cmd, statusW)
		deathSig = syscall.SIGTERM
	}
	cmd.Dir = s.Dir
	cmd.Env = append(without(os.Environ(), slices.Concat(s.Unset, Vars)), s.Env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = s.Stdin, s.Stdout, s.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: deathSig}
	cmd.WaitDelay = WaitDelay

	p := &Process{
		spec:         s,
		cmd:          cmd,
		path:         path,
		statusF:      statusR,
		statusW:      statusW,
		killGrace:    s.KillGrace,
		renewed:      make(chan struct{}, 1),
		leaderExited: make(chan struct{}),
		done:         make(chan struct{}),
	}
	if statusR != nil {
		p.statusR = bufio.NewReader(statusR)
	}
	if p.killGrace <= 0 {
		p.killGrace = DefaultKillGrace
	}
	if s.Lease > 0 {
		p.deadline = s.AcquiredAt.Add(s.Lease - s.Margin)
	}

	started := make(chan error, 1)
	go p.run(ctx, started)
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

func validate(s Spec) error {
	if (len(s.Argv) == 0) == (s.Shell == "") {
		return errors.New("child: exactly one of Argv and Shell must be set")
	}
	if len(s.Argv) > 0 && s.Argv[0] == "" {
		return errors.New("child: empty command name")
	}
	if s.Lease < 0 || s.Margin < 0 || s.Grace < 0 || s.Timeout < 0 || s.KillGrace < 0 {
		return errors.New("child: negative duration")
	}
	if s.Lease > 0 {
		if s.AcquiredAt.IsZero() {
			return errors.New("child: Lease requires AcquiredAt")
		}
		if s.Grace <= 0 || s.Grace > s.Lease/3 {
			return fmt.Errorf("child: Grace %v must be in (0, Lease/3 = %v]", s.Grace, s.Lease/3)
		}
		if s.Margin+s.Grace >= s.Lease {
			return fmt.Errorf("child: Margin %v + Grace %v must be less than Lease %v", s.Margin, s.Grace, s.Lease)
		}
	}
	return nil
}

// without returns env minus the entries whose name is in names.
func without(env, names []string) []string {
	if len(names) == 0 {
		return env
	}
	drop := make(map[string]bool, len(names))
	for _, n := range names {
		drop[n] = true
	}
	out := env[:0:0]
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if !drop[name] {
			out = append(out, kv)
		}
	}
	return out
}

// Resolve checks, before anything is claimed or acquired, that argv0 names
// a command that can be started: the PATH lookup Start makes (when argv0
// has no slash) and, for a file, that it is a regular file this process
// may execute. It returns the path, or an error wrapping ErrNotFound or
// ErrNotExecutable. A command that passes can still fail to start (it was
// removed since, its #! interpreter is missing); Start reports that.
func Resolve(argv0 string) (string, error) {
	if argv0 == "" {
		return "", fmt.Errorf("%w: empty command name", ErrNotFound)
	}
	path, err := exec.LookPath(argv0)
	if err != nil {
		if errors.Is(err, fs.ErrPermission) {
			return "", fmt.Errorf("%w: %w", ErrNotExecutable, err)
		}
		return "", mapStartErr(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return "", mapStartErr(err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%w: %s is not a regular file", ErrNotExecutable, path)
	}
	return path, nil
}

func mapStartErr(err error) error {
	switch {
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, syscall.ENOENT):
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.ENOEXEC),
		errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EISDIR):
		return fmt.Errorf("%w: %w", ErrNotExecutable, err)
	}
	return err
}

// run forks, waits and reaps the child on one locked OS thread: Pdeathsig
// fires when the forking thread exits, so that thread must outlive the child.
func (p *Process) run(ctx context.Context, started chan<- error) {
	runtime.LockOSThread()
	// Unlocking after the child was reaped returns a healthy thread to the
	// runtime; on the error path nothing needs the thread either.
	defer runtime.UnlockOSThread()

	if p.statusF != nil {
		defer p.statusF.Close()
	}
	err := p.cmd.Start()
	if p.statusW != nil {
		// Only the shim may hold the write end: EOF means it is gone.
		p.statusW.Close()
	}
	if err != nil {
		started <- p.startErr(err)
		return
	}
	p.pid = p.cmd.Process.Pid
	if p.statusR != nil {
		if err := shimStart(p.statusR, p.path); err != nil {
			// The shim is not reaped yet, so its group id is still
			// its own; only the shim can be in the group.
			_ = syscall.Kill(-p.pid, syscall.SIGKILL)
			_ = p.cmd.Wait()
			started <- mapStartErr(err)
			return
		}
	}
	started <- nil

	supDone := make(chan struct{})
	go func() {
		defer close(supDone)
		p.supervise(ctx)
	}()

	// Observe the leader's exit without reaping it: while it is a zombie
	// its pid (= the pgid) cannot be reused, so the group kill below and
	// any concurrent Signal cannot hit an unrelated process group.
	waitErr := waitExitedNoReap(p.pid)
	p.mu.Lock()
	p.exited = true
	// Leftovers in the group must not outlive the lease.
	_ = syscall.Kill(-p.pid, syscall.SIGKILL)
	p.mu.Unlock()
	close(p.leaderExited)

	err = p.cmd.Wait()
	<-supDone

	r := &p.result
	if ws, ok := p.commandStatus(); ok {
		r.ExitCode = ws.ExitStatus() // -1 unless it exited
		if ws.Signaled() {
			r.Signaled, r.Signal = true, ws.Signal()
		}
	} else if ps := p.cmd.ProcessState; ps != nil {
		r.ExitCode = ps.ExitCode()
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			r.Signaled, r.Signal = true, ws.Signal()
		}
	}
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		r.WaitErr = err
	} else if waitErr != nil {
		r.WaitErr = waitErr
	}
	close(p.done)
}

// startErr maps an error of cmd.Start. When the shim itself cannot be
// started, that is coordd's failure, not the command's (a missing shim must
// not read as "command not found"), unless the working directory is what is
// missing, as it would be without a shim.
func (p *Process) startErr(err error) error {
	if p.spec.Shim == "" {
		return mapStartErr(err)
	}
	if d := p.spec.Dir; d != "" {
		if fi, serr := os.Stat(d); serr != nil || !fi.IsDir() {
			return mapStartErr(err)
		}
	}
	return fmt.Errorf("child: starting the shim %s: %v", p.spec.Shim, err)
}

// commandStatus is the command's wait status as the shim reported it.
func (p *Process) commandStatus() (syscall.WaitStatus, bool) {
	if p.statusR == nil {
		return 0, false
	}
	return shimStatus(p.statusR)
}

// waitExitedNoReap blocks until pid has exited, leaving it a zombie.
func waitExitedNoReap(pid int) error {
	const (
		pPID    = 1         // P_PID
		wExited = 0x4       // WEXITED
		wNoWait = 0x1000000 // WNOWAIT
	)
	var info [128]byte // siginfo_t
	for {
		_, _, e := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid),
			uintptr(unsafe.Pointer(&info[0])), wExited|wNoWait, 0, 0)
		switch e {
		case 0:
			return nil
		case syscall.EINTR:
			continue
		default:
			return fmt.Errorf("waitid: %w", e)
		}
	}
}

// supervise enforces the lease deadline, the timeout and ctx until the
// leader exits. Result flags it sets are read only after it returns.
func (p *Process) supervise(ctx context.Context) {
	s := p.spec
	startedAt := time.Now()
	var (
		leaseTerm, timeoutTerm, killed bool
		killAt                         time.Time
		ctxDone                        = ctx.Done()
	)
	setKill := func(t time.Time) {
		if killAt.IsZero() || t.Before(killAt) {
			killAt = t
		}
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		p.mu.Lock()
		deadline := p.deadline
		p.mu.Unlock()

		var next time.Time
		consider := func(t time.Time) {
			if next.IsZero() || t.Before(next) {
				next = t
			}
		}
		if s.Lease > 0 && !leaseTerm {
			consider(deadline.Add(-s.Grace))
		}
		if s.Timeout > 0 && !timeoutTerm {
			consider(startedAt.Add(s.Timeout))
		}
		if !killed && !killAt.IsZero() {
			consider(killAt)
		}
		var timerC <-chan time.Time
		if !next.IsZero() {
			timer.Reset(max(time.Until(next), 0))
			timerC = timer.C
		}

		select {
		case <-p.leaderExited:
			return
		case <-p.renewed:
		case <-ctxDone:
			ctxDone = nil
			p.result.Canceled = true
			p.signalGroup(syscall.SIGTERM)
			setKill(time.Now().Add(p.killGrace))
		case <-timerC:
			now := time.Now()
			if s.Lease > 0 && !leaseTerm && !now.Before(deadline.Add(-s.Grace)) {
				leaseTerm = true
				p.result.LeaseLost = true
				p.signalGroup(syscall.SIGTERM)
				setKill(deadline)
			}
			if s.Timeout > 0 && !timeoutTerm && !now.Before(startedAt.Add(s.Timeout)) {
				timeoutTerm = true
				p.result.TimedOut = true
				p.signalGroup(syscall.SIGTERM)
				setKill(now.Add(p.killGrace))
			}
			if !killed && !killAt.IsZero() && !now.Before(killAt) {
				killed = true
				p.signalGroup(syscall.SIGKILL)
			}
		}
		// Stop before the next Reset; drain is unnecessary since Go 1.23.
		timer.Stop()
	}
}

func (p *Process) signalGroup(sig syscall.Signal) {
	_ = p.Signal(sig)
}

// Pid returns the child's pid, which is also its process group id. With a
// shim, it is the shim's pid: the shim leads the group; with a guard, the
// command's (a child of the guard).
func (p *Process) Pid() int { return p.pid }

// Renewed reports a successful lease renewal whose request was sent at
// sentAt (time.Now() taken before sending). The lease deadline moves to
// sentAt + Lease − Margin unless it is already later. Once the lease was
// given up (TERM sent at deadline − Grace) renewals no longer change anything.
// No-op without lease supervision.
func (p *Process) Renewed(sentAt time.Time) {
	if p.spec.Lease <= 0 {
		return
	}
	d := sentAt.Add(p.spec.Lease - p.spec.Margin)
	p.mu.Lock()
	moved := d.After(p.deadline)
	if moved {
		p.deadline = d
	}
	p.mu.Unlock()
	if moved {
		select {
		case p.renewed <- struct{}{}:
		default:
		}
	}
}

// Signal sends sig to the child's whole process group. It returns
// os.ErrProcessDone once the child has exited.
func (p *Process) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited {
		return os.ErrProcessDone
	}
	return syscall.Kill(-p.pid, sig)
}

// Done is closed when the child has exited and Wait's result is ready.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait waits for the child to exit and returns its result. It may be called
// any number of times, from any goroutine.
func (p *Process) Wait() Result {
	<-p.done
	return p.result
}
