package child

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The guard protocol, between Start (in coordd) and runGuard (in the guard
// process, a copy of coordd's executable started once per coordd process):
//
//	argv:  GUARD guardArg guardProto COORDD_PID
//	fd 3:  the control socket (SOCK_SEQPACKET). The guard first sends
//	       "ready PROTO"; then each message from coordd is one start: a
//	       guardRequest in JSON, with the command's status socket, then
//	       its stdout, stderr and stdin when the request says they are
//	       attached, as SCM_RIGHTS. EOF means coordd is gone.
//
// On a command's status socket (SOCK_STREAM) the guard writes the lines of
// the shim protocol ("started PID", "error ERRNO MESSAGE", at the end
// "status WAITSTATUS"), and between them "exited" once the command, the
// group's leader, has exited and the rest of its group was killed; it then
// waits for coordd's "reap" line (or EOF) before it reaps the command, so
// that the process group id stays the command's for as long as coordd may
// signal it.
const (
	guardArg   = "__coordd_child_guard"
	guardProto = "1"
	guardCtlFD = 3
	// guardMaxMsg bounds a start request (argv and environment). A larger
	// one is started under a shim of its own.
	guardMaxMsg = 1 << 20
	// guardReadyTimeout bounds the wait for a new guard's "ready".
	guardReadyTimeout = 10 * time.Second
)

// errGuardGone is the wait error of a command whose guard died: the
// kernel killed the command (Pdeathsig), its exit status is unknown.
var errGuardGone = errors.New("child: the guard process died")

// guardRequest is one start request.
type guardRequest struct {
	Path string   `json:"path"`
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
	Dir  string   `json:"dir,omitempty"`
	// Which of the command's stdio files follow the status socket, in
	// this order; an absent one is /dev/null.
	Stdout bool `json:"stdout,omitempty"`
	Stderr bool `json:"stderr,omitempty"`
	Stdin  bool `json:"stdin,omitempty"`
}

// guardClient is coordd's side of a running guard process.
type guardClient struct {
	path string
	ctl  *net.UnixConn
	mu   sync.Mutex    // one start request at a time on ctl
	gone chan struct{} // closed once the guard process exited
}

var (
	guardsMu sync.Mutex
	guards   = map[string]*guardClient{} // by executable path
)

// guardFor returns the running guard of path, starting one when there is
// none (or the last one died).
func guardFor(path string) (*guardClient, error) {
	guardsMu.Lock()
	defer guardsMu.Unlock()
	if g := guards[path]; g != nil {
		select {
		case <-g.gone:
			g.ctl.Close()
		default:
			return g, nil
		}
	}
	g, err := startGuard(path)
	if err != nil {
		return nil, err
	}
	guards[path] = g
	return g, nil
}

// startGuard starts the guard process and waits for its "ready".
func startGuard(path string) (*guardClient, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("child: guard socket: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "coordd-guard-ctl"), os.NewFile(uintptr(fds[1]), "coordd-guard-ctl")
	defer theirs.Close()
	c, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		return nil, fmt.Errorf("child: guard socket: %w", err)
	}
	ctl := c.(*net.UnixConn)
	cmd := exec.Command(path, guardArg, guardProto, strconv.Itoa(os.Getpid()))
	cmd.ExtraFiles = []*os.File{theirs} // fd 3 = guardCtlFD
	cmd.Stderr = os.Stderr              // the guard's own complaints
	// Its own group, so that a terminal's ^C reaches coordd, which
	// decides; no environment, so that it holds none of coordd's secrets
	// (each command's environment comes with its request).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = []string{}
	if v, ok := os.LookupEnv("GORACE"); ok {
		cmd.Env = append(cmd.Env, "GORACE="+v)
	}
	if err := cmd.Start(); err != nil {
		ctl.Close()
		return nil, fmt.Errorf("child: starting the guard %s: %w", path, err)
	}
	g := &guardClient{path: path, ctl: ctl, gone: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(g.gone)
	}()
	buf := make([]byte, 64)
	_ = ctl.SetReadDeadline(time.Now().Add(guardReadyTimeout))
	n, err := ctl.Read(buf)
	_ = ctl.SetReadDeadline(time.Time{})
	if err != nil || string(buf[:n]) != "ready "+guardProto {
		ctl.Close()
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("child: the guard %s did not start (does it call child.MaybeRunShim?): %q, %v", path, buf[:n], err)
	}
	return g, nil
}

// send sends one start request with its files.
func (g *guardClient) send(req guardRequest, files []*os.File) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if len(b) > guardMaxMsg {
		return syscall.EMSGSIZE
	}
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	_, _, err = g.ctl.WriteMsgUnix(b, syscall.UnixRights(fds...), nil)
	runtime.KeepAlive(files)
	return err
}

