package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/coordd/coordd/internal/proctest"
)

// The CLI as a new user first meets it: one-line flag errors, help on
// stdout, colour on a terminal only, times and exit codes that read alone,
// a waiting command that says what it waits for, error chains that read
// once, a quickstart and examples that leave nothing behind. These run the
// built coordd (proctest) or coordd in-process (newCLI); the terminal cases
// run it on a pseudo-terminal of their own.

// openPTY opens a pseudo-terminal: what a process writes to tty, the test
// reads from pty. Linux only, as the rest of the tests.
func openPTY(t *testing.T) (pty *os.File, tty *os.File) {
	t.Helper()
	pty, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open /dev/ptmx: %v", err)
	}
	var unlock int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, pty.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		t.Fatalf("unlockpt: %v", e)
	}
	var n uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, pty.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		t.Fatalf("ptsname: %v", e)
	}
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open the tty: %v", err)
	}
	t.Cleanup(func() { tty.Close(); pty.Close() })
	return pty, tty
}

// readPTY collects what arrives on pty until it is closed or the process
// side hangs up (EIO).
func readPTY(pty *os.File) *proctest.SyncBuffer {
	var buf proctest.SyncBuffer
	go func() { _, _ = io.Copy(&buf, pty) }()
	return &buf
}

// appliedEnv is a built coordd with a data dir, and a spec applied.
func appliedEnv(t *testing.T, yaml string) (*proctest.Env, string) {
	t.Helper()
	env := proctest.NewEnv(t)
	p := writeSpec(t, yaml)
	if out, code := env.Run(t, "apply", "-f", p, "--auto-approve"); code != 0 {
		t.Fatalf("apply: %d\n%s", code, out)
	}
	return env, p
}

// runSplit runs a command of env with stdout and stderr apart.
func runSplit(t *testing.T, cmd *exec.Cmd) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("run: %v", err)
	}
	return code, out.String(), errb.String()
}

// A flag error is one line and where the help is, on stderr; not the help.
func TestFlagErrorIsOneLine(t *testing.T) {
	env := proctest.NewEnv(t)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"sem", "run", "s", "--bogus", "--", "true"}, 125,
			"coordd sem run: flag provided but not defined: --bogus\nRun 'coordd sem run --help' for usage.\n"},
		{[]string{"queue", "work", "q", "--concurrency", "many", "--", "true"}, 1,
			"coordd queue work: invalid value \"many\" for flag --concurrency: not a whole number\nRun 'coordd queue work --help' for usage.\n"},
		{[]string{"queue", "push", "q", "--delay", "banana", "x"}, 1,
			"coordd queue push: invalid value \"banana\" for flag --delay: not a duration: give a number and a unit, such as 30s, 5m or 1h30m\nRun 'coordd queue push --help' for usage.\n"},
		{[]string{"plan", "--detailed"}, 1,
			"coordd plan: flag provided but not defined: --detailed\nRun 'coordd plan --help' for usage.\n"},
		{[]string{"status", "-f"}, 1,
			"coordd status: flag needs an argument: -f\nRun 'coordd status --help' for usage.\n"},
		{[]string{"cron", "lsit"}, 1,
			"coordd cron: unknown subcommand \"lsit\"\nRun 'coordd cron --help' for usage.\n"},
		{[]string{"stauts"}, 1,
			"coordd: unknown command \"stauts\"\nRun 'coordd --help' for the commands.\n"},
	} {
		code, out, errs := runSplit(t, env.Command(c.args...))
		if code != c.code || out != "" || errs != c.want {
			t.Errorf("coordd %s: exit %d, stdout %q, stderr\n%s\nwant exit %d, stderr\n%s", strings.Join(c.args, " "), code, out, errs, c.code, c.want)
		}
	}
}

