package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/open"
	"github.com/coordd/coordd/internal/proctest"
	"github.com/coordd/coordd/spec"
)

// walkScript walks from the command up its ancestors, as a hostile cron
// command would, and prints for each what it could read: the command line,
// the environment (every variable, NUL turned into newlines) and whether
// /proc/PID/mem opens, which is the whole memory.
const walkScript = `p=$PPID
while [ "$p" -gt 1 ]; do
  echo "ancestor $p"
  echo "cmdline $(tr '\000' ' ' < /proc/$p/cmdline)"
  if tr '\000' '\n' < /proc/$p/environ; then echo "environ-readable $p"; fi
  if (exec 3< /proc/$p/mem) 2>/dev/null; then echo "mem-open $p"; fi
  p=$(awk '/^PPid:/ {print $2}' /proc/$p/status)
done
echo walk-done
`

// unprivileged runs coordd processes as a user without CAP_SYS_PTRACE,
// as in production: root reads every process's /proc files, so a test
// run as root starts them as nobody (65534), in a directory that user can
// use.
type unprivileged struct {
	dir     string // 0755, holds the binary and the spec
	bin     string // a copy of the test binary that nobody may run
	dataDir string
	env     []string
	cred    *syscall.Credential // nil when the test is not root
}

func newUnprivileged(t *testing.T) *unprivileged {
	t.Helper()
	dir, err := os.MkdirTemp("", "coordd-nodump-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	u := &unprivileged{dir: dir, bin: filepath.Join(dir, "coordd"), dataDir: filepath.Join(dir, "data")}
	if os.Geteuid() == 0 {
		u.cred = &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(u.bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	u.mkdir(t, u.dataDir)
	u.env = append(os.Environ(), "COORDD_TEST_AS_MAIN=1", "COORDD_DATA_DIR="+u.dataDir)
	return u
}

// mkdir makes a directory the unprivileged user owns.
func (u *unprivileged) mkdir(t *testing.T, path string) {
	t.Helper()
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	if u.cred != nil {
		if err := os.Chown(path, int(u.cred.Uid), int(u.cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
}

// write writes a file everyone may read.
func (u *unprivileged) write(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(u.dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// command is coordd ARGS as the unprivileged user, with extra variables.
func (u *unprivileged) command(extra []string, args ...string) *exec.Cmd {
	cmd := exec.Command(u.bin, args...)
	cmd.Env = append(append([]string{}, u.env...), extra...)
	if u.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: u.cred}
	}
	return cmd
}

// checkWalk checks what walkScript printed: it walked past at least
// minCoordd coordd processes (lines whose command line is this test's
// copy of the binary), could read neither the environment nor the memory
// of any, and the secret appears nowhere.
func checkWalk(t *testing.T, what, out, bin, secret string, minCoordd int) {
	t.Helper()
	if !strings.Contains(out, "walk-done") {
		t.Fatalf("%s: the walk did not finish:\n%s", what, out)
	}
	coordd := map[string]bool{} // pids of coordd processes
	pid := ""
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		switch f := strings.Fields(line); {
		case len(f) == 2 && f[0] == "ancestor":
			pid = f[1]
		case len(f) >= 2 && f[0] == "cmdline" && f[1] == bin:
			coordd[pid] = true
		case len(f) == 2 && (f[0] == "environ-readable" || f[0] == "mem-open") && coordd[f[1]]:
			t.Errorf("%s: a command read coordd process %s: %s", what, f[1], line)
		}
	}
	if len(coordd) < minCoordd {
		t.Errorf("%s: the walk passed %d coordd processes, want at least %d:\n%s", what, len(coordd), minCoordd, out)
	}
	if strings.Contains(out, secret) {
		t.Errorf("%s: the secret is in the command's output:\n%s", what, out)
	}
}

// TestNoCoorddProcessExposesSecrets: a command that coordd starts, running
// as the same user as coordd, walks $PPID up and reads /proc/PID/environ
// and /proc/PID/mem of every ancestor. The daemon held the backend's
// secret in its environment and printed it into the shared run history;
// `sem run`, `queue work` and `cron run` leaked it the same way. Every
// coordd process (the daemon, its guard, the CLI commands and their shims)
// is now non-dumpable: the command reads none of them.
func TestNoCoorddProcessExposesSecrets(t *testing.T) {
	u := newUnprivileged(t)
	marker := make([]byte, 8)
	_, _ = rand.Read(marker)
	secretDir := filepath.Join(u.dir, "secret-"+hex.EncodeToString(marker))
	u.mkdir(t, secretDir)
	secretEnv := []string{"COORDD_TEST_SECRET=" + secretDir}
	walk := u.write(t, "walk.sh", walkScript)
	specPath := u.write(t, "coordd.yaml", fmt.Sprintf(`backends:
  db: {type: sqlite, path: "${COORDD_TEST_SECRET}/x.db"}
cluster: {backend: db}
semaphores:
  s: {limit: 1}
queues:
  q: {visibility_timeout: 10s}
cron:
  walk: {schedule: "@every 1s", command: [/bin/sh, %q]}
`, walk))
	run := func(args ...string) string {
		t.Helper()
		out, err := u.command(secretEnv, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("coordd %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("apply", "-f", specPath, "--auto-approve")

	checkWalk(t, "sem run", run("sem", "run", "s", "-f", specPath, "--", "/bin/sh", walk), u.bin, hex.EncodeToString(marker), 2)
	run("queue", "push", "q", "-f", specPath, "x")
	checkWalk(t, "queue work", run("queue", "work", "q", "-f", specPath, "--drain", "--", "/bin/sh", walk), u.bin, hex.EncodeToString(marker), 2)
	checkWalk(t, "cron run", run("cron", "run", "walk", "-f", specPath), u.bin, hex.EncodeToString(marker), 1)

	// The daemon runs the task on its schedule, under its guard, and
	// stores the output where every host reads it.
	d := u.command(secretEnv, "run", "-f", specPath, "--host-id", "h1", "--shutdown-grace", "5s")
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
	out := scheduledOutput(t, &spec.Backend{Name: "db", Type: spec.TypeSQLite, Path: filepath.Join(secretDir, "x.db")}, "walk", logs)
	checkWalk(t, "the daemon's stored output", out, u.bin, hex.EncodeToString(marker), 2)
}

// scheduledOutput waits for the first succeeded scheduled run of task on
// the store b and returns its stored output.
func scheduledOutput(t *testing.T, b *spec.Backend, task string, logs *proctest.SyncBuffer) string {
	t.Helper()
	ctx := context.Background()
	st, err := open.Open(ctx, b, backends.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		runs, err := st.Crons().History(ctx, task, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range runs {
			if !r.Manual && r.Status == backends.RunSucceeded {
				return string(r.Output)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no scheduled run of %s succeeded within 60s; daemon output:\n%s", task, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
