package metrics_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/metrics"
)

// TestMetricsCronPaused: coordd_cron_paused is 1 for a task an operator
// paused and for one whose definition says paused: true, 0 otherwise, and
// follows a resume at the next scrape.
func TestMetricsCronPaused(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	defer st.Close()
	next := time.Now().Add(time.Hour)
	for name, def := range map[string]string{
		"running":  `{"schedule":"@hourly","command":{"argv":["true"]}}`,
		"operator": `{"schedule":"@hourly","command":{"argv":["true"]}}`,
		"declared": `{"schedule":"@hourly","command":{"argv":["true"]},"paused":true}`,
	} {
		if err := st.PutCron(ctx, name, json.RawMessage(def), next, true); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := st.PauseCron(ctx, "operator", "ops-1", "incident"); err != nil {
		t.Fatal(err)
	}
	src := &source{objs: []metrics.Objects{{Backend: "local", B: st, Crons: []string{"declared", "operator", "running"}}}}
	base := serve(t, metrics.New(src))
	_, body := get(t, base+"/metrics")
	for _, l := range []string{
		`coordd_backend_observe_successful{backend="local"} 1`,
		`coordd_cron_paused{backend="local",task="declared"} 1`,
		`coordd_cron_paused{backend="local",task="operator"} 1`,
		`coordd_cron_paused{backend="local",task="running"} 0`,
	} {
		if !hasLine(body, l) {
			t.Errorf("no line %q in /metrics:\n%s", l, body)
		}
	}
	if _, err := st.ResumeCron(ctx, "operator"); err != nil {
		t.Fatal(err)
	}
	if _, body = get(t, base+"/metrics"); !hasLine(body, `coordd_cron_paused{backend="local",task="operator"} 0`) {
		t.Errorf("after a resume, no line coordd_cron_paused{...operator} 0 in /metrics")
	}
}

// TestMetricsCronNextRunAndLastSuccess: coordd_cron_next_run_timestamp_seconds
// is the task's next_exec, and coordd_cron_last_success_timestamp_seconds
// appears once a run succeeded, with its end, and stays through a later
// failure (what an alert on silence reads).
func TestMetricsCronNextRunAndLastSuccess(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	defer st.Close()
	next := time.Unix(1900000000, 0).UTC()
	if err := st.PutCron(ctx, "nightly", json.RawMessage(`{"schedule":"@hourly","command":{"argv":["true"]}}`), next, true); err != nil {
		t.Fatal(err)
	}
	src := &source{objs: []metrics.Objects{{Backend: "local", B: st, Crons: []string{"nightly"}}}}
	base := serve(t, metrics.New(src))
	_, body := get(t, base+"/metrics")
	if !hasLine(body, `coordd_cron_next_run_timestamp_seconds{backend="local",task="nightly"} 1.9e+09`) {
		t.Errorf("no next run line in /metrics:\n%s", body)
	}
	if strings.Contains(body, "coordd_cron_last_success_timestamp_seconds{") {
		t.Errorf("a last success before any run:\n%s", body)
	}
	run := func(status string) {
		t.Helper()
		occ, err := st.ClaimOccurrence(ctx, backends.ClaimRequest{Task: "nightly", Attempt: 1, Owner: "o-" + status, Host: "h1", Lease: time.Minute, Manual: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := backends.FinishOne(ctx, st, occ, backends.RunResult{Status: status}); err != nil {
			t.Fatal(err)
		}
	}
	run(backends.RunSucceeded)
	_, body = get(t, base+"/metrics")
	v, found := metricValue(body, "coordd_cron_last_success_timestamp_seconds", `task="nightly"`)
	if !found || time.Since(time.Unix(int64(v), 0)) > time.Minute {
		t.Fatalf("last success %v (found %v) after a successful run:\n%s", v, found, body)
	}
	run(backends.RunFailed)
	_, body = get(t, base+"/metrics")
	if after, found := metricValue(body, "coordd_cron_last_success_timestamp_seconds", `task="nightly"`); !found || after != v {
		t.Errorf("after a failed run the last success is %v (found %v), want %v kept", after, found, v)
	}
}

// metricValue is testenv.MetricValue.
var metricValue = testenv.MetricValue

// TestMetricsCronNextRunAbsentWithoutNextTime: a task with no next time
// (after others, waiting for them) has no next run series, which an
// alert on silence would read as a task overdue since year 1.
func TestMetricsCronNextRunAbsentWithoutNextTime(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	defer st.Close()
	if err := st.PutCron(ctx, "report", json.RawMessage(`{"after":["import"],"command":{"argv":["true"]}}`), time.Time{}, true); err != nil {
		t.Fatal(err)
	}
	src := &source{objs: []metrics.Objects{{Backend: "local", B: st, Crons: []string{"report"}}}}
	base := serve(t, metrics.New(src))
	_, body := get(t, base+"/metrics")
	if strings.Contains(body, `coordd_cron_next_run_timestamp_seconds{backend="local",task="report"}`) {
		t.Errorf("a next run series for a task with no next time:\n%s", body)
	}
	if !hasLine(body, `coordd_cron_paused{backend="local",task="report"} 0`) {
		t.Errorf("no paused line for the task:\n%s", body)
	}
}