// --help goes to stdout, exits 0, and names flags as they are typed.
func TestHelpOnStdoutWithDoubleDash(t *testing.T) {
	env := proctest.NewEnv(t)
	for _, args := range [][]string{{"plan", "--help"}, {"sem", "run", "-h"}, {"queue", "--help"}, {"cron", "history", "--help"}, {"--help"}} {
		code, out, errs := runSplit(t, env.Command(args...))
		if code != 0 || errs != "" || !strings.HasPrefix(out, "Usage:") || !strings.Contains(out, "coordd "+args[0]) && args[0] != "--help" {
			t.Errorf("coordd %s: exit %d, stderr %q, stdout\n%s", strings.Join(args, " "), code, errs, out)
		}
	}
	_, out, _ := runSplit(t, env.Command("plan", "--help"))
	for _, want := range []string{"\n  -f, --file PATH ", "\n  --detailed-exitcode ", "\n  --json "} {
		if !strings.Contains(out, want) {
			t.Errorf("plan --help lacks %q:\n%s", want, out)
		}
	}
	if regexp.MustCompile(`(?m)^\s+-[a-z]{2,}`).MatchString(out) {
		t.Errorf("plan --help shows a long flag with one dash:\n%s", out)
	}
}

const colourSpec = `
semaphores:
  s: {limit: 1}
`

// Colours on a terminal (plan's marks, status's states), none when piped
// or with NO_COLOR; CLICOLOR_FORCE colours a pipe.
func TestColourOnlyOnTerminal(t *testing.T) {
	env := proctest.NewEnv(t)
	p := writeSpec(t, colourSpec)
	plain := func(extra ...string) string {
		cmd := env.Command("plan", "-f", p)
		cmd.Env = append(cmd.Env, extra...)
		_, out, _ := runSplit(t, cmd)
		return out
	}
	green := "\x1b[32m+\x1b[0m semaphore.s"
	if out := plain(); strings.Contains(out, "\x1b") || !strings.Contains(out, "  + semaphore.s") {
		t.Errorf("piped plan has escape codes or lacks its line:\n%q", out)
	}
	if out := plain("CLICOLOR_FORCE=1"); !strings.Contains(out, green) {
		t.Errorf("CLICOLOR_FORCE=1: no green +:\n%q", out)
	}
	if out := plain("CLICOLOR_FORCE=1", "NO_COLOR=1"); strings.Contains(out, "\x1b") {
		t.Errorf("NO_COLOR with CLICOLOR_FORCE: escape codes:\n%q", out)
	}

	// On a terminal.
	onTTY := func(extra []string, args ...string) string {
		pty, tty := openPTY(t)
		buf := readPTY(pty)
		cmd := env.Command(args...)
		cmd.Env = append(cmd.Env, extra...)
		cmd.Stdout, cmd.Stderr = tty, io.Discard
		if err := cmd.Run(); err != nil {
			t.Fatalf("coordd %v on a tty: %v", args, err)
		}
		proctest.Eventually(t, 5*time.Second, "the output on the tty", func() bool { return strings.Contains(buf.String(), "semaphore.s") })
		return buf.String()
	}
	if out := onTTY(nil, "plan", "-f", p); !strings.Contains(out, green) {
		t.Errorf("plan on a tty: no green +:\n%q", out)
	}
	if out := onTTY([]string{"NO_COLOR=1"}, "plan", "-f", p); strings.Contains(out, "\x1b") {
		t.Errorf("plan on a tty with NO_COLOR: escape codes:\n%q", out)
	}
	if out := onTTY(nil, "status", "-f", p); !strings.Contains(out, "\x1b[33mnot applied\x1b[0m") {
		t.Errorf("status on a tty: \"not applied\" not yellow:\n%q", out)
	}
}

