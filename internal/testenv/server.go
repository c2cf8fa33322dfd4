//go:build linux

package testenv

import (
	"context"
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

// server is one private server process that a test owns and may kill and
// start again (MariaDB, Redis): the process handling they share. Its log
// is dir/server.log.
type server struct {
	name        string // for messages: "mariadbd", "redis-server"
	bin         string
	args        []string
	dir         string
	stopTimeout time.Duration
	// cred, when set, runs the server as another user (PostgreSQL
	// refuses to run as root).
	cred *syscall.Credential
	// tree: Kill ends the server's child processes too (PostgreSQL's
	// backends, each in a session of its own, which would otherwise
	// answer their clients for a moment and hold the shared memory a new
	// server needs), as a crash of the machine would end them.
	tree bool
	// stopSignal asks the server to shut down (SIGTERM when 0; postgres
	// takes SIGINT as a fast shutdown that ends its clients' sessions).
	stopSignal syscall.Signal

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// start starts the server (again, after Kill or Stop) and waits until ping
// succeeds. It fails the test when the server exits or is not ready within
// timeout; the server log is in the message.
func (s *server) start(t testing.TB, addr string, timeout time.Duration, ping func(context.Context) error) {
	t.Helper()
	s.mu.Lock()
	if s.cmd != nil && !exited(s.done) {
		s.mu.Unlock()
		t.Fatalf("testenv: the private %s at %s is already running", s.name, addr)
	}
	logf, err := os.OpenFile(filepath.Join(s.dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		s.mu.Unlock()
		t.Fatalf("testenv: %v", err)
	}
	cmd := exec.Command(s.bin, s.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, so that a ^C meant for go test does not reach
	// it first; SIGKILL if this process dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: s.cred}
	err = cmd.Start()
	logf.Close()
	if err != nil {
		s.mu.Unlock()
		t.Fatalf("testenv: starting %s: %v", s.bin, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()

	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err = ping(ctx)
		cancel()
		if err == nil {
			return
		}
		if exited(done) {
			t.Fatalf("testenv: the private %s exited during startup:\n%s", s.name, s.LogTail(40))
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: the private %s at %s was not ready within %s: %v\n%s", s.name, addr, timeout, err, s.LogTail(40))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Kill sends SIGKILL to the server and waits until it has exited: clients
// see their connections reset and new ones refused. Start brings it back.
func (s *server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	var children []int
	if s.tree {
		children = descendants(s.cmd.Process.Pid)
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	for _, pid := range children {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	<-s.done
	// Wait until they are gone (or zombies, whom nobody may reap here),
	// a bound for a test that would otherwise hang.
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range children {
		for alive(pid) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
}

// alive reports whether pid runs and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}

// descendants lists the processes below pid, read from /proc.
func descendants(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	kids := map[int][]int{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after
		// the last ")".
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) < 2 {
			continue
		}
		if pp, err := strconv.Atoi(f[1]); err == nil {
			kids[pp] = append(kids[pp], p)
		}
	}
	var out []int
	for next := []int{pid}; len(next) > 0; {
		p := next[0]
		next = next[1:]
		for _, c := range kids[p] {
			out = append(out, c)
			next = append(next, c)
		}
	}
	return out
}

// Stop shuts the server down cleanly (SIGTERM, or stopSignal), with SIGKILL after its stop
// timeout, and waits until it has exited. Stopping a stopped server does
// nothing.
func (s *server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || exited(s.done) {
		return
	}
	sig := s.stopSignal
	if sig == 0 {
		sig = syscall.SIGTERM
	}
	_ = s.cmd.Process.Signal(sig)
	select {
	case <-s.done:
	case <-time.After(s.stopTimeout):
		_ = s.cmd.Process.Signal(syscall.SIGKILL)
		<-s.done
	}
}

// Running reports whether the server is running.
func (s *server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil && !exited(s.done)
}

// LogTail returns the last n lines of the server's log.
func (s *server) LogTail(n int) string {
	b, err := os.ReadFile(filepath.Join(s.dir, "server.log"))
	if err != nil {
		return fmt.Sprintf("(no server log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func exited(done chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}
