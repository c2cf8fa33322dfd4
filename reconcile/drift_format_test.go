package reconcile_test

import (
	"strings"
	"testing"

	"github.com/coordd/coordd/reconcile"
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