// cron list and cron history show times in the task's timezone (UTC with
// --utc); a skipped run's exit code is "-" (null in JSON), a running
// one's "running".
func TestCronTimesAndExitCodes(t *testing.T) {
	flag := filepath.Join(t.TempDir(), "started")
	env, p := appliedEnv(t, fmt.Sprintf(`
cron:
  job:
    schedule: "0 4 * * *"
    timezone: Asia/Tokyo
    command: "echo up > %s; sleep 30"
`, flag))
	first := env.Start(t, "cron run", "cron", "run", "job", "-f", p)
	waitFile(t, flag, 10*time.Second)
	if out, code := env.Run(t, "cron", "run", "job", "-f", p); code != 75 || !strings.Contains(out, "overlap is forbid; recorded as skipped") {
		t.Fatalf("second run: exit %d\n%s", code, out)
	}

	_, out, _ := runSplit(t, env.Command("cron", "history", "job", "-f", p))
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("history: want a header and 2 runs:\n%s", out)
	}
	// Newest first: the skipped run, then the running one.
	skipped, running := strings.Fields(lines[1]), strings.Fields(lines[2])
	// SCHEDULED (date time zone) ATTEMPT STATUS EXIT ...
	if skipped[2] != "JST" || skipped[4] != "skipped" || skipped[5] != "-" {
		t.Errorf("skipped run: %q", lines[1])
	}
	if running[2] != "JST" || running[4] != "running" || running[5] != "running" {
		t.Errorf("running run: %q", lines[2])
	}
	_, utc, _ := runSplit(t, env.Command("cron", "history", "job", "-f", p, "--utc"))
	if strings.Contains(utc, "JST") || strings.Count(utc, " UTC ") < 2 {
		t.Errorf("history --utc:\n%s", utc)
	}

	_, js, _ := runSplit(t, env.Command("cron", "history", "job", "-f", p, "--json"))
	var runs []map[string]any
	if err := json.Unmarshal([]byte(js), &runs); err != nil || len(runs) != 2 {
		t.Fatalf("history --json (%v):\n%s", err, js)
	}
	for _, r := range runs {
		if v, ok := r["exit_code"]; !ok || v != nil {
			t.Errorf("%s run: exit_code %v, want null", r["status"], v)
		}
	}

	_, list, _ := runSplit(t, env.Command("cron", "list", "-f", p))
	// The next 04:00 in Tokyo, and the last run (skipped) without an exit code.
	if !regexp.MustCompile(`\d{4}-\d\d-\d\d 04:00:00 JST`).MatchString(list) || !strings.Contains(list, "skipped at ") || strings.Contains(list, "exit") {
		t.Errorf("cron list:\n%s", list)
	}
	_, listUTC, _ := runSplit(t, env.Command("cron", "list", "-f", p, "--utc"))
	if !regexp.MustCompile(`\d{4}-\d\d-\d\d 19:00:00 UTC`).MatchString(listUTC) {
		t.Errorf("cron list --utc:\n%s", listUTC)
	}
	first.Signal(syscall.SIGTERM)
	first.Wait(t, 30*time.Second)
}

// A sem run that waits, with stderr on a terminal, says what it waits
// for; with stderr piped it says nothing.
func TestSemRunSaysWhatItWaitsFor(t *testing.T) {
	env, p := appliedEnv(t, "semaphores:\n  s: {limit: 1, lease: 10s}\n")
	flag := filepath.Join(t.TempDir(), "held")
	holder := env.Start(t, "holder", "sem", "run", "s", "-f", p, "--host-id", "host-a", "--", "sh", "-c", "echo up > "+flag+"; sleep 30")
	waitFile(t, flag, 10*time.Second)

	pty, tty := openPTY(t)
	buf := readPTY(pty)
	waiter := env.Command("sem", "run", "s", "-f", p, "--host-id", "host-b", "--", "true")
	var out strings.Builder
	waiter.Stdout, waiter.Stderr = &out, tty
	if err := waiter.Start(); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("coordd sem run: waiting for semaphore s: 1 of 1 held by host-a pid %d; 1 in line, this one included", holder.Cmd.Process.Pid)
	proctest.Eventually(t, 20*time.Second, "the waiting line", func() bool { return strings.Contains(buf.String(), want) })
	holder.Signal(syscall.SIGTERM)
	if err := waiter.Wait(); err != nil {
		t.Fatalf("waiter: %v\n%s", err, buf.String())
	}

	// Piped stderr: no such line (a script's log stays its own).
	holder2 := env.Start(t, "holder2", "sem", "run", "s", "-f", p, "--", "sleep", "2")
	proctest.Eventually(t, 10*time.Second, "the second holder", func() bool {
		o, _ := env.Run(t, "sem", "status", "s", "-f", p)
		return strings.Contains(o, "holders 1")
	})
	code, _, errs := runSplit(t, env.Command("sem", "run", "s", "-f", p, "--", "true"))
	if code != 0 || strings.Contains(errs, "waiting") {
		t.Errorf("piped waiter: exit %d, stderr %q", code, errs)
	}
	holder2.Wait(t, 10*time.Second)
}