// sendToGuard sends a start request to the guard of path. A guard that
// died since the last command (its socket is broken) is replaced once.
func sendToGuard(path string, req guardRequest, files []*os.File) error {
	for attempt := 0; ; attempt++ {
		g, err := guardFor(path)
		if err != nil {
			return err
		}
		err = g.send(req, files)
		if attempt > 0 || !(errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, net.ErrClosed)) {
			return err
		}
		// The guard is gone; its process may not be reaped yet.
		guardsMu.Lock()
		if guards[path] == g {
			delete(guards, path)
			g.ctl.Close()
		}
		guardsMu.Unlock()
	}
}

// startGuarded starts cmd (its path looked up, Env and Dir set) through the
// guard s.Guard. It falls back to a shim of its own when the request is
// too large for one message.
func startGuarded(ctx context.Context, s Spec, cmd *exec.Cmd) (*Process, error) {
	status, err := socketPair()
	if err != nil {
		return nil, err
	}
	req := guardRequest{Path: cmd.Path, Argv: cmd.Args, Env: dedupEnv(cmd.Env), Dir: s.Dir}
	p := &Process{
		spec:         s,
		path:         cmd.Path,
		killGrace:    s.KillGrace,
		renewed:      make(chan struct{}, 1),
		leaderExited: make(chan struct{}),
		done:         make(chan struct{}),
		statusF:      status[0],
		statusR:      bufio.NewReader(status[0]),
	}
	if p.killGrace <= 0 {
		p.killGrace = DefaultKillGrace
	}
	if s.Lease > 0 {
		p.deadline = s.AcquiredAt.Add(s.Lease - s.Margin)
	}
	gio := &guardIO{}
	cleanup := func() {
		gio.abort()
		status[0].Close()
		status[1].Close()
	}
	files := []*os.File{status[1]}
	f, err := gio.output(s.Stdout)
	if err != nil {
		cleanup()
		return nil, err
	}
	if f != nil {
		req.Stdout, files = true, append(files, f)
	}
	// With the same writer, f stays stdout's pipe: one pipe for both, as
	// exec.Cmd does, so that their lines keep their order.
	if !sameWriter(s.Stderr, s.Stdout) {
		if f, err = gio.output(s.Stderr); err != nil {
			cleanup()
			return nil, err
		}
	}
	if f != nil && s.Stderr != nil {
		req.Stderr, files = true, append(files, f)
	}
	if f, err = gio.input(s.Stdin); err != nil {
		cleanup()
		return nil, err
	}
	if f != nil {
		req.Stdin, files = true, append(files, f)
	}
	err = sendToGuard(s.Guard, req, files)
	if err != nil {
		cleanup()
		if errors.Is(err, syscall.EMSGSIZE) && s.Shim != "" {
			s.Guard = ""
			return Start(ctx, s)
		}
		return nil, fmt.Errorf("child: sending the command to the guard: %w", err)
	}
	// The guard holds its copies now; ours would keep the pipes open.
	status[1].Close()
	gio.sent()
	pid, err := readStart(p.statusR, p.path)
	if err != nil {
		gio.abort()
		status[0].Close()
		return nil, mapStartErr(err)
	}
	p.pid = pid
	gio.start()
	go p.runGuarded(ctx, gio)
	return p, nil
}

