package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/proctest"
)

// TestHostsCronAfterOncePerSuccess: on each cluster backend, with three
// daemons up, a task declared after another runs once per success of its
// parent (failed runs trigger nothing), scheduled at the end of that
// success, while the leader is killed with kill -9 halfway: its
// scheduled times are, in order, the parent's successes from some point
// on, each started once per attempt. The in-process tests on the
// embedded store check the same rule and the trigger's fences.
func TestHostsCronAfterOncePerSuccess(t *testing.T) {
	for _, typ := range hostBackends {
		t.Run(typ, func(t *testing.T) { hostsCronAfter(t, typ) })
	}
}

// historyTimes reads `cron history --json` of task: the scheduled times of
// its runs (each once, sorted), the finishing times of its succeeded
// runs, and whether every run has ended.
func historyTimes(t *testing.T, h *hosts, task string) (scheduled, succeeded []time.Time, ended bool) {
	t.Helper()
	out, code := h.env.Run(t, "cron", "history", task, "-f", h.spec, "--json", "--limit", "0")
	if code != 0 {
		t.Fatalf("cron history %s: %d\n%s", task, code, out)
	}
	var runs []struct {
		ScheduledAt time.Time `json:"scheduled_at"`
		FinishedAt  time.Time `json:"finished_at"`
		Status      string    `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &runs); err != nil {
		t.Fatalf("cron history %s --json: %v\n%s", task, err, out)
	}
	ended = true
	for _, r := range runs {
		if !slices.ContainsFunc(scheduled, r.ScheduledAt.Equal) {
			scheduled = append(scheduled, r.ScheduledAt)
		}
		switch r.Status {
		case "succeeded":
			succeeded = append(succeeded, r.FinishedAt)
		case "running":
			ended = false
		}
	}
	order := func(a, b time.Time) int { return a.Compare(b) }
	slices.SortFunc(scheduled, order)
	slices.SortFunc(succeeded, order)
	return scheduled, succeeded, ended
}

func hostsCronAfter(t *testing.T, typ string) {
	c := newCLI(t)
	starts := filepath.Join(t.TempDir(), "starts")
	objects := fmt.Sprintf(`cron:
  import:
    schedule: "@every 1s"
    command: 'case "$COORDD_SCHEDULED_AT" in *[0369].000000Z) exit 1;; esac'
  report:
    after: [import]
    command: 'echo "$COORDD_SCHEDULED_AT $COORDD_ATTEMPT" >> %s'
`, starts)
	h := startHosts(t, c, typ, objects)
	finished := func() int {
		_, s, _ := historyTimes(t, h, "import")
		return len(s)
	}
	proctest.Eventually(t, 60*time.Second, "three successes of import", func() bool { return finished() >= 3 })
	leader := h.leader(t)
	for _, d := range h.daemons {
		if d.Name == leader {
			d.Kill9()
			t.Logf("killed the leader %s", leader)
		}
	}
	proctest.Eventually(t, 90*time.Second, "eight successes of import", func() bool { return finished() >= 8 })
	if out, code := h.env.Run(t, "cron", "pause", "import", "-f", h.spec, "--reason", "test over"); code != 0 {
		t.Fatalf("cron pause: %d\n%s", code, out)
	}

	// Once import is paused and every run ended, report's times are a
	// suffix of import's successes: the ones after the leader first saw
	// report, which is about when the daemons started.
	var report, imp []time.Time
	proctest.Eventually(t, 60*time.Second, "report to answer every success of import", func() bool {
		var ended, endedImp bool
		report, _, ended = historyTimes(t, h, "report")
		_, imp, endedImp = historyTimes(t, h, "import")
		return ended && endedImp && len(report) > 0 && report[len(report)-1].Equal(imp[len(imp)-1])
	})
	time.Sleep(2 * time.Second) // nothing more is armed
	report, _, _ = historyTimes(t, h, "report")
	if len(report) > len(imp) || !slices.EqualFunc(report, imp[len(imp)-len(report):], time.Time.Equal) || len(report) < len(imp)-3 {
		t.Fatalf("report ran at\n%v\nwant the successes of import from the first few on\n%v", report, imp)
	}
	t.Logf("report ran %d times for %d successes of import", len(report), len(imp))
	// Each scheduled time's command started once per attempt.
	data, err := os.ReadFile(starts)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if seen[l] {
			t.Fatalf("report started twice for %q:\n%s", l, data)
		}
		seen[l] = true
	}
	for _, r := range report {
		if !seen[r.UTC().Format("2006-01-02T15:04:05.000000Z")+" 1"] {
			t.Fatalf("report's run at %v left no start:\n%s", r, data)
		}
	}
	for _, d := range h.daemons {
		if d.Running() {
			d.Signal(syscall.SIGTERM)
		}
	}
	for _, d := range h.daemons {
		if d.Name != leader {
			if code := d.Wait(t, 30*time.Second); code != 0 {
				t.Errorf("daemon %s exited %d", d.Name, code)
			}
		}
	}
}