// queue work --drain says what it still waits for, with the due time of a
// delayed job, on every backend that holds queues; --ready-only does not
// wait for it.
func TestQueueDrainSaysWhatItWaitsFor(t *testing.T) {
	for _, typ := range []string{"sqlite", "mysql", "postgres", "redis"} {
		t.Run(typ, func(t *testing.T) {
			decl := "queues:\n  q: {}\n"
			if typ != "sqlite" {
				decl = hostsBackend(t, typ) + decl
			}
			env, p := appliedEnv(t, decl)
			before := time.Now().Add(time.Hour).Truncate(time.Second)
			if out, code := env.Run(t, "queue", "push", "q", "-f", p, "--delay", "1h", "later"); code != 0 {
				t.Fatalf("push: %s", out)
			}
			after := time.Now().Add(time.Hour)

			// --ready-only: nothing is ready now, so it exits at once.
			if code, out, errs := runSplit(t, env.Command("queue", "work", "q", "-f", p, "--ready-only", "--", "cat")); code != 0 || out != "" {
				t.Fatalf("--ready-only: exit %d, stdout %q, stderr %q", code, out, errs)
			}

			w := env.Start(t, "drain", "queue", "work", "q", "-f", p, "--drain", "--", "cat")
			re := regexp.MustCompile(`coordd queue work: q: draining: waiting for 1 delayed job, due at (\d\d:\d\d:\d\d) UTC \(--ready-only would not wait for delayed jobs\)\n`)
			var m []string
			proctest.Eventually(t, 20*time.Second, "the draining line", func() bool {
				m = re.FindStringSubmatch(w.Output())
				return m != nil
			})
			// The due time is an hour after the push, within the time the
			// push took; compared as times of day (it may pass midnight).
			due, _ := time.Parse("15:04:05", m[1])
			sod := func(t time.Time) int { return t.Hour()*3600 + t.Minute()*60 + t.Second() }
			diff := (sod(due) - sod(before.UTC()) + 86400) % 86400
			if span := int(after.Sub(before).Seconds()) + 2; diff > span && diff < 86400-2 {
				t.Errorf("due at %s, want between %s and %s", m[1], before.UTC().Format(time.TimeOnly), after.UTC().Format(time.TimeOnly))
			}
			time.Sleep(3 * time.Second) // a few more drain checks: the line is not repeated
			if n := strings.Count(w.Output(), "draining:"); n != 1 {
				t.Errorf("the draining line came %d times:\n%s", n, w.Output())
			}
			w.Signal(syscall.SIGTERM)
			if code := w.Wait(t, 20*time.Second); code != 0 {
				t.Errorf("drain worker: exit %d", code)
			}
		})
	}
}

