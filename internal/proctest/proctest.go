// Package proctest starts real coordd processes for tests and kills them,
// and gives the evidence those tests check from outside coordd:
//
//   - a witness: a counter file guarded by flock(1) that each command bumps
//     while it runs, recording how many ran at once;
//   - an append-only occurrence log: one line per command start, written by
//     the command itself with O_APPEND;
//   - continuity checks over that log that need no precise timing.
//
// Tests reuse it against MySQL, Redis and memcached by writing a spec
// with another backend.
package proctest

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// Binary builds cmd/coordd once per test process and returns its path.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..")
		dir, err := os.MkdirTemp("", "coordd-proctest")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "coordd")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/coordd")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// SyncBuffer is a bytes.Buffer safe for a process writer and a test reader:
// give it to exec.Cmd as Stdout or Stderr and read it while the process
// still runs.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Proc is one running coordd process.
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	out  *SyncBuffer
	done chan struct{}
	err  error
}

// Env is the environment every coordd process of a test gets.
type Env struct {
	Bin     string
	DataDir string
	Extra   []string
}

// NewEnv builds coordd and makes a data dir for the test.
func NewEnv(t testing.TB) *Env {
	t.Helper()
	return &Env{Bin: Binary(t), DataDir: t.TempDir()}
}

// Command returns a coordd command (not started) with the test's env.
func (e *Env) Command(args ...string) *exec.Cmd {
	cmd := exec.Command(e.Bin, args...)
	cmd.Env = append(append(os.Environ(), "COORDD_DATA_DIR="+e.DataDir), e.Extra...)
	return cmd
}

// Run runs coordd to completion and returns its combined output and exit
// code.
func (e *Env) Run(t testing.TB, args ...string) (string, int) {
	t.Helper()
	out, err := e.Command(args...).CombinedOutput()
	if err == nil {
		return string(out), 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	}
	t.Fatalf("coordd %v: %v", args, err)
	return "", -1
}

// Start starts a long-running coordd (run, sem run, queue work). It is
// killed when the test ends if still running.
func (e *Env) Start(t testing.TB, name string, args ...string) *Proc {
	t.Helper()
	return e.StartWith(t, name, nil, args...)
}

// StartWith is Start with extra environment variables for this process.
func (e *Env) StartWith(t testing.TB, name string, env []string, args ...string) *Proc {
	t.Helper()
	p := &Proc{Name: name, Cmd: e.Command(args...), out: &SyncBuffer{}, done: make(chan struct{})}
	p.Cmd.Env = append(p.Cmd.Env, env...)
	p.Cmd.Stdout, p.Cmd.Stderr = p.out, p.out
	if err := p.Cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.err = p.Cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.Cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("--- output of %s ---\n%s", name, p.Output())
		}
	})
	return p
}

// Output is everything the process printed so far.
func (p *Proc) Output() string { return p.out.String() }