// sameWriter reports whether a and b are the same non-nil writer (an
// uncomparable one never is).
func sameWriter(a, b io.Writer) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a != nil && a == b
}

// runGuarded supervises a command the guard started, until the guard
// reports it exited, then lets the guard reap it and collects its status.
func (p *Process) runGuarded(ctx context.Context, gio *guardIO) {
	defer p.statusF.Close()
	supDone := make(chan struct{})
	go func() {
		defer close(supDone)
		p.supervise(ctx)
	}()
	line, err := p.statusR.ReadString('\n')
	exited := err == nil && line == "exited\n"
	p.mu.Lock()
	p.exited = true
	if !exited {
		// The guard died: the kernel killed the command (Pdeathsig), and
		// nobody killed the rest of its group. Its leader is gone, so
		// the group id is free again only once no member is left.
		_ = syscall.Kill(-p.pid, syscall.SIGKILL)
	}
	p.mu.Unlock()
	close(p.leaderExited)
	r := &p.result
	if exited {
		// Signals to the group are over (exited is set): the guard may
		// reap the leader.
		if _, err := p.statusF.Write([]byte("reap\n")); err != nil {
			r.WaitErr = errGuardGone
		}
	} else {
		r.WaitErr = errGuardGone
	}
	if ws, ok := shimStatus(p.statusR); ok {
		r.ExitCode = ws.ExitStatus() // -1 unless it exited
		if ws.Signaled() {
			r.Signaled, r.Signal = true, ws.Signal()
		}
	} else {
		r.ExitCode = -1
		r.WaitErr = errGuardGone
	}
	gio.wait()
	<-supDone
	close(p.done)
}

// socketPair returns the two ends of a stream socket, close-on-exec and
// pollable.
func socketPair() ([2]*os.File, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return [2]*os.File{}, fmt.Errorf("child: status socket: %w", err)
	}
	var out [2]*os.File
	for i, fd := range fds {
		_ = syscall.SetNonblock(fd, true)
		out[i] = os.NewFile(uintptr(fd), "coordd-guard-status")
	}
	return out, nil
}

// dedupEnv keeps the last of each variable, as exec.Cmd does.
func dedupEnv(env []string) []string {
	seen := make(map[string]bool, len(env))
	out := make([]string, 0, len(env))
	for i := len(env) - 1; i >= 0; i-- {
		name, _, _ := strings.Cut(env[i], "=")
		if seen[name] {
			continue
		}
		seen[name] = true
		out = append(out, env[i])
	}
	slices.Reverse(out)
	return out
}

// guardIO is the stdio plumbing of a guarded command: what exec.Cmd does
// for a child of coordd, for a child of the guard. Writers and readers
// that are not files get a pipe, copied here.
type guardIO struct {
	theirs []*os.File // pipe ends sent to the guard
	ours   []*os.File // pipe ends copied here
	copies []func()
	wg     sync.WaitGroup
}

// output returns the file to send for w: w itself when it is a file, the
// write end of a pipe copied to w otherwise, nil for nil.
func (g *guardIO) output(w io.Writer) (*os.File, error) {
	if w == nil {
		return nil, nil
	}
	if f, ok := w.(*os.File); ok {
		return f, nil
	}
	r, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("child: %w", err)
	}
	g.theirs, g.ours = append(g.theirs, pw), append(g.ours, r)
	g.copies = append(g.copies, func() { copyPooled(w, r) })
	return pw, nil
}

// copyBufs are the buffers of the copies: a burst of commands would
// otherwise allocate 32 KiB per stream.
var copyBufs = sync.Pool{New: func() any { return new([32 << 10]byte) }}

// copyPooled copies r to w through a pooled buffer (the struct hides
// r's WriteTo, which would allocate its own).
func copyPooled(w io.Writer, r io.Reader) {
	buf := copyBufs.Get().(*[32 << 10]byte)
	defer copyBufs.Put(buf)
	_, _ = io.CopyBuffer(w, struct{ io.Reader }{r}, buf[:])
}