// Error chains read once: one clause per fact.
func TestErrorChainsReadOnce(t *testing.T) {
	env, p := appliedEnv(t, `
semaphores:
  s: {limit: 1, lease: 10s}
  full: {limit: 1, max_waiting: 0}
  k: {limit: 1, keyed: true}
cron:
  c: {schedule: "@daily", command: "true", semaphore: full}
`)
	flag := filepath.Join(t.TempDir(), "held")
	h1 := env.Start(t, "s holder", "sem", "run", "s", "-f", p, "--", "sh", "-c", "echo up > "+flag+"1; sleep 30")
	h2 := env.Start(t, "full holder", "sem", "run", "full", "-f", p, "--", "sh", "-c", "echo up > "+flag+"2; sleep 30")
	waitFile(t, flag+"1", 10*time.Second)
	waitFile(t, flag+"2", 10*time.Second)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"sem", "run", "s", "--no-wait", "--", "true"}, 75, "coordd sem run: s: not acquired: no free slot\n"},
		{[]string{"sem", "run", "s", "--wait", "300ms", "--", "true"}, 75, "coordd sem run: s: not acquired: no free slot in 300ms\n"},
		{[]string{"sem", "run", "full", "--", "true"}, 75, "coordd sem run: full: not acquired: 0 of 0 waiting: max_waiting reached\n"},
		{[]string{"sem", "run", "k", "--", "true"}, 125, "coordd sem run: semaphore \"k\" is keyed: give the instance's key with --key\n"},
		{[]string{"sem", "run", "s", "--key", "x", "--", "true"}, 125, "coordd sem run: semaphore \"s\" is not keyed: --key applies to one declared with keyed: true\n"},
		{[]string{"cron", "run", "c"}, 75, "coordd cron run: c: \"semaphore \\\"full\\\": not acquired: 0 of 0 waiting: max_waiting reached\"; recorded as failed\n"},
	} {
		args := append([]string{c.args[0], c.args[1], c.args[2], "-f", p}, c.args[3:]...)
		code, _, errs := runSplit(t, env.Command(args...))
		if code != c.code || errs != c.want {
			t.Errorf("coordd %s: exit %d, stderr\n%s\nwant exit %d, stderr\n%s", strings.Join(c.args, " "), code, errs, c.code, c.want)
		}
	}
	_, js, _ := runSplit(t, env.Command("cron", "history", "c", "-f", p, "--json"))
	var runs []struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal([]byte(js), &runs); err != nil || len(runs) != 1 || runs[0].Error != `semaphore "full": not acquired: 0 of 0 waiting: max_waiting reached` {
		t.Errorf("history (%v): %s", err, js)
	}
	h1.Signal(syscall.SIGTERM)
	h2.Signal(syscall.SIGTERM)
	h1.Wait(t, 20*time.Second)
	h2.Wait(t, 20*time.Second)
}

// A schedule of six fields is refused, naming the file, the line and the
// field that would be seconds.
func TestSixFieldScheduleRefused(t *testing.T) {
	c := newCLI(t)
	p := writeSpec(t, "cron:\n  t:\n    schedule: \"*/5 * * * * *\"\n    command: \"true\"\n")
	code, _, errs := c.run("", false, "validate", "-f", p)
	want := p + `:3:15: cron.t.schedule: "*/5 * * * * *" has 6 fields; a schedule has 5 (minute hour day-of-month month day-of-week), and the first of 6, "*/5", would be a seconds field, which coordd does not take: drop it ("* * * * *" runs at second 0), or write "@every D" for an interval under a minute` + "\n"
	if code != 1 || !strings.HasPrefix(errs, want) {
		t.Fatalf("validate: exit %d\n%s\nwant\n%s", code, errs, want)
	}
}

// plan shows when a new or changed cron task runs next, in its timezone.
func TestPlanShowsNextRun(t *testing.T) {
	c := newCLI(t)
	p := writeSpec(t, "cron:\n  t:\n    schedule: \"30 4 * * *\"\n    timezone: Asia/Tokyo\n    command: \"true\"\n")
	next := regexp.MustCompile(`(?m)^      next run: \d{4}-\d\d-\d\d 04:30:00 JST \(Asia/Tokyo\)$`)
	if code, out, errs := c.run("", false, "plan", "-f", p); code != 0 || !next.MatchString(out) {
		t.Fatalf("plan of a new task: %d\n%s\n%s", code, out, errs)
	}
	if code, _, errs := c.run("", false, "apply", "-f", p, "--auto-approve"); code != 0 {
		t.Fatalf("apply: %s", errs)
	}
	if _, out, _ := c.run("", false, "plan", "-f", p); strings.Contains(out, "next run") {
		t.Errorf("plan without changes shows a next run:\n%s", out)
	}
	changed := writeSpec(t, "cron:\n  t:\n    schedule: \"0 22 * * 1-5\"\n    timezone: Europe/Berlin\n    command: \"true\"\n")
	next = regexp.MustCompile(`(?m)^      next run: \d{4}-\d\d-\d\d 22:00:00 CES?T \(Europe/Berlin\)$`)
	if _, out, _ := c.run("", false, "plan", "-f", changed); !next.MatchString(out) {
		t.Errorf("plan of a changed task:\n%s", out)
	}
}

