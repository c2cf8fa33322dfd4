package metrics_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

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