// input is output for the command's stdin.
func (g *guardIO) input(rd io.Reader) (*os.File, error) {
	if rd == nil {
		return nil, nil
	}
	if f, ok := rd.(*os.File); ok {
		return f, nil
	}
	pr, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("child: %w", err)
	}
	g.theirs, g.ours = append(g.theirs, pr), append(g.ours, w)
	g.copies = append(g.copies, func() {
		copyPooled(w, rd)
		_ = w.Close()
	})
	return pr, nil
}

// sent closes the ends the guard now holds.
func (g *guardIO) sent() {
	for _, f := range g.theirs {
		f.Close()
	}
	g.theirs = nil
}

// abort closes every pipe of a command that did not start.
func (g *guardIO) abort() error {
	g.sent()
	for _, f := range g.ours {
		f.Close()
	}
	return nil
}

// start starts the copies.
func (g *guardIO) start() {
	for _, c := range g.copies {
		g.wg.Go(c)
	}
}

// wait waits for the copies, at most WaitDelay once the command exited
// (descendants outside its group may hold the pipes); then it closes them.
func (g *guardIO) wait() {
	done := make(chan struct{})
	go func() {
		g.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(WaitDelay)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
	for _, f := range g.ours {
		f.Close()
	}
	<-done
}

// runGuard is the guard process: it starts the commands coordd sends, each
// in its own process group with Pdeathsig SIGKILL from a thread that lives
// as long as the command, reports their exit through their status socket,
// and when coordd is gone (EOF on the control socket) kills every group it
// has not reaped and exits.
func runGuard(args []string) int {
	if len(args) < 2 || args[0] != guardProto {
		fmt.Fprintf(os.Stderr, "coordd guard: unsupported protocol or arguments %q\n", args)
		return ExitCoorddFailed
	}
	parent, err := strconv.Atoi(args[1])
	if err != nil {
		fmt.Fprintf(os.Stderr, "coordd guard: bad parent pid %q\n", args[1])
		return ExitCoorddFailed
	}
	syscall.CloseOnExec(guardCtlFD)
	f := os.NewFile(guardCtlFD, "coordd-guard-ctl")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		fmt.Fprintf(os.Stderr, "coordd guard: control socket: %v\n", err)
		return ExitCoorddFailed
	}
	ctl, ok := c.(*net.UnixConn)
	if !ok {
		fmt.Fprintf(os.Stderr, "coordd guard: fd %d is not a unix socket\n", guardCtlFD)
		return ExitCoorddFailed
	}
	// Signals sent to everything (systemd's stop, a terminal's ^C) are
	// coordd's to act on: it forwards them to the commands' groups. The
	// guard goes when coordd does. Caught, not ignored: an ignored signal
	// would stay ignored in the commands.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)
	go func() {
		for range sigs {
		}
	}()
	if os.Getppid() != parent {
		fmt.Fprintf(os.Stderr, "coordd guard: coordd (pid %d) is gone\n", parent)
		return ExitCoorddFailed
	}
	if _, err := ctl.Write([]byte("ready " + guardProto)); err != nil {
		return ExitCoorddFailed
	}
	g := &guard{live: map[int]bool{}}
	g.null, _ = os.OpenFile(os.DevNull, os.O_RDWR, 0)
	buf := make([]byte, guardMaxMsg+1)
	oob := make([]byte, syscall.CmsgSpace(4*4))
	for {
		n, oobn, flags, _, err := ctl.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 {
			g.die() // coordd is gone
		}
		files, ferr := receivedFiles(oob[:oobn])
		var req guardRequest
		switch {
		case ferr != nil || len(files) == 0:
			closeAll(files)
			fmt.Fprintf(os.Stderr, "coordd guard: bad request: %v\n", ferr)
			continue
		case flags&(syscall.MSG_TRUNC|syscall.MSG_CTRUNC) != 0:
			ferr = errors.New("request truncated")
		default:
			ferr = json.Unmarshal(buf[:n], &req)
		}
		if ferr != nil {
			fmt.Fprintf(files[0], "error 0 coordd guard: %v\n", ferr)
			closeAll(files)
			continue
		}
		go g.start(req, files)
	}
}