// status (and every command that reads a spec) without a spec says how to
// point at one.
func TestStatusWithoutSpec(t *testing.T) {
	env := proctest.NewEnv(t)
	missing := filepath.Join(t.TempDir(), "nothing-here")
	cmd := env.Command("status", "-f", missing)
	code, _, errs := runSplit(t, cmd)
	want := "coordd: no spec at " + missing + " (given with -f): point at a spec file or a directory of *.yaml files with -f PATH, or set COORDD_SPEC=PATH\n"
	if code != 1 || errs != want {
		t.Errorf("status -f missing: exit %d\n%s\nwant\n%s", code, errs, want)
	}
	cmd = env.Command("status")
	cmd.Env = append(cmd.Env, "COORDD_SPEC="+missing)
	if _, _, errs := runSplit(t, cmd); !strings.Contains(errs, "(from $COORDD_SPEC)") {
		t.Errorf("status with $COORDD_SPEC missing: %s", errs)
	}
}

// The quick start edits a copy of the example, never a tracked file.
func TestQuickstartEditsACopy(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	mk, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	start := strings.Index(string(readme), "## Quick start")
	end := strings.Index(string(readme)[start+1:], "\n## ")
	quick := string(readme)[start : start+1+end]
	for _, line := range strings.Split(quick, "\n") {
		if strings.Contains(line, "sed -i") && strings.Contains(line, "examples/") {
			t.Errorf("the quick start edits a tracked file: %s", line)
		}
	}
	if !strings.Contains(quick, "sed -i 's/limit: 2/limit: 5/' quickstart-spec/coordd.yaml") {
		t.Errorf("the quick start does not edit its copy:\n%s", quick)
	}
	if !strings.Contains(string(mk), "cp -R examples/quickstart quickstart-spec") || !strings.Contains(string(mk), "run -f quickstart-spec") {
		t.Errorf("make quickstart does not run on a copy of examples/quickstart")
	}
	ignore, _ := os.ReadFile(filepath.Join("..", "..", ".gitignore"))
	if !strings.Contains(string(ignore), "/quickstart-spec/") {
		t.Errorf(".gitignore does not ignore the quick start's copy")
	}
}

// User docs never say "seed NNN" (the articles coordd started from are not
// where users can read them) or "issue N" (the project's history, not the
// behaviour); operations.md's CI job installs coordd.
func TestUserDocsSelfContained(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	files = append(files, filepath.Join("..", "..", "README.md"))
	_ = filepath.WalkDir(examplesRoot(t), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, p)
		}
		return err
	})
	// A design cited by number, or the project's history (an issue number),
	// means nothing to a reader: the docs say the behaviour instead.
	history := regexp.MustCompile(`(?i)\b(seeds? ?\d{3}|issues? \d+)\b`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(b), "\n")
		for n, line := range lines {
			next := ""
			if n+1 < len(lines) {
				next = strings.TrimLeft(lines[n+1], "> \t")
			}
			// "seed" may end this line and its number start the next: check
			// the pair, leaving a match wholly on the next line to it.
			if m := history.FindString(line + " " + next); m != "" && !history.MatchString(next) || history.MatchString(line) {
				t.Errorf("%s:%d: says %q: %s", f, n+1, m, line)
			}
		}
	}
	ops, _ := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if !strings.Contains(string(ops), "      - run: go install github.com/coordd/coordd/cmd/coordd@") {
		t.Errorf("operations.md's CI job has no install step")
	}
	if regexp.MustCompile(`(?m)^\s+- run: X$`).Match(ops) {
		t.Errorf("operations.md's CI job has a placeholder step")
	}
}

