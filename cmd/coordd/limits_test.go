package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/open"
	"github.com/coordd/coordd/backends/sqlite"
	"github.com/coordd/coordd/spec"
)

// runWithHostname is cli.run with a stand-in for os.Hostname.
func (c *cli) runWithHostname(hostname func() (string, error), args ...string) (code int, stdout, stderr string) {
	c.t.Helper()
	var out, errb bytes.Buffer
	env := &cliEnv{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: os.Getenv, hostname: hostname}
	code = run(context.Background(), env, args)
	return code, out.String(), errb.String()
}

const limitsSpec = `
semaphores:
  s: {limit: 2, lease: 1m}
cron:
  job: {schedule: "0 4 * * *", command: "true"}
queues:
  q: {max_attempts: 1}
`

// TestQueuePushKeyLimits: the key limits are the same on every backend and
// checked before any backend is touched, so that the embedded store does
// not take a 300-byte or invalid UTF-8 key that MySQL refuses.
func TestQueuePushKeyLimits(t *testing.T) {
	c := newCLI(t)
	p := queueFixture(t, c, "{}")
	for _, tc := range []struct{ key, want string }{
		{strings.Repeat("k", 300), "at most 255 bytes, this one has 300"},
		{strings.Repeat("k", 256), "at most 255 bytes, this one has 256"},
		{"\xbf'", "valid UTF-8"},
		{"a\nb", "control characters"},
		{"\x1b[2J", "control characters"},
	} {
		code, _, errs := c.run("", false, "queue", "push", "q", "-f", p, "--key", tc.key, "x")
		if code != 1 || !strings.Contains(errs, "--key: invalid job key") || !strings.Contains(errs, tc.want) {
			t.Errorf("push --key %q: exit %d, stderr %q; want 1 and %q", tc.key, code, errs, tc.want)
		}
		if strings.ContainsAny(errs, "\x1b") || strings.Contains(errs, "a\nb") {
			t.Errorf("push --key %q: the error echoes the key raw: %q", tc.key, errs)
		}
	}
	if st := queueStatsOf(t, c, p); st.Ready != 0 {
		t.Fatalf("refused pushes left %d ready jobs", st.Ready)
	}
	key := strings.Repeat("a", spec.MaxKeyLen-2) + "é"
	if code, _, errs := c.run("", false, "queue", "push", "q", "-f", p, "--key", key, "x"); code != 0 {
		t.Fatalf("push of a 255-byte key: exit %d, %s", code, errs)
	}
}

// TestHostIDFlagChecked: every command with --host-id refuses an invalid
// one before it opens a backend, with its usage-error exit code (125 for
// the commands that run a child, whose own codes pass through; 1
// otherwise), and says what is wrong without echoing it raw: a host id with a newline
// and terminal escapes is never stored as is.
func TestHostIDFlagChecked(t *testing.T) {
	c := newCLI(t)
	p := writeSpec(t, limitsSpec)
	if code, _, errs := c.run("", false, "apply", "-f", p, "--auto-approve"); code != 0 {
		t.Fatalf("apply: %s", errs)
	}
	bad := "a\n\x1b[2J"
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"sem", "run", "s", "-f", p, "--host-id", bad, "--", "true"}, 125},
		{[]string{"cron", "run", "job", "-f", p, "--host-id", bad}, 125},
		{[]string{"queue", "work", "q", "-f", p, "--drain", "--host-id", bad, "--", "true"}, 1},
		{[]string{"status", "-f", p, "--host-id", bad}, 1},
		{[]string{"run", "-f", p, "--host-id", bad}, 1},
		{[]string{"sem", "run", "s", "-f", p, "--host-id", strings.Repeat("h", spec.MaxHostIDLen+1), "--", "true"}, 125},
	} {
		code, _, errs := c.run("", false, tc.args...)
		if code != tc.code || !strings.Contains(errs, "--host-id: invalid host id") || strings.Contains(errs, "\x1b") {
			t.Errorf("%s: exit %d, stderr %q; want %d and a clear, escaped error", strings.Join(tc.args[:2], " "), code, errs, tc.code)
		}
	}
	code, out, errs := c.run("", false, "cron", "history", "job", "-f", p, "--json")
	if code != 0 || strings.TrimSpace(out) != "[]" {
		t.Fatalf("cron history after refused runs: exit %d, %s %s", code, out, errs)
	}
}

// TestDefaultHostnameInvalid: a hostname that is not a valid host id is
// not used silently: the error says to pass --host-id, and passing it
// works.
func TestDefaultHostnameInvalid(t *testing.T) {
	c := newCLI(t)
	p := writeSpec(t, limitsSpec)
	if code, _, errs := c.run("", false, "apply", "-f", p, "--auto-approve"); code != 0 {
		t.Fatalf("apply: %s", errs)
	}
	for _, hn := range []func() (string, error){
		func() (string, error) { return "my host\n", nil },
		func() (string, error) { return "", errors.New("uname failed") },
	} {
		code, _, errs := c.runWithHostname(hn, "status", "-f", p)
		if code != 1 || !strings.Contains(errs, "pass --host-id") {
			t.Errorf("status with a bad hostname: exit %d, %q", code, errs)
		}
		code, _, errs = c.runWithHostname(hn, "sem", "run", "s", "-f", p, "--", "true")
		if code != 125 || !strings.Contains(errs, "pass --host-id") {
			t.Errorf("sem run with a bad hostname: exit %d, %q", code, errs)
		}
		if code, _, errs := c.runWithHostname(hn, "status", "-f", p, "--host-id", "web1"); code != 0 {
			t.Errorf("status --host-id web1 with a bad hostname: exit %d, %s", code, errs)
		}
	}
}

