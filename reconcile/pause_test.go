package reconcile_test

import (
	"context"
	"strings"
	"testing"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/reconcile"
)

// TestPauseIsAnOverride: a task paused with coordd cron pause shows in the
// plan as an operator override, not as drift ("No changes."); an apply that
// updates the task keeps the pause; paused: true in the spec is a change
// like any attribute; a move to another backend carries the pause over.
func TestPauseIsAnOverride(t *testing.T) {
	f := newFixture(t)
	f.write(threeKinds)
	f.apply(reconcile.Options{})
	st := f.store("db")
	ctx := context.Background()
	pause, _, err := st.PauseCron(ctx, "nightly", "ops-1", "disk full")
	if err != nil {
		t.Fatal(err)
	}

	p := f.plan(reconcile.Options{})
	out := text(p)
	if p.HasChanges() || len(p.Drift) != 0 || !strings.Contains(out, "No changes.") {
		t.Fatalf("a pause is planned as a change or drift:\n%s", out)
	}
	if len(p.Overrides) != 1 || p.Overrides[0].Address.String() != "cron.nightly" || p.Overrides[0].Paused == nil || *p.Overrides[0].Paused != pause {
		t.Fatalf("overrides %+v, want the pause of cron.nightly %+v", p.Overrides, pause)
	}
	for _, want := range []string{"Operator overrides (not drift; apply keeps them):", `cron.nightly: paused by "ops-1"`, `"disk full"`, "coordd cron resume nightly"} {
		if !strings.Contains(out, want) {
			t.Errorf("plan text lacks %q:\n%s", want, out)
		}
	}

	// An update of the task keeps the pause.
	f.write(strings.Replace(threeKinds, `["/bin/true"]`, `"echo hi"`, 1))
	f.apply(reconcile.Options{})
	m, err := st.ObserveCrons(ctx, []string{"nightly"})
	if err != nil {
		t.Fatal(err)
	}
	if m["nightly"].Paused == nil || *m["nightly"].Paused != pause || !strings.Contains(string(m["nightly"].Def), "echo hi") {
		t.Fatalf("after an update: def %s pause %+v, want the new def and the pause kept", m["nightly"].Def, m["nightly"].Paused)
	}

	// paused: true in the spec is a change of the definition.
	f.write(strings.Replace(threeKinds, `command: ["/bin/true"]`, "command: [\"/bin/true\"]\n    paused: true", 1))
	p = f.plan(reconcile.Options{})
	if !strings.Contains(text(p), "~ paused:") || !p.HasChanges() {
		t.Fatalf("paused: true not planned as an update:\n%s", text(p))
	}
	f.apply(reconcile.Options{})
	m, _ = st.ObserveCrons(ctx, []string{"nightly"})
	if !backends.DefPaused(m["nightly"].Def) || m["nightly"].Paused == nil {
		t.Fatalf("after paused: true: def %s pause %+v, want both", m["nightly"].Def, m["nightly"].Paused)
	}

	// A move to another backend carries the operator's pause over.
	moved := strings.Replace(threeKinds, "backends:\n  db: {type: sqlite, path: ../data/db.db}",
		"backends:\n  db: {type: sqlite, path: ../data/db.db}\n  other: {type: sqlite, path: ../data/other.db}\ncluster: {backend: db}", 1)
	moved = strings.Replace(moved, "  nightly:\n", "  nightly:\n    backend: other\n", 1)
	f.write(moved)
	if p := f.plan(reconcile.Options{}); !strings.Contains(text(p), "apply pauses it again on its new backend") {
		t.Fatalf("plan of a move does not say the pause moves:\n%s", text(p))
	}
	f.apply(reconcile.Options{})
	m, _ = f.store("other").ObserveCrons(ctx, []string{"nightly"})
	if m["nightly"] == nil || m["nightly"].Paused == nil || m["nightly"].Paused.Host != "ops-1" || m["nightly"].Paused.Reason != "disk full" {
		t.Fatalf("after a move: %+v, want the pause by ops-1 carried over", m["nightly"])
	}
}