// Kill9 kills the process with SIGKILL and waits for it.
func (p *Proc) Kill9() {
	_ = p.Cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Signal sends sig.
func (p *Proc) Signal(sig syscall.Signal) { _ = p.Cmd.Process.Signal(sig) }

// Wait waits up to d for the process to exit and returns its exit code, or
// fails the test.
func (p *Proc) Wait(t testing.TB, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		t.Fatalf("%s did not exit within %s", p.Name, d)
	}
	if p.err == nil {
		return 0
	}
	if ee, ok := p.err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// ExitCode is the exit code once Done is closed: -1 when a signal killed
// the process.
func (p *Proc) ExitCode() int {
	<-p.done
	if p.err == nil {
		return 0
	}
	if ee, ok := p.err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}

// Running reports whether the process has not exited.
func (p *Proc) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Eventually polls cond every 50ms until it holds or d passes.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Witness counts concurrent holders through flock(1) on a counter file.
type Witness struct {
	dir string
}

// NewWitness makes a witness in a temp dir.
func NewWitness(t testing.TB) *Witness {
	t.Helper()
	if _, err := exec.LookPath("flock"); err != nil {
		t.Fatal("flock(1) is needed by the witness: install util-linux")
	}
	w := &Witness{dir: t.TempDir()}
	if err := os.WriteFile(filepath.Join(w.dir, "cur"), []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return w
}

// Script returns shell that enters the witness, runs body, and leaves.
// A command stopped with SIGTERM (coordd stops one whose lease is lost)
// leaves when it is stopped, which is when it ends; one killed with
// SIGKILL never leaves (see Leave). The trap is set once inside: a TERM
// before it leaves the count high, which can only raise the peak.
func (w *Witness) Script(body string) string {
	lock, cur, peaks := filepath.Join(w.dir, "lock"), filepath.Join(w.dir, "cur"), filepath.Join(w.dir, "peaks")
	return fmt.Sprintf(`flock %[1]s sh -c 'n=$(($(cat %[2]s)+1)); echo $n > %[2]s; echo $n >> %[3]s'
trap 'flock %[1]s sh -c "echo \$((\$(cat %[2]s)-1)) > %[2]s"; exit 143' TERM
%[4]s
rc=$?
trap - TERM
flock %[1]s sh -c 'echo $(($(cat %[2]s)-1)) > %[2]s'
exit $rc`, lock, cur, peaks, body)
}

// Leave takes out of the witness a holder that was killed with kill -9
// inside it and so never ran its own exit. Call it once the holder's
// command is seen dead: counting it until then can only raise the peak,
// never hide an excess.
func (w *Witness) Leave(t testing.TB) {
	t.Helper()
	lock, cur := filepath.Join(w.dir, "lock"), filepath.Join(w.dir, "cur")
	if out, err := exec.Command("flock", lock, "sh", "-c", fmt.Sprintf(`echo $(($(cat %[1]s)-1)) > %[1]s`, cur)).CombinedOutput(); err != nil {
		t.Fatalf("witness leave: %v\n%s", err, out)
	}
}

// Peak returns how many runs entered and the most that were inside at once.
func (w *Witness) Peak(t testing.TB) (runs, peak int) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(w.dir, "peaks"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	for _, f := range strings.Fields(string(b)) {
		n, _ := strconv.Atoi(f)
		runs++
		peak = max(peak, n)
	}
	return runs, peak
}

// Line is one start recorded in an occurrence log.
type Line struct {
	Task        string
	ScheduledAt string
	Attempt     int
	Host        string
}

// LogCommand is a cron command that appends one occurrence line to path.
// It uses the environment coordd gives the child.
func LogCommand(path string) string {
	return fmt.Sprintf(`echo "$COORDD_TASK $COORDD_SCHEDULED_AT $COORDD_ATTEMPT ${COORDD_TEST_HOST:-?}" >> %s`, path)
}

// ReadLog parses an occurrence log.
func ReadLog(t testing.TB, path string) []Line {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []Line
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 3 {
			t.Fatalf("bad log line %q", sc.Text())
		}
		a, _ := strconv.Atoi(fs[2])
		l := Line{Task: fs[0], ScheduledAt: fs[1], Attempt: a}
		if len(fs) > 3 {
			l.Host = fs[3]
		}
		out = append(out, l)
	}
	return out
}

// Continuity checks an occurrence log of an `@every step` task: no
// (scheduled_at, attempt) started twice, and no scheduled time missing
// between the first and the last. It returns the number of occurrences.
func Continuity(t testing.TB, lines []Line, step time.Duration) int {
	t.Helper()
	seen := map[string]int{}
	var times []time.Time
	for _, l := range lines {
		k := l.ScheduledAt + "#" + strconv.Itoa(l.Attempt)
		seen[k]++
		if seen[k] == 2 {
			t.Errorf("attempt started twice: %s attempt %d", l.ScheduledAt, l.Attempt)
		}
		if seen[k] == 1 && l.Attempt == 1 {
			ts, err := time.Parse(time.RFC3339Nano, l.ScheduledAt)
			if err != nil {
				t.Fatalf("bad scheduled_at %q: %v", l.ScheduledAt, err)
			}
			times = append(times, ts)
		}
	}
	sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
	for i := 1; i < len(times); i++ {
		if gap := times[i].Sub(times[i-1]); gap != step {
			t.Errorf("missed occurrence(s) between %s and %s", times[i-1].Format(time.RFC3339), times[i].Format(time.RFC3339))
		}
	}
	return len(times)
}