// An example script run without COORDD_DATA_DIR removes the temp dir it
// made.
func TestExamplesRemoveTempDir(t *testing.T) {
	scripts, _ := filepath.Glob(filepath.Join(examplesRoot(t), "*", "run.sh"))
	for _, s := range scripts {
		b, _ := os.ReadFile(s)
		if strings.Contains(string(b), "mktemp") && (!strings.Contains(string(b), `rm -rf "$COORDD_DATA_DIR"`) || !exitTrap.Match(b)) {
			t.Errorf("%s makes a temp dir and does not remove it", s)
		}
	}
	tmp := t.TempDir()
	var env []string
	for _, kv := range scriptEnv(t, nil) {
		if !strings.HasPrefix(kv, "COORDD_DATA_DIR=") && !strings.HasPrefix(kv, "TMPDIR=") {
			env = append(env, kv)
		}
	}
	// One with the trap inline, one with a cleanup function.
	for _, ex := range []string{"thumbnails", "import-pool"} {
		cmd := exec.Command("bash", filepath.Join(examplesRoot(t), ex, "run.sh"))
		cmd.Env, cmd.Dir = append(env, "TMPDIR="+tmp), t.TempDir()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s/run.sh: %v\n%s", ex, err, out)
		}
		left, _ := os.ReadDir(tmp)
		if len(left) != 0 {
			t.Errorf("%s/run.sh left %d entries in TMPDIR, e.g. %s", ex, len(left), left[0].Name())
		}
	}
}

// exitTrap finds a shell trap on EXIT.
var exitTrap = regexp.MustCompile(`(?m)^\s*trap .+ EXIT`)

// Colours change no column: the coloured output, its escape codes taken
// out, is the plain output (tabwriter counts the codes as width, so a
// column painted in some rows only would shift).
func TestColourKeepsColumns(t *testing.T) {
	env, p := appliedEnv(t, `
semaphores:
  s: {limit: 1}
queues:
  q: {}
cron:
  bad: {schedule: "0 4 * * *", timezone: Asia/Tokyo, command: "exit 3"}
  good: {schedule: "@hourly", command: "true"}
`)
	for _, task := range []string{"bad", "good"} {
		if out, code := env.Run(t, "cron", "run", task, "-f", p); code != 0 && code != 3 {
			t.Fatalf("cron run %s: %d\n%s", task, code, out)
		}
	}
	ansi := regexp.MustCompile("\x1b\\[[0-9;]*m")
	for _, args := range [][]string{{"cron", "list"}, {"cron", "history", "bad"}, {"status"}, {"plan"}, {"sem", "status"}} {
		args = append(args, "-f", p)
		_, plain, _ := runSplit(t, env.Command(args...))
		cmd := env.Command(args...)
		cmd.Env = append(cmd.Env, "CLICOLOR_FORCE=1")
		_, coloured, _ := runSplit(t, cmd)
		if args[0] != "plan" && args[0] != "sem" && !strings.Contains(coloured, "\x1b[") {
			t.Errorf("coordd %s: no colour with CLICOLOR_FORCE=1:\n%s", strings.Join(args, " "), coloured)
		}
		// status shows ages that move between two runs; compare the rest.
		age := regexp.MustCompile(`seen \S+ ago`)
		if got := age.ReplaceAllString(ansi.ReplaceAllString(coloured, ""), ""); got != age.ReplaceAllString(plain, "") {
			t.Errorf("coordd %s: coloured output, codes removed:\n%s\nplain:\n%s", strings.Join(args, " "), got, plain)
		}
	}
}

