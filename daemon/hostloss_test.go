package daemon_test

// With on_host_loss retry (the default) and the default max_attempts 1, an
// occurrence whose server was killed mid-run runs again on another server
// (spec.md, design.md), where it used to stay lost.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/proctest"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/scheduler"
)

// TestHostLossRetriedWithDefaults runs three daemons sharing one store and
// a task with the default max_attempts, on_host_loss and retry_backoff
// (30 s) whose first attempt runs for minutes; it kills the daemon running
// it (the host the command itself reports) with kill -9 and expects the
// command to die with it and attempt 2 to run, once, on another host. The
// times are those the docs promise: the run is marked lost once its run
// lease ran out and at most 20 s (the leader's sweep) later, never before;
// attempt 2 starts retry_backoff after that (a sweep interval three times
// longer fails the test).
func TestHostLossRetriedWithDefaults(t *testing.T) {
	// The backends run at once: each mostly waits.
	t.Run("sqlite", func(t *testing.T) { t.Parallel(); hostLossRetried(t, "cluster: {leader_lease: 2s}") })
	t.Run("mysql", func(t *testing.T) {
		t.Parallel()
		hostLossRetried(t, fmt.Sprintf(`backends:
  db: {type: mysql, dsn: %q, table_prefix: "hl_"}
cluster: {backend: db, leader_lease: 2s}`, testenv.MySQLDSN(t)))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		hostLossRetried(t, fmt.Sprintf(`backends:
  db: {type: postgres, dsn: %q, schema: coordd, table_prefix: "hl_"}
cluster: {backend: db, leader_lease: 2s}`, testenv.PostgresDSN(t)))
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		url, prefix := testenv.RedisURL(t)
		hostLossRetried(t, fmt.Sprintf(`backends:
  cache: {type: redis, url: %q, key_prefix: %q}
cluster: {backend: cache, leader_lease: 2s}`, url, prefix))
	})
}

// attemptLine is one start of the task, as its command logged it.
type attemptLine struct {
	attempt int
	host    string
	pid     int
}

func readAttempts(t *testing.T, path string) []attemptLine {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []attemptLine
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		if len(f) != 3 {
			t.Fatalf("bad log line %q", l)
		}
		a, err1 := strconv.Atoi(f[0])
		pid, err2 := strconv.Atoi(f[2])
		if err1 != nil || err2 != nil {
			t.Fatalf("bad log line %q", l)
		}
		out = append(out, attemptLine{attempt: a, host: f[1], pid: pid})
	}
	return out
}

// alive reports whether pid runs: a zombie nobody reaped yet is dead.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses.
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b)[i+1:])
	return len(f) > 0 && f[0] != "Z"
}