// hostile is what a hostile host (or an old binary) may have written to a
// shared store: a newline that forges a line, a clear-screen escape, a C1
// CSI, DEL and a byte that is not UTF-8.
const hostile = "evil\n\x1b[2JFORGED\u009b\x7f\xff"

// TestStoreValuesPrintedEscaped: values read from a store are printed
// escaped, in text and in JSON. The records are written behind the CLI's
// back, as a hostile host would, since the backends now refuse such host
// ids and keys themselves.
func TestStoreValuesPrintedEscaped(t *testing.T) {
	c := newCLI(t)
	p := writeSpec(t, limitsSpec)
	if code, _, errs := c.run("", false, "apply", "-f", p, "--auto-approve"); code != 0 {
		t.Fatalf("apply: %s", errs)
	}
	writeHostileRecords(t, p)

	for _, args := range [][]string{
		{"status", "--host-id", "web1"},
		{"sem", "status"},
		{"cron", "list"},
		{"cron", "history", "job"},
		{"queue", "dead", "q"},
		{"queue", "stats"},
	} {
		args = append(args, "-f", p)
		code, out, errs := c.run("", false, args...)
		if code != 0 {
			t.Fatalf("%s: exit %d, %s", strings.Join(args, " "), code, errs)
		}
		what := strings.Join(args[:2], " ")
		checkNoRawControls(t, what, out)
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "FORGED") {
				t.Errorf("%s: a stored newline forged the line %q", what, line)
			}
		}
		if args[0] != "queue" || args[1] != "stats" {
			if !strings.Contains(out, `"evil\n\x1b[2JFORGED\u009b\x7f\xff"`) {
				t.Errorf("%s: the hostile value is not shown escaped:\n%s", what, out)
			}
		}
		code, out, errs = c.run("", false, append(args, "--json")...)
		if code != 0 || !json.Valid([]byte(out)) {
			t.Fatalf("%s --json: exit %d, %s\n%s", what, code, errs, out)
		}
		checkNoRawControls(t, what+" --json", out)
	}
}

// checkNoRawControls fails on any byte of hostile that moves the cursor or
// starts an escape.
func checkNoRawControls(t *testing.T, what, out string) {
	t.Helper()
	for _, bad := range []string{"\x1b", "\u009b", "\x7f", "\xff"} {
		if strings.Contains(out, bad) {
			t.Errorf("%s: output holds a raw %q:\n%q", what, bad, out)
		}
	}
}

// writeHostileRecords puts hostile values in every field the printing
// commands show from the embedded store.
func writeHostileRecords(t *testing.T, specPath string) {
	t.Helper()
	ctx := t.Context()
	s, ok := loadSpec(context.Background(), &cliEnv{stderr: os.Stderr}, specPath, false)
	if !ok {
		t.Fatal("load spec")
	}
	b, err := open.Open(ctx, s.Backends[spec.DefaultBackendName], backends.Options{Version: "0.1.0"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	st := b.(*sqlite.Store)
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := st.DB().ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if _, err := st.TryAcquire(ctx, backends.SemRef{Name: "s"}, backends.AcquireRequest{Owner: "o1", Host: "web1", PID: 1, Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	exec(`UPDATE semaphore_slots SET host = ? WHERE owner = 'o1'`, hostile)
	if err := st.Heartbeat(ctx, backends.HostRecord{Host: "web1", RunID: "r", Version: "v", SpecHash: "h", HeartbeatEvery: time.Minute}); err != nil {
		t.Fatal(err)
	}
	exec(`UPDATE hosts SET host = ?, version = ?, spec_hash = ?`, hostile, hostile, hostile)
	if _, err := st.ElectLeader(ctx, hostile, time.Minute); err != nil {
		t.Fatal(err)
	}
	exec(`UPDATE apply_log SET host = ?`, hostile)
	exec(`INSERT INTO cron_occurrences (task, scheduled_at, attempt, run_id, fencing, owner, host, status, started_at, expires_at, finished_at, exit_code, error, output)
VALUES ('job', 1, 1, 'r', 1, 'o', ?, ?, 1, 1, 2, 1, ?, ?)`, hostile, hostile, hostile, []byte(hostile))
	exec(`INSERT INTO queue_jobs (queue, partition, payload, unique_key, attempt, state, available_at, enqueued_at, last_error)
VALUES ('q', 0, x'', ?, 1, 'dead', 0, 0, ?)`, hostile, hostile)
}

// TestSemKeyLimitsSaySemaphoreKey: a refused key of a keyed semaphore was
// reported as "invalid job key"; it is a semaphore key, and the error says
// so, for sem run and sem status.
func TestSemKeyLimitsSaySemaphoreKey(t *testing.T) {
	c := newCLI(t)
	p := writeSpec(t, "semaphores:\n  s: {limit: 1, keyed: true}\n")
	for _, tc := range []struct{ key, want string }{
		{strings.Repeat("k", 300), "--key: invalid semaphore key"},
		{"a\nb", "--key: invalid semaphore key"},
		{"\x1b[2J", "a key holds no control characters"},
	} {
		for _, args := range [][]string{{"sem", "run", "s", "-f", p, "--key", tc.key, "--", "true"}, {"sem", "status", "s", "-f", p, "--key", tc.key}} {
			code, _, errs := c.run("", false, args...)
			if code == 0 || !strings.Contains(errs, tc.want) || strings.Contains(errs, "job key") {
				t.Errorf("%s %s --key %q: exit %d, stderr %q; want %q", args[0], args[1], tc.key, code, errs, tc.want)
			}
			if strings.ContainsAny(errs, "\x1b") {
				t.Errorf("%s %s --key %q: the error echoes the key raw: %q", args[0], args[1], tc.key, errs)
			}
		}
	}
}
