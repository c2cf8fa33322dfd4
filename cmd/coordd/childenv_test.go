package main

// The commands coordd starts do not inherit the variables that the spec's
// backend connection fields reference (else a cron command `env` prints
// COORDD_DB_PASSWORD into the shared run history), unless cluster.child_env
// is inherit.

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/open"
	"github.com/coordd/coordd/internal/proctest"
)

// secretVar is referenced by the store's path, as a password would be by a
// DSN.
const secretVar = "COORDD_TEST_SECRET_DIR"

// childEnvFixture sets secretVar, applies a spec whose embedded store path
// references it, and returns the spec's path.
func childEnvFixture(t *testing.T, c *cli, inherit bool) string {
	t.Helper()
	t.Setenv(secretVar, t.TempDir())
	cluster := "{backend: db}"
	if inherit {
		cluster = "{backend: db, child_env: inherit}"
	}
	p := writeSpec(t, fmt.Sprintf(`backends:
  db: {type: sqlite, path: "${%s}/x.db"}
cluster: %s
semaphores:
  s: {limit: 1}
queues:
  q: {visibility_timeout: 10s}
cron:
  envdump: {schedule: "@every 1s", command: "env"}
`, secretVar, cluster))
	if code, _, errs := c.run("", false, "apply", "-f", p, "--auto-approve"); code != 0 {
		t.Fatalf("apply: %s", errs)
	}
	return p
}

// checkEnvDump checks the output of `env` run by coordd: it is an
// environment dump (it names marker), and it holds secretVar only when
// inherit is set.
func checkEnvDump(t *testing.T, what, out, marker string, inherit bool) {
	t.Helper()
	if !strings.Contains(out, marker) {
		t.Fatalf("%s: not the command's environment (no %s):\n%s", what, marker, out)
	}
	if got := strings.Contains(out, secretVar+"="); got != inherit {
		t.Errorf("%s: %s present: %v, want %v (child_env inherit: %v)", what, secretVar, got, inherit, inherit)
	}
}

func TestChildEnvLacksBackendSecrets(t *testing.T) {
	for _, inherit := range []bool{false, true} {
		t.Run(fmt.Sprintf("inherit=%v", inherit), func(t *testing.T) {
			c := newCLI(t)
			p := childEnvFixture(t, c, inherit)

			code, out, errs := c.run("", false, "sem", "run", "s", "-f", p, "--", "env")
			if code != 0 {
				t.Fatalf("sem run: %d %s", code, errs)
			}
			checkEnvDump(t, "sem run", out, "COORDD_SEMAPHORE=s", inherit)

			if code, _, errs := c.run("", false, "queue", "push", "q", "-f", p, "x"); code != 0 {
				t.Fatalf("queue push: %s", errs)
			}
			code, out, errs = c.run("", false, "queue", "work", "q", "-f", p, "--drain", "--", "env")
			if code != 0 {
				t.Fatalf("queue work: %d %s", code, errs)
			}
			checkEnvDump(t, "queue work", out, "COORDD_QUEUE=q", inherit)

			code, out, errs = c.run("", false, "cron", "run", "envdump", "-f", p)
			if code != 0 {
				t.Fatalf("cron run: %d %s", code, errs)
			}
			checkEnvDump(t, "cron run", out, "COORDD_TASK=envdump", inherit)

			// The daemon runs the task on its schedule and stores the
			// output where every host reads it.
			d := coorddCmd(t, c.dataDir, "run", "-f", p, "--host-id", "h1", "--shutdown-grace", "5s")
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
			run := waitScheduledRun(t, p, logs)
			checkEnvDump(t, "daemon's stored output", string(run.Output), "COORDD_TASK=envdump", inherit)
		})
	}
}

// waitScheduledRun waits for the first succeeded scheduled (not manual)
// run of task envdump (a catch-up may record skipped ones first) and
// returns it with its stored output.
func waitScheduledRun(t *testing.T, specPath string, logs *proctest.SyncBuffer) backends.Run {
	t.Helper()
	ctx := context.Background()
	s, ok := loadSpec(ctx, &cliEnv{stderr: os.Stderr}, specPath, false)
	if !ok {
		t.Fatal("load spec")
	}
	b, err := open.Open(ctx, s.Backends["db"], backends.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		runs, err := b.Crons().History(ctx, "envdump", 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range runs {
			if !r.Manual && r.Status == backends.RunSucceeded {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no scheduled run of envdump succeeded within 60s; daemon output:\n%s", logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
