package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/proctest"
)

// cronRunning is the running count of cron task t in `status --json`.
func cronRunning(t *testing.T, env *proctest.Env, specPath string) int {
	t.Helper()
	out, code := env.Run(t, "status", "-f", specPath, "--json")
	var st statusReport
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil {
		t.Fatalf("status --json: %d\n%s", code, out)
	}
	for _, o := range st.Objects {
		if o.Address == "cron.t" && o.Running != nil {
			return *o.Running
		}
	}
	t.Fatalf("status lists no running count for cron.t:\n%s", out)
	return 0
}

// TestPromiseCronSemaphoreWaitCountsAsRunning: operations.md, "A task that
// never runs": "A task with `semaphore:` waits for a slot before its
// command starts, with no time limit, and counts as running meanwhile".
// While a `sem run` holds the only slot, the task's occurrence waits:
// status shows it running, later times are skipped (overlap forbid),
// `cron run` exits 75, and the command has not run; once the slot is
// free the waiting occurrence runs. On every backend that holds cron
// tasks.
func TestPromiseCronSemaphoreWaitCountsAsRunning(t *testing.T) {
	for _, typ := range childVarBackends {
		t.Run(typ, func(t *testing.T) {
			dir := t.TempDir()
			ran, stop := filepath.Join(dir, "ran"), filepath.Join(dir, "stop")
			specPath := writeSpec(t, clusterBackend(t, typ)+`semaphores:
  s: {backend: db, limit: 1, lease: 10s, max_hold: 1h}
cron:
  t: {backend: db, schedule: "@every 1s", semaphore: s, command: 'echo ran >> `+ran+`'}
`)
			env := proctest.NewEnv(t)
			if out, code := env.Run(t, "apply", "-f", specPath, "--auto-approve"); code != 0 {
				t.Fatalf("apply: %s", out)
			}
			held := filepath.Join(dir, "held")
			holder := env.Start(t, "holder", "sem", "run", "s", "-f", specPath, "--",
				"sh", "-c", "echo held > "+held+"; while [ ! -e "+stop+" ]; do sleep 0.05; done")
			waitFile(t, held, 20*time.Second)

			d := env.Start(t, "daemon", "run", "-f", specPath, "--host-id", "solo", "--shutdown-grace", "5s")
			defer func() {
				d.Signal(syscall.SIGTERM)
				d.Wait(t, 30*time.Second)
			}()
			proctest.Eventually(t, 30*time.Second, "the occurrence running, waiting for the slot", func() bool {
				return cronRunning(t, env, specPath) == 1
			})
			proctest.Eventually(t, 30*time.Second, "a later time skipped", func() bool {
				out, _ := env.Run(t, "cron", "history", "t", "-f", specPath)
				return strings.Contains(out, "skipped")
			})
			if out, code := env.Run(t, "cron", "run", "t", "-f", specPath); code != 75 {
				t.Fatalf("cron run while the occurrence waits: exit %d, want 75\n%s", code, out)
			}
			if n := cronRunning(t, env, specPath); n != 1 {
				t.Fatalf("running %d while the occurrence still waits, want 1", n)
			}
			if _, err := os.Stat(ran); err == nil {
				t.Fatal("the task's command ran while sem run held the only slot")
			}

			writeFileT(t, stop, "")
			if code := holder.Wait(t, 20*time.Second); code != 0 {
				t.Fatalf("holder exited %d", code)
			}
			waitFile(t, ran, 30*time.Second)
		})
	}
}

// TestPromiseTaskEnvGivesWay: spec.md, "Variables coordd sets": "A cron
// task's env entry of one of these names gives way to coordd's value where
// coordd sets one." The task's own COORDD_TASK, COORDD_ATTEMPT and
// COORDD_FENCING_TOKEN lose to coordd's; its COORDD_SLOT, which coordd
// does not set for a task without a semaphore, and its other entries stay.
// For `cron run` and for the daemon's runs.
func TestPromiseTaskEnvGivesWay(t *testing.T) {
	c := newCLI(t)
	p := writeSpec(t, clusterBackend(t, "sqlite")+`cron:
  t:
    schedule: "@every 1s"
    command: env
    env: {COORDD_TASK: fake, COORDD_ATTEMPT: "99", COORDD_FENCING_TOKEN: "1", COORDD_SLOT: "9", MINE: kept}
`)
	if code, _, errs := c.run("", false, "apply", "-f", p, "--auto-approve"); code != 0 {
		t.Fatalf("apply: %s", errs)
	}
	check := func(what, out string) {
		t.Helper()
		got := parseEnv(out)
		if got["COORDD_TASK"] != "t" || got["COORDD_ATTEMPT"] != "1" || got["MINE"] != "kept" || got["COORDD_SLOT"] != "9" {
			t.Errorf("%s: COORDD_TASK=%q COORDD_ATTEMPT=%q COORDD_SLOT=%q MINE=%q; want t, 1, the task's 9 and kept",
				what, got["COORDD_TASK"], got["COORDD_ATTEMPT"], got["COORDD_SLOT"], got["MINE"])
		}
		if f := got["COORDD_FENCING_TOKEN"]; f == "1" || f != got["COORDD_TASK_FENCING_TOKEN"] {
			t.Errorf("%s: COORDD_FENCING_TOKEN=%q, want coordd's (the task's number %q)", what, f, got["COORDD_TASK_FENCING_TOKEN"])
		}
	}
	code, out, errs := c.run("", false, "cron", "run", "t", "-f", p)
	if code != 0 {
		t.Fatalf("cron run: %d %s", code, errs)
	}
	check("cron run", out)

	d := coorddCmd(t, c.dataDir, "run", "-f", p, "--host-id", "h1", "--shutdown-grace", "5s")
	logs := &proctest.SyncBuffer{}
	d.Stdout, d.Stderr = logs, logs
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.Process.Signal(syscall.SIGTERM); _ = d.Wait() }()
	check("the daemon's run", string(waitScheduled(t, p, "t", logs).Output))
}