// More chains that read once: a spec that is not there is one line, not a
// second "the spec is invalid"; a backend that cannot be reached is named
// once; a task that is not applied says so once, without ": not found".
func TestErrorChainsReadOnceAtStart(t *testing.T) {
	env := proctest.NewEnv(t)
	missing := filepath.Join(t.TempDir(), "none.yaml")
	for _, args := range [][]string{{"sem", "run", "s", "-f", missing, "--", "true"}, {"queue", "push", "q", "-f", missing, "x"}} {
		_, _, errs := runSplit(t, env.Command(args...))
		if want := "coordd: no spec at " + missing + " (given with -f): point at a spec file or a directory of *.yaml files with -f PATH, or set COORDD_SPEC=PATH\n"; errs != want {
			t.Errorf("coordd %s: stderr\n%s\nwant\n%s", strings.Join(args, " "), errs, want)
		}
	}
	for typ, decl := range map[string]string{
		"mysql":    `{type: mysql, dsn: "root@tcp(127.0.0.1:1)/x"}`,
		"postgres": `{type: postgres, dsn: "postgres://postgres@127.0.0.1:1/x?sslmode=disable"}`,
	} {
		unreachable := writeSpec(t, "backends:\n  db: "+decl+"\nsemaphores:\n  s: {limit: 1, backend: db}\n")
		opened := "open " + typ + " \"db\" at 127.0.0.1:1/x: dial tcp 127.0.0.1:1: connect: connection refused\n"
		code, _, errs := runSplit(t, env.Command("sem", "run", "s", "-f", unreachable, "--", "true"))
		if want := "coordd sem run: " + opened; code != 125 || errs != want {
			t.Errorf("sem run on an unreachable %s backend: exit %d, stderr\n%s\nwant\n%s", typ, code, errs, want)
		}
		if _, _, errs := runSplit(t, env.Command("status", "-f", unreachable)); errs != "coordd: "+opened {
			t.Errorf("status on an unreachable %s backend: %s", typ, errs)
		}
	}
	unapplied := writeSpec(t, "cron:\n  c: {schedule: \"@daily\", command: \"true\"}\n")
	code, _, errs := runSplit(t, env.Command("cron", "run", "c", "-f", unapplied))
	if want := "coordd cron run: cron task \"c\" is not applied on backend \"embedded\"; run coordd apply\n"; code != 125 || errs != want {
		t.Errorf("cron run of a task not applied: exit %d, stderr\n%s\nwant\n%s", code, errs, want)
	}
}

// TestCronHistoryShowsOutput: a failed run's output, its stderr included,
// is in cron history --json always and in the text with --output, each
// line escaped; without --output the text has the table alone.
func TestCronHistoryShowsOutput(t *testing.T) {
	env, p := appliedEnv(t, `
cron:
  report:
    schedule: "0 4 * * *"
    command: 'echo building; printf "cannot reach db\033[2J\n" >&2; exit 2'
`)
	if out, code := env.Run(t, "cron", "run", "report", "-f", p); code != 2 {
		t.Fatalf("cron run: exit %d\n%s", code, out)
	}
	_, js, _ := runSplit(t, env.Command("cron", "history", "report", "-f", p, "--json"))
	var runs []struct {
		Status, Output string
	}
	// stdout and stderr are two pipes: their lines may come in either order.
	if err := json.Unmarshal([]byte(js), &runs); err != nil || len(runs) != 1 || runs[0].Status != "failed" || len(runs[0].Output) != 29 ||
		!strings.Contains(runs[0].Output, "building\n") || !strings.Contains(runs[0].Output, "cannot reach db\x1b[2J\n") {
		t.Fatalf("history --json (%v): %+v\n%s", err, runs, js)
	}
	_, text, _ := runSplit(t, env.Command("cron", "history", "report", "-f", p))
	if strings.Contains(text, "cannot reach db") {
		t.Errorf("history without --output prints the output:\n%s", text)
	}
	_, text, _ = runSplit(t, env.Command("cron", "history", "report", "-f", p, "--output"))
	for _, want := range []string{"attempt 1, failed, 29 bytes of output ---\n", "\nbuilding\n", "\n\"cannot reach db\\x1b[2J\"\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("history --output lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "\x1b") {
		t.Errorf("history --output prints a raw escape:\n%q", text)
	}
}
