package child

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
)

// The shim protocol, between Start (in coordd) and runShim (in the shim
// process, a copy of coordd's executable):
//
//	argv:  SHIM shimArg shimProto COORDD_PID PATH ARGV0 ARGS...
//	dir, env, stdin/stdout/stderr: the command's (the shim passes them on)
//	fd 3:  the write end of a pipe; the shim writes one line when the
//	       command started or failed to start, and one line with the
//	       command's wait status when it ended:
//
//	       started PID
//	       error ERRNO MESSAGE
//	       status WAITSTATUS
//
// The protocol version is in the arguments so that a binary that does not
// speak this version refuses instead of misreading them.
const (
	shimArg      = "__coordd_child_shim"
	shimProto    = "1"
	shimStatusFD = 3
)

// DefaultShim is the shim executable for callers that are not told one, such
// as the scheduler. coordd's main sets it to its own executable; it stays
// empty (no shim) in programs that do not call MaybeRunShim, such as the
// tests of other packages.
var DefaultShim string

// MaybeRunShim runs the child shim, or the guard, and exits if this process
// was started as one (os.Args[1] is the hidden shim or guard argument);
// otherwise it returns at once.
// A program that is named in Spec.Shim must call it first thing in main (and
// in TestMain for a test binary that acts as that program).
func MaybeRunShim() {
	if len(os.Args) < 2 {
		return
	}
	switch os.Args[1] {
	case shimArg, guardArg:
	default:
		return
	}
	// The shim holds the command's environment and the guard every
	// command's: neither may be readable by the commands below them.
	if err := DisableDumps(); err != nil {
		fmt.Fprintf(os.Stderr, "coordd %s: %v\n", strings.TrimPrefix(os.Args[1], "__coordd_child_"), err)
		os.Exit(ExitCoorddFailed)
	}
	switch os.Args[1] {
	case shimArg:
		os.Exit(runShim(os.Args[2:]))
	case guardArg:
		os.Exit(runGuard(os.Args[2:]))
	}
}

// runShim is the shim process: it starts the command as its child in its own
// process group, passes the command's exit status back to coordd, and kills
// the whole group when coordd dies.
func runShim(args []string) int {
	// The command's Pdeathsig follows the forking thread: this goroutine
	// stays locked to its thread until the process exits.
	runtime.LockOSThread()
	status := os.NewFile(shimStatusFD, "coordd-shim-status")
	// The command must not inherit the status pipe (it would hold coordd's
	// reading end open after the shim exited).
	syscall.CloseOnExec(shimStatusFD)
	report := func(format string, a ...any) {
		_, _ = fmt.Fprintf(status, format+"\n", a...)
	}
	if len(args) < 4 || args[0] != shimProto {
		report("error 0 shim: unsupported protocol or arguments %q", args)
		return ExitCoorddFailed
	}
	parent, err := strconv.Atoi(args[1])
	if err != nil {
		report("error 0 shim: bad parent pid %q", args[1])
		return ExitCoorddFailed
	}
	path, argv := args[2], args[3:]

	// Catch the parent-death signal (SIGTERM) and the signals coordd
	// forwards to the group before the command exists, so that none of
	// them is lost or kills the shim alone.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)
	if os.Getppid() != parent {
		// coordd died before the shim could watch for it.
		report("error 0 shim: coordd (pid %d) is gone", parent)
		return ExitCoorddFailed
	}

	proc, err := os.StartProcess(path, argv, &os.ProcAttr{
		Env:   os.Environ(),
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		Sys:   &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		var errno syscall.Errno
		errors.As(err, &errno)
		report("error %d %s", int(errno), err)
		switch mapped := mapStartErr(err); {
		case errors.Is(mapped, ErrNotFound):
			return ExitNotFound
		case errors.Is(mapped, ErrNotExecutable):
			return ExitNotExecutable
		}
		return ExitCoorddFailed
	}
	report("started %d", proc.Pid)

	type waited struct {
		ps  *os.ProcessState
		err error
	}
	done := make(chan waited, 1)
	go func() {
		ps, err := proc.Wait()
		done <- waited{ps, err}
	}()
	for {
		select {
		case <-sigs:
			if os.Getppid() == parent {
				// coordd signalled the group: the command got the
				// signal too and decides for itself.
				continue
			}
			// coordd is gone (we were reparented): nothing supervises
			// the group any more, so it all goes, the shim included.
			if pg := syscall.Getpgrp(); pg == os.Getpid() {
				_ = syscall.Kill(-pg, syscall.SIGKILL)
			}
			_ = proc.Kill()
			return 128 + int(syscall.SIGKILL)
		case w := <-done:
			if w.err != nil {
				fmt.Fprintf(os.Stderr, "coordd shim: wait: %v\n", w.err)
				return ExitCoorddFailed
			}
			ws, _ := w.ps.Sys().(syscall.WaitStatus)
			report("status %d", int(ws))
			if ws.Signaled() {
				return 128 + int(ws.Signal())
			}
			return ws.ExitStatus()
		}
	}
}

// shimCommand returns the command that runs cmd through the shim at
// shimPath. statusW must be passed as the shim's fd 3.
func shimCommand(shimPath string, cmd *exec.Cmd, statusW *os.File) *exec.Cmd {
	args := append([]string{shimArg, shimProto, strconv.Itoa(os.Getpid()), cmd.Path}, cmd.Args...)
	sc := exec.Command(shimPath, args...)
	sc.ExtraFiles = []*os.File{statusW} // fd 3 = shimStatusFD
	return sc
}

// shimStart reads the shim's first status line: nil once the command runs,
// else why it did not start (the exec error, with its errno, so that
// mapStartErr recognises it).
func shimStart(r *bufio.Reader, path string) error {
	_, err := readStart(r, path)
	return err
}

// readStart reads the first status line of a shim or of the guard: the
// command's pid once it runs, else why it did not start.
func readStart(r *bufio.Reader, path string) (int, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		if errors.Is(err, io.EOF) {
			return 0, fmt.Errorf("child: the shim exited without starting %s (does it call child.MaybeRunShim?)", path)
		}
		return 0, fmt.Errorf("child: reading the shim's status: %w", err)
	}
	word, rest, _ := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
	switch word {
	case "started":
		pid, err := strconv.Atoi(rest)
		if err != nil || pid <= 0 {
			return 0, fmt.Errorf("child: unexpected status line from the shim: %q", line)
		}
		return pid, nil
	case "error":
		num, msg, _ := strings.Cut(rest, " ")
		if n, err := strconv.Atoi(num); err == nil && n > 0 {
			return 0, &os.PathError{Op: "fork/exec", Path: path, Err: syscall.Errno(n)}
		}
		return 0, errors.New(msg)
	}
	return 0, fmt.Errorf("child: unexpected status line from the shim: %q", line)
}

// shimStatus reads the rest of the status pipe after the shim exited and
// returns the command's wait status, if the shim reported one.
func shimStatus(r *bufio.Reader) (syscall.WaitStatus, bool) {
	b, _ := io.ReadAll(io.LimitReader(r, 4096))
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "status "); ok {
			if n, err := strconv.Atoi(v); err == nil {
				return syscall.WaitStatus(n), true
			}
		}
	}
	return 0, false
}