func hostLossRetried(t *testing.T, header string) {
	env := proctest.NewEnv(t)
	dir := t.TempDir()
	logPath := filepath.Join(dir, "attempts.log")
	specPath := filepath.Join(dir, "coordd.yaml")
	// Due once, at apply (run_on_create); the schedule itself is a year
	// away. max_attempts, on_host_loss and retry_backoff keep their
	// defaults; a short run lease keeps the test short. Attempt 1 runs for
	// minutes, attempt 2 ends at once.
	const leaderLease, runLease, retryBackoff = 2 * time.Second, 3 * time.Second, 30 * time.Second
	writeFile(t, specPath, header+fmt.Sprintf(`
cron:
  long:
    schedule: "0 0 1 1 *"
    run_on_create: true
    run_lease: 3s
    command: 'echo "$COORDD_ATTEMPT $COORDD_TEST_HOST $$" >> %s; if [ "$COORDD_ATTEMPT" = 1 ]; then exec sleep 300; fi'
`, logPath))

	procs := map[string]*proctest.Proc{}
	for _, h := range []string{"h1", "h2", "h3"} {
		procs[h] = env.StartWith(t, h, []string{"COORDD_TEST_HOST=" + h}, "run", "-f", specPath, "--host-id", h, "--shutdown-grace", "5s")
	}
	proctest.Eventually(t, 30*time.Second, "attempt 1 to start", func() bool { return len(readAttempts(t, logPath)) > 0 })
	first := readAttempts(t, logPath)[0]
	if first.attempt != 1 || procs[first.host] == nil {
		t.Fatalf("first start %+v: want attempt 1 on h1-h3", first)
	}
	procs[first.host].Kill9()
	killedAt := time.Now()
	proctest.Eventually(t, 10*time.Second, "attempt 1's command to die with its daemon", func() bool {
		return !alive(first.pid)
	})
	// The lease runs out at most runLease after the kill; another daemon
	// leads within leaderLease; its sweep marks the run lost at most
	// DefaultSweep after the lease ran out; attempt 2 starts retryBackoff
	// after that. A margin for a loaded machine.
	const margin = 5 * time.Second
	bound := runLease + leaderLease + scheduler.DefaultSweep + retryBackoff + margin
	proctest.Eventually(t, bound, "attempt 2", func() bool { return len(readAttempts(t, logPath)) >= 2 })
	t.Logf("%s killed; attempt 2 started %s later", first.host, time.Since(killedAt).Round(100*time.Millisecond))

	// The history says why: attempt 1 lost, attempt 2 succeeded.
	var runs []struct {
		Attempt    int       `json:"attempt"`
		Status     string    `json:"status"`
		Host       string    `json:"host"`
		StartedAt  time.Time `json:"started_at"`
		ExpiresAt  time.Time `json:"expires_at"`
		FinishedAt time.Time `json:"finished_at"`
	}
	proctest.Eventually(t, 30*time.Second, "attempt 2 recorded as succeeded", func() bool {
		out, code := env.Run(t, "cron", "history", "long", "-f", specPath, "--json")
		if code != 0 || json.Unmarshal([]byte(out), &runs) != nil {
			return false
		}
		for _, r := range runs {
			if r.Attempt == 2 && r.Status == "succeeded" {
				return true
			}
		}
		return false
	})
	for h, p := range procs {
		if h != first.host {
			p.Signal(syscall.SIGTERM)
		}
	}
	for h, p := range procs {
		if h != first.host {
			if code := p.Wait(t, 30*time.Second); code != 0 {
				t.Errorf("%s exited %d", h, code)
			}
		}
	}

	got := readAttempts(t, logPath)
	if len(got) != 2 || got[1].attempt != 2 || got[1].host == first.host || procs[got[1].host] == nil {
		t.Errorf("starts %+v: want attempt 1 on %s, then attempt 2 once on another host", got, first.host)
	}
	byAttempt := map[int]string{}
	for _, r := range runs {
		byAttempt[r.Attempt] = r.Status
	}
	if len(runs) != 2 || byAttempt[1] != "lost" || byAttempt[2] != "succeeded" {
		t.Fatalf("history %+v: want attempt 1 lost, attempt 2 succeeded", runs)
	}
	// The store's own times (backend clock): marked lost after its lease
	// ran out and within a sweep; retried after retry_backoff, within a
	// second or two.
	lost, retry := runs[0], runs[1]
	if lost.Attempt != 1 {
		lost, retry = retry, lost
	}
	const slack = 3 * time.Second
	if d := lost.FinishedAt.Sub(lost.ExpiresAt); d < 0 || d > scheduler.DefaultSweep+slack {
		t.Errorf("attempt 1 marked lost %s after its lease ran out, want 0 to %s", d, scheduler.DefaultSweep)
	}
	if d := retry.StartedAt.Sub(lost.FinishedAt); d < retryBackoff || d > retryBackoff+slack {
		t.Errorf("attempt 2 started %s after attempt 1 was marked lost, want retry_backoff %s", d, retryBackoff)
	}
	if d := lost.ExpiresAt.Sub(killedAt); d > runLease+slack {
		t.Errorf("attempt 1's lease ran out %s after the kill, want at most run_lease %s", d, runLease)
	}
	t.Logf("lease ran out %s after the kill; marked lost %s later; attempt 2 %s after that",
		lost.ExpiresAt.Sub(killedAt).Round(100*time.Millisecond), lost.FinishedAt.Sub(lost.ExpiresAt).Round(100*time.Millisecond),
		retry.StartedAt.Sub(lost.FinishedAt).Round(100*time.Millisecond))
}