// receivedFiles returns the files passed with a message.
func receivedFiles(oob []byte) ([]*os.File, error) {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var files []*os.File
	for _, m := range msgs {
		fds, err := syscall.ParseUnixRights(&m)
		if err != nil {
			return files, err
		}
		for _, fd := range fds {
			files = append(files, os.NewFile(uintptr(fd), "coordd-guard-passed"))
		}
	}
	return files, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// guard is the guard process's state.
type guard struct {
	// starting is held (read) by every start from before the fork until
	// the command is in live, and (write) by die, so that no command
	// starts unseen by die.
	starting sync.RWMutex
	dying    bool
	// liveMu guards live, the commands not yet reaped (pid = pgid); die
	// keeps it until the process exits, so that nothing is reaped, and
	// no group id freed, while it kills.
	liveMu sync.Mutex
	live   map[int]bool
	// null is /dev/null, the stdio a request does not attach.
	null *os.File
}

// die kills the group of every command not yet reaped, and exits: coordd
// is gone, nothing may run on without it.
func (g *guard) die() {
	g.starting.Lock()
	g.dying = true
	g.liveMu.Lock()
	for pid := range g.live {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
	// Exiting ends the threads the commands were forked from: their
	// Pdeathsig fires too.
	os.Exit(0)
}

// start runs one request: files are the status socket, then the stdio
// files the request names.
func (g *guard) start(req guardRequest, files []*os.File) {
	status := files[0]
	defer status.Close()
	report := func(format string, a ...any) {
		_, _ = fmt.Fprintf(status, format+"\n", a...)
	}
	// The command's Pdeathsig follows the forking thread: this goroutine
	// keeps it until the command is reaped (then the thread serves other
	// goroutines: the runtime ends a thread only with a goroutine locked
	// to it, which none is once unlocked).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	stdio := []*os.File{nil, nil, nil}
	rest := files[1:]
	take := func(set bool, i int) {
		if set && len(rest) > 0 {
			stdio[i], rest = rest[0], rest[1:]
		}
	}
	take(req.Stdout, 1)
	take(req.Stderr, 2)
	take(req.Stdin, 0)
	for i, f := range stdio {
		if f == nil {
			if g.null == nil {
				report("error 0 coordd guard: no %s", os.DevNull)
				closeAll(files[1:])
				return
			}
			stdio[i] = g.null
		}
	}
	g.starting.RLock()
	if g.dying {
		g.starting.RUnlock()
		closeAll(files[1:])
		report("error 0 coordd guard: coordd is gone")
		return
	}
	proc, err := os.StartProcess(req.Path, req.Argv, &os.ProcAttr{
		Dir:   req.Dir,
		Env:   req.Env,
		Files: stdio,
		Sys:   &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	})
	closeAll(files[1:])
	if err != nil {
		g.starting.RUnlock()
		var errno syscall.Errno
		errors.As(err, &errno)
		report("error %d %s", int(errno), err)
		return
	}
	pid := proc.Pid
	g.liveMu.Lock()
	g.live[pid] = true
	g.liveMu.Unlock()
	g.starting.RUnlock()
	report("started %d", pid)

	// As a child of coordd would be (child.go): observe the exit without
	// reaping, kill what is left of the group while its id is still the
	// leader's, and reap only once coordd stopped signalling it.
	_ = waitExitedNoReap(pid)
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	report("exited")
	_, _ = bufio.NewReader(status).ReadString('\n') // "reap", or EOF
	g.liveMu.Lock()
	delete(g.live, pid)
	ps, err := proc.Wait()
	g.liveMu.Unlock()
	if err != nil {
		return
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok {
		report("status %d", int(ws))
	}
}
