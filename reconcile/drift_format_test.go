package reconcile_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/reconcile"
	"github.com/coordd/coordd/spec"
)

// TestDriftNotesPrintDurations: a config that drifted in the backend is
// reported in the units an operator writes in the spec. Durations read
// "1m0s (want 10s)", never the nanoseconds of their JSON ("6e+10").
func TestDriftNotesPrintDurations(t *testing.T) {
	f := newFixture(t)
	f.write(threeKinds)
	f.apply(reconcile.Options{})
	st := f.store("db")

	exec(t, st, `UPDATE semaphores SET lease_ns = 120000000000, lim = 5 WHERE name = ?`, "reindex")
	exec(t, st, `UPDATE queues SET config = json_set(config, '$.retry_backoff', 60000000000, '$.claim', 'skip locked') WHERE name = ?`, "thumbs")

	p := f.plan(reconcile.Options{})
	out := text(p)
	for _, want := range []string{
		"config in backend differs: lease 2m0s (want 1m0s), limit 5 (want 3)",
		"retry_backoff 1m0s (want 10s)",
		`claim "skip locked" (want`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("plan lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "e+") {
		t.Errorf("plan prints a duration as a float:\n%s", out)
	}
}

// TestPlanValuesTypedInJSONAndNoneInText: plan --json gives each value as
// what it is (a schedule as the string, a limit as a number, a flag as a
// boolean, a command as a list, no timeout as null), and the text prints a
// timeout or max_hold of 0 as "none".
func TestPlanValuesTypedInJSONAndNoneInText(t *testing.T) {
	f := newFixture(t)
	f.write(threeKinds)
	p := f.plan(reconcile.Options{})
	out := text(p)
	for _, want := range []string{`+ schedule: "0 4 * * *"`, "+ timeout: none", "+ max_hold: none"} {
		if !strings.Contains(out, want) {
			t.Errorf("plan text lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "timeout: 0s") {
		t.Errorf("plan text prints no timeout as 0s:\n%s", out)
	}
	b, err := json.Marshal(p.Changes)
	if err != nil {
		t.Fatal(err)
	}
	var changes []struct {
		Address struct{ Kind, Name string }
		Attrs   []struct {
			Name string
			New  any
		}
	}
	if err := json.Unmarshal(b, &changes); err != nil {
		t.Fatal(err)
	}
	got := map[string]any{}
	for _, c := range changes {
		for _, a := range c.Attrs {
			got[c.Address.Kind+"."+a.Name] = a.New
		}
	}
	for k, want := range map[string]any{
		"cron.schedule": "0 4 * * *", "cron.command": []any{"/bin/true"}, "cron.timeout": nil, "cron.paused": false,
		"cron.kill_grace": "10s", "semaphore.limit": float64(3), "semaphore.lease": "1m0s", "queue.partitions": float64(4),
	} {
		if v, ok := got[k]; !ok && want != nil || !reflect.DeepEqual(v, want) {
			t.Errorf("plan --json %s = %#v, want %#v", k, v, want)
		}
	}
}

// TestPlanShowsJitterAndItsOffset: plan prints a task's jitter with the
// offset its name gives it, and a changed jitter recomputes next_exec as a
// changed schedule does.
func TestPlanShowsJitterAndItsOffset(t *testing.T) {
	f := newFixture(t)
	f.write("cron:\n  report: {schedule: \"@hourly\", jitter: 30m, command: \"true\"}\n")
	p := f.plan(reconcile.Options{})
	want := fmt.Sprintf("+ jitter: 30m0s (this task runs %s after each time)", spec.JitterOffset("report", 30*time.Minute))
	if out := text(p); !strings.Contains(out, want) {
		t.Errorf("plan lacks %q:\n%s", want, out)
	}
	f.apply(reconcile.Options{})
	f.write("cron:\n  report: {schedule: \"@hourly\", jitter: 10m, command: \"true\"}\n")
	if out := text(f.plan(reconcile.Options{})); !strings.Contains(out, "next_exec is recomputed from the new schedule") || !strings.Contains(out, "jitter: 30m0s") {
		t.Errorf("a changed jitter: plan\n%s", out)
	}
}

// TestPlanApplyTaskAfterOthers: plan shows a task's after list; apply
// creates it with no next_exec, which is not drift; an armed next_exec
// (its parents triggered it) survives a plan-and-apply; moving it from a
// schedule to after clears next_exec, with a note saying when it runs.
func TestPlanApplyTaskAfterOthers(t *testing.T) {
	f := newFixture(t)
	const parent = "  import: {schedule: \"@hourly\", command: \"true\"}\n"
	f.write("cron:\n" + parent + "  report: {schedule: \"@daily\", command: \"true\"}\n")
	f.apply(reconcile.Options{})
	f.write("cron:\n" + parent + "  report: {after: [import], command: \"true\"}\n")
	out := text(f.plan(reconcile.Options{}))
	for _, want := range []string{`~ after: "" -> [import]`, "next_exec is cleared: the task runs when a run of import succeeds"} {
		if !strings.Contains(out, want) {
			t.Errorf("plan lacks %q:\n%s", want, out)
		}
	}
	f.apply(reconcile.Options{})
	st := f.handle("embedded").Crons()
	m, err := st.ObserveCrons(t.Context(), []string{"report"})
	if err != nil || m["report"] == nil || !m["report"].NextExec.IsZero() {
		t.Fatalf("after apply: %+v %v, want report with no next_exec", m["report"], err)
	}
	if p := f.plan(reconcile.Options{}); p.HasChanges() || len(p.Drift) != 0 {
		t.Fatalf("a task after others, not yet triggered, reads as a change or drift:\n%s", text(p))
	}
	armed := time.Now().UTC().Truncate(time.Millisecond)
	if set, err := st.SetNextExec(t.Context(), "report", time.Time{}, armed); err != nil || !set {
		t.Fatalf("arm: %v %v", set, err)
	}
	f.apply(reconcile.Options{})
	m, err = st.ObserveCrons(t.Context(), []string{"report"})
	if err != nil || m["report"] == nil || !m["report"].NextExec.Equal(armed) {
		t.Fatalf("after a second apply: %+v %v, want the armed time %v kept", m["report"], err, armed)
	}
}
