package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/proctest"
)

// freeAddr is a localhost address nothing listens on right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// scrape returns the /metrics text of the daemon at addr ("" on error).
func scrape(addr string) string {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// pausedObject is cron.t as `status --json` shows it.
func pausedObject(t *testing.T, env *proctest.Env, specPath string) objectStatus {
	t.Helper()
	out, code := env.Run(t, "status", "-f", specPath, "--json")
	var st statusReport
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil {
		t.Fatalf("status --json: %d\n%s", code, out)
	}
	for _, o := range st.Objects {
		if o.Address == "cron.t" {
			return o
		}
	}
	t.Fatalf("status lists no cron.t:\n%s", out)
	return objectStatus{}
}

// TestCronPauseResume runs the daemon on the embedded store with a task t
// due every second and a task u beside it (its runs show that the
// scheduler keeps making passes). coordd cron pause stops t's runs while
// u's go on; status, cron list, plan and /metrics show the pause; resume
// starts t again, the missed times following catch_up once (one skip
// record). With paused: true in the spec, resume says git keeps it paused
// and exits 1.
func TestCronPauseResume(t *testing.T) {
	dir := t.TempDir()
	tLog, uLog := filepath.Join(dir, "t.log"), filepath.Join(dir, "u.log")
	cron := `cron:
  t: {backend: db, schedule: "@every 1s", command: 'echo ran >> ` + tLog + `'}
  u: {backend: db, schedule: "@every 1s", command: 'echo ran >> ` + uLog + `'}
`
	head := clusterBackend(t, "sqlite")
	specPath := writeSpec(t, head+cron)
	env := proctest.NewEnv(t)
	if out, code := env.Run(t, "apply", "-f", specPath, "--auto-approve"); code != 0 {
		t.Fatalf("apply: %s", out)
	}
	addr := freeAddr(t)
	d := env.Start(t, "daemon", "run", "-f", specPath, "--host-id", "solo", "--listen", addr, "--shutdown-grace", "5s")
	defer func() {
		d.Signal(syscall.SIGTERM)
		d.Wait(t, 30*time.Second)
	}()
	waitFile(t, tLog, 30*time.Second)

	out, code := env.Run(t, "cron", "pause", "t", "-f", specPath, "--reason", "incident 7: disk full", "--host-id", "ops-1")
	if code != 0 || !strings.Contains(out, "cron.t paused by ops-1 at ") || !strings.Contains(out, "incident 7: disk full") {
		t.Fatalf("cron pause: exit %d\n%s", code, out)
	}
	// u runs on; t stops once a run claimed before the pause is done.
	uRuns := func(n int) {
		t.Helper()
		at := countLines(uLog)
		proctest.Eventually(t, 30*time.Second, "u to run again", func() bool { return countLines(uLog) >= at+n })
	}
	uRuns(2)
	paused := countLines(tLog)
	uRuns(3)
	if n := countLines(tLog); n != paused {
		t.Fatalf("t ran %d more times while paused (u kept running)", n-paused)
	}

	o := pausedObject(t, env, specPath)
	if o.Paused == nil || !*o.Paused || o.Pause == nil || o.Pause.Host != "ops-1" || o.Pause.Reason != "incident 7: disk full" || o.Pause.At.IsZero() {
		t.Fatalf("status --json shows cron.t as %+v, want paused by ops-1 with the reason and a time", o)
	}
	if out, _ := env.Run(t, "status", "-f", specPath); !strings.Contains(out, "paused (by ops-1)") || !strings.Contains(out, "cron.t paused by ops-1 at ") {
		t.Fatalf("status does not show the pause:\n%s", out)
	}
	out, _ = env.Run(t, "cron", "list", "-f", specPath, "--json")
	var list []cronListJSON
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list) != 2 || !list[0].Paused || list[0].Pause == nil || list[1].Paused {
		t.Fatalf("cron list --json: %v\n%s", err, out)
	}
	if out, _ := env.Run(t, "cron", "list", "-f", specPath); !strings.Contains(out, "paused (by ops-1)") {
		t.Fatalf("cron list does not show the pause:\n%s", out)
	}
	out, code = env.Run(t, "plan", "-f", specPath)
	if code != 0 || !strings.Contains(out, "Operator overrides (not drift; apply keeps them):") || !strings.Contains(out, "No changes.") {
		t.Fatalf("plan: exit %d\n%s", code, out)
	}
	proctest.Eventually(t, 20*time.Second, "coordd_cron_paused 1 for t", func() bool {
		m := scrape(addr)
		return strings.Contains(m, `coordd_cron_paused{backend="db",task="t"} 1`) && strings.Contains(m, `coordd_cron_paused{backend="db",task="u"} 0`)
	})
	if out, code := env.Run(t, "cron", "pause", "t", "-f", specPath, "--reason", "again"); code != 0 || !strings.Contains(out, "already paused by ops-1") {
		t.Fatalf("second pause: exit %d\n%s", code, out)
	}

	out, code = env.Run(t, "cron", "resume", "t", "-f", specPath)
	if code != 0 || !strings.Contains(out, "removed the pause by ops-1") || !strings.Contains(out, "catch_up once") {
		t.Fatalf("cron resume: exit %d\n%s", code, out)
	}
	// The daemon notices within its poll (20 s).
	proctest.Eventually(t, 40*time.Second, "t to run again after the resume", func() bool { return countLines(tLog) > paused })
	out, _ = env.Run(t, "cron", "history", "t", "-f", specPath, "--json", "--limit", "0")
	if !strings.Contains(out, "catch_up once: skipped") {
		t.Fatalf("no catch_up once skip record after the resume:\n%s", out)
	}
	if o := pausedObject(t, env, specPath); o.Paused == nil || *o.Paused || o.Pause != nil {
		t.Fatalf("status after the resume: %+v, want not paused", o)
	}

	// Declared in git: resume cannot lift it.
	writeFileT(t, specPath, head+strings.Replace(cron, "command: 'echo ran >> "+tLog+"'", "paused: true, command: 'echo ran >> "+tLog+"'", 1))
	if out, code := env.Run(t, "apply", "-f", specPath, "--auto-approve"); code != 0 {
		t.Fatalf("apply paused: true: %s", out)
	}
	if o := pausedObject(t, env, specPath); o.Paused == nil || !*o.Paused || !o.PausedInSpec || o.Pause != nil {
		t.Fatalf("status with paused: true: %+v", o)
	}
	code, stdout, stderr := runCapture(t, env, "cron", "resume", "t", "-f", specPath)
	if code != 1 || !strings.Contains(stderr, "stays paused: git says so") || !strings.Contains(stderr, "remove paused: true") {
		t.Fatalf("resume of a task paused in the spec: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}

// runCapture runs the binary with args and returns its exit code, stdout
// and stderr apart.
func runCapture(t *testing.T, env *proctest.Env, args ...string) (int, string, string) {
	t.Helper()
	cmd := env.Command(args...)
	var out, errs strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errs
	err := cmd.Run()
	if err != nil && cmd.ProcessState == nil {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errs.String()
}

// TestCronPauseBeforeApply: a pause of a task declared but never applied
// (the store has no schema yet) says to apply first, as a pause of a task
// missing from an applied store does, rather than "schema not migrated".
func TestCronPauseBeforeApply(t *testing.T) {
	c := newCLI(t)
	p := writeSpec(t, "cron:\n  t: {schedule: \"@every 1m\", command: [\"true\"]}\n")
	for _, args := range [][]string{
		{"cron", "pause", "t", "-f", p, "--reason", "incident"},
		{"cron", "resume", "t", "-f", p},
	} {
		code, _, stderr := c.run("", false, args...)
		if code == 0 || !strings.Contains(stderr, `cron task "t" is not applied`) || !strings.Contains(stderr, "run coordd apply") {
			t.Fatalf("%v: exit %d, stderr %q; want not applied, run coordd apply", args, code, stderr)
		}
	}
}
