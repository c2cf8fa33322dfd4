package reconcile_test

import (
	"context"
	"strings"
	"testing"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/sqlite"
	"github.com/coordd/coordd/reconcile"
)

// insertJobs adds n ready jobs to one partition with plain SQL: queue push
// arrives with the runtime, and drift tests need jobs placed by hand.
func insertJobs(t *testing.T, st *sqlite.Store, queue string, partition, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		_, err := st.DB().Exec(`INSERT INTO queue_jobs (queue, partition, payload, state, available_at, enqueued_at)
			VALUES (?, ?, x'7b7d', 'ready', 0, 0)`, queue, partition)
		if err != nil {
			t.Fatal(err)
		}
	}
}

func exec(t *testing.T, st *sqlite.Store, q string, args ...any) {
	t.Helper()
	if _, err := st.DB().Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// TestDriftRepair deletes rows behind coordd's back with plain SQL and
// checks that plan shows it as drift, apart from spec changes, and that
// apply repairs it.
func TestDriftRepair(t *testing.T) {
	f := newFixture(t)
	f.write(threeKinds)
	f.apply(reconcile.Options{})
	st := f.store("db")
	acquire(t, st, "reindex", 1)

	exec(t, st, `DELETE FROM semaphore_slots WHERE name = ? AND slot = 2`, "reindex")
	exec(t, st, `DELETE FROM cron_tasks WHERE name = ?`, "nightly")
	exec(t, st, `DELETE FROM queue_partitions WHERE queue = ? AND partition = 3`, "thumbs")

	p := f.plan(reconcile.Options{})
	out := text(p)
	if len(p.Changes) != 0 || len(p.Drift) != 3 {
		t.Fatalf("want 3 drift entries and no spec changes:\n%s", out)
	}
	for _, want := range []string{
		"Drift: state changed outside coordd",
		"1 slot(s) missing (have 2, want 3)",
		"cron.nightly",
		"missing in backend db",
		"1 partition(s) missing (have 3, want 4)",
		"Plan: 0 to add, 3 to change, 0 to destroy.",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("plan lacks %q:\n%s", want, out)
		}
	}
	f.apply(reconcile.Options{})
	if p := f.plan(reconcile.Options{}); p.HasChanges() {
		t.Fatalf("drift not repaired:\n%s", text(p))
	}
	// The holder kept its slot, and the repaired semaphore admits exactly
	// limit holders.
	acquire(t, st, "reindex", 2)
	wantNoSlot(t, st, backends.SemRef{Name: "reindex"})
	crons, _ := st.ObserveCrons(context.Background(), []string{"nightly"})
	if c := crons["nightly"]; c == nil || c.NextExec.IsZero() {
		t.Fatalf("cron task not repaired: %+v", c)
	}

	// A changed limit in the backend (not in the spec) is drift too.
	exec(t, st, `UPDATE semaphores SET lim = 9 WHERE name = ?`, "reindex")
	p = f.plan(reconcile.Options{})
	if len(p.Drift) != 1 || !strings.Contains(text(p), "limit 9 (want 3)") {
		t.Fatalf("limit drift:\n%s", text(p))
	}
	f.apply(reconcile.Options{})
	if p := f.plan(reconcile.Options{}); p.HasChanges() {
		t.Fatalf("limit drift not repaired:\n%s", text(p))
	}
}

// TestResyncRepairsTowardApplied: resync repairs drift toward the applied
// record and ignores local spec changes (a stale or newer checkout).
func TestResyncRepairsTowardApplied(t *testing.T) {
	f := newFixture(t)
	f.write(threeKinds)
	f.apply(reconcile.Options{})
	st := f.store("db")
	exec(t, st, `DELETE FROM semaphore_slots WHERE name = ? AND slot = 0`, "reindex")

	// The local files now say limit 7 and drop the queue.
	f.write(strings.Replace(strings.Replace(threeKinds, "limit: 3", "limit: 7", 1), "queues:\n  thumbs: {partitions: 4}\n", "", 1))
	p := f.plan(reconcile.Options{Resync: true})
	if len(p.Changes) != 0 || len(p.Drift) != 1 || len(p.Blocked) != 0 {
		t.Fatalf("resync plan should hold only the slot repair:\n%s", text(p))
	}
	res, err := f.engine(false).Apply(context.Background(), reconcile.Options{Resync: true}, "")
	if err != nil {
		t.Fatal(err)
	}
	if s := f.semState(st, "reindex"); s.Slots != 3 || s.Config.Limit != 3 {
		t.Fatalf("after resync: slots %d limit %d, want 3/3", s.Slots, s.Config.Limit)
	}
	state, _ := st.LoadState(context.Background())
	if len(state.Entries) != 3 || state.Last.SpecHash != res.Plan.SpecHash {
		t.Fatalf("resync changed the inventory or the applied hash: %d entries, %+v", len(state.Entries), state.Last)
	}
	// A plain plan still shows the local changes.
	if p := f.plan(reconcile.Options{}); p.Summary.Change != 1 || p.Summary.Destroy != 1 {
		t.Fatalf("local plan:\n%s", text(p))
	}
}
