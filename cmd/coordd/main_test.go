package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// cli runs coordd in-process with its own data dir.
type cli struct {
	t       *testing.T
	dataDir string
}

func newCLI(t *testing.T) *cli {
	t.Helper()
	c := &cli{t: t, dataDir: t.TempDir()}
	t.Setenv("COORDD_DATA_DIR", c.dataDir)
	return c
}

func (c *cli) run(stdin string, terminal bool, args ...string) (code int, stdout, stderr string) {
	c.t.Helper()
	var out, errb bytes.Buffer
	env := &cliEnv{
		stdin: strings.NewReader(stdin), stdout: &out, stderr: &errb,
		getenv: os.Getenv, isTerminal: terminal,
	}
	code = run(context.Background(), env, args)
	return code, out.String(), errb.String()
}

func writeSpec(t *testing.T, yaml string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "coordd.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const good = `
semaphores:
  s: {limit: 2}
`

func TestParseArgsInterspersed(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	a := fs.Bool("a", false, "")
	w := fs.String("wait", "", "")
	pos, rest, err := parseArgs(fs, []string{"NAME", "-a", "--wait", "5s", "--", "cmd", "-a"})
	if err != nil {
		t.Fatal(err)
	}
	if !*a || *w != "5s" || !reflect.DeepEqual(pos, []string{"NAME"}) || !reflect.DeepEqual(rest, []string{"cmd", "-a"}) {
		t.Fatalf("a=%v wait=%q pos=%v rest=%v", *a, *w, pos, rest)
	}
}

func TestValidate(t *testing.T) {
	c := newCLI(t)
	code, out, _ := c.run("", false, "validate", writeSpec(t, good), "-f", writeSpec(t, good))
	if code != 1 {
		t.Fatalf("a stray positional must be an error, got %d (%s)", code, out)
	}
	p := writeSpec(t, good)
	if code, out, errs := c.run("", false, "validate", "-f", p); code != 0 || !strings.Contains(out, "valid") {
		t.Fatalf("validate good: %d %q %q", code, out, errs)
	}
	bad := writeSpec(t, "semaphores:\n  s: {limit: 0, limt: 3}\n")
	code, _, errs := c.run("", false, "validate", "--file", bad)
	if code != 1 {
		t.Fatalf("validate bad: exit %d", code)
	}
	// Every error, each with FILE:LINE:COL.
	if !strings.Contains(errs, bad+":2:") || strings.Count(errs, bad+":") < 2 {
		t.Fatalf("errors lack positions or are incomplete:\n%s", errs)
	}
}

func TestValidateSkipEnvNeverConnects(t *testing.T) {
	c := newCLI(t)
	p := writeSpec(t, `
backends:
  db: {type: mysql, dsn: "coordd:${COORDD_TEST_UNSET_PASSWORD}@tcp(127.0.0.1:1)/coordd"}
semaphores:
  s: {limit: 1}
`)
	if code, _, errs := c.run("", false, "validate", "-f", p); code != 1 || !strings.Contains(errs, "COORDD_TEST_UNSET_PASSWORD") {
		t.Fatalf("missing env var: %d %s", code, errs)
	}
	if code, _, errs := c.run("", false, "validate", "-f", p, "--skip-env"); code != 0 {
		t.Fatalf("--skip-env: %d %s", code, errs)
	}
}

func TestPlanApplyFlow(t *testing.T) {
	c := newCLI(t)
	p := writeSpec(t, good)
	code, out, errs := c.run("", false, "plan", "-f", p, "--detailed-exitcode")
	if code != 2 || !strings.Contains(out, "Plan: 1 to add, 0 to change, 0 to destroy.") {
		t.Fatalf("plan: %d\n%s\n%s", code, out, errs)
	}
	// No terminal, no --auto-approve: refuse.
	if code, _, errs := c.run("", false, "apply", "-f", p); code != 1 || !strings.Contains(errs, "--auto-approve") {
		t.Fatalf("apply without approval: %d %s", code, errs)
	}
	// A terminal that answers anything but "yes" cancels.
	if code, out, _ := c.run("no\n", true, "apply", "-f", p); code != 1 || !strings.Contains(out, "cancelled") {
		t.Fatalf("apply answered no: %d %s", code, out)
	}
	if code, out, errs := c.run("yes\n", true, "apply", "-f", p); code != 0 || !strings.Contains(out, "Apply complete! Resources: 1 added") {
		t.Fatalf("apply answered yes: %d\n%s\n%s", code, out, errs)
	}
	if code, out, _ := c.run("", false, "plan", "-f", p, "--detailed-exitcode"); code != 0 || !strings.Contains(out, "No changes.") {
		t.Fatalf("plan after apply: %d %s", code, out)
	}
	if code, out, _ := c.run("", false, "plan", "-f", p, "--json"); code != 0 || !strings.Contains(out, `"has_changes": false`) {
		t.Fatalf("plan --json: %d %s", code, out)
	}
	// An empty spec is refused, and says how to override.
	empty := writeSpec(t, "# nothing\n")
	if code, _, errs := c.run("", false, "apply", "-f", empty, "--auto-approve"); code != 1 || !strings.Contains(errs, "refused") {
		t.Fatalf("empty apply: %d %s", code, errs)
	}
	if code, out, errs := c.run("", false, "apply", "--auto-approve", "-f", empty, "--allow-empty"); code != 0 || !strings.Contains(out, "1 destroyed") {
		t.Fatalf("empty apply allowed: %d\n%s\n%s", code, out, errs)
	}
}

func TestHelpAndVersion(t *testing.T) {
	c := newCLI(t)
	for _, cmd := range []string{"validate", "plan", "apply", "version"} {
		if code, out, _ := c.run("", false, cmd, "--help"); code != 0 || !strings.Contains(out, "Usage: coordd "+cmd) {
			t.Errorf("%s --help: %d %s", cmd, code, out)
		}
	}
	if code, out, _ := c.run("", false, "version"); code != 0 || !strings.Contains(out, "go1.") {
		t.Fatalf("version: %d %s", code, out)
	}
	if code, _, _ := c.run("", false, "nope"); code != 1 {
		t.Fatalf("unknown command: %d", code)
	}
}

func TestStatus(t *testing.T) {
	c := newCLI(t)
	p := writeSpec(t, `
semaphores:
  s: {limit: 2}
cron:
  t: {schedule: "@daily", timezone: Asia/Tokyo, command: "true"}
queues:
  q: {partitions: 2}
`)
	if code, out, errs := c.run("", false, "status", "-f", p); code != 0 || !strings.Contains(out, "nothing applied yet") || !strings.Contains(out, "semaphore.s") || !strings.Contains(out, "not applied") {
		t.Fatalf("status before apply: %d\n%s\n%s", code, out, errs)
	}
	// Which store it read, and that it does not exist yet.
	if _, out, _ := c.run("", false, "status", "-f", p); !strings.Contains(out, "Store:     ") || !strings.Contains(out, "coordd.db (no such file yet") {
		t.Errorf("status before apply does not name the missing store file:\n%s", out)
	}
	if code, _, errs := c.run("", false, "apply", "-f", p, "--auto-approve"); code != 0 {
		t.Fatalf("apply: %s", errs)
	}
	code, out, errs := c.run("", false, "status", "-f", p, "--host-id", "web3")
	if code != 0 {
		t.Fatalf("status: %d %s", code, errs)
	}
	if strings.Contains(out, "no such file") {
		t.Errorf("status after apply says the store is missing:\n%s", out)
	}
	// The next run in the task's zone, as cron list prints it.
	for _, want := range []string{"Leader:    none", "This host: web3", "limit 2", "holders 0", "cron.t", "00:00:00 JST", "never ran", "queue.q", "ready 0"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "Warning") {
		t.Errorf("status warns right after apply:\n%s", out)
	}
	// A changed local spec is reported as differing from the applied one.
	p2 := writeSpec(t, "semaphores:\n  s: {limit: 3}\n")
	if _, out, _ := c.run("", false, "status", "-f", p2); !strings.Contains(out, "differs from the applied one") {
		t.Errorf("no hash warning:\n%s", out)
	}
	if _, out, _ := c.run("", false, "status", "-f", p, "--json"); !strings.Contains(out, `"local_spec_hash"`) {
		t.Errorf("json: %s", out)
	}
}
