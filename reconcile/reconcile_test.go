package reconcile_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/sqlite"
	"github.com/coordd/coordd/reconcile"
	"github.com/coordd/coordd/spec"
)

// fixture is one spec directory with its data directory; every test gets
// its own SQLite files.
type fixture struct {
	t       *testing.T
	dir     string
	dataDir string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	root := t.TempDir()
	f := &fixture{t: t, dir: filepath.Join(root, "spec"), dataDir: filepath.Join(root, "data")}
	if err := os.MkdirAll(f.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return f
}

// write replaces the spec with one file holding yaml.
func (f *fixture) write(yaml string) {
	f.t.Helper()
	if err := os.WriteFile(filepath.Join(f.dir, "coordd.yaml"), []byte(yaml), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// engine loads the current spec and opens an engine over it.
func (f *fixture) engine(readOnly bool) *reconcile.Engine {
	f.t.Helper()
	s, err := spec.Load(f.dir, spec.LoadOptions{DataDir: f.dataDir, Getenv: func(string) (string, bool) { return "", false }})
	if err != nil {
		f.t.Fatalf("load spec: %v", err)
	}
	e, err := reconcile.Open(context.Background(), s, reconcile.OpenOptions{ReadOnly: readOnly, Version: "0.1.0", Host: "test-" + f.t.Name()})
	if err != nil {
		f.t.Fatalf("open engine: %v", err)
	}
	f.t.Cleanup(func() { e.Close() })
	return e
}

func (f *fixture) plan(opts reconcile.Options) *reconcile.Plan {
	f.t.Helper()
	p, err := f.engine(true).Plan(context.Background(), opts)
	if err != nil {
		f.t.Fatalf("plan: %v", err)
	}
	return p
}

func (f *fixture) apply(opts reconcile.Options) *reconcile.Result {
	f.t.Helper()
	res, err := f.engine(false).Apply(context.Background(), opts, "")
	if err != nil {
		var buf bytes.Buffer
		if res != nil {
			res.Plan.WriteText(&buf)
		}
		f.t.Fatalf("apply: %v\n%s", err, buf.String())
	}
	return res
}

func text(p *reconcile.Plan) string {
	var b bytes.Buffer
	p.WriteText(&b)
	return b.String()
}

// store opens a handle on the named SQLite backend of the fixture's data
// dir, as a runtime process on the same host would.
func (f *fixture) store(name string) *sqlite.Store {
	f.t.Helper()
	st, err := sqlite.Open(context.Background(), name, filepath.Join(f.dataDir, name+".db"), backends.Options{Version: "0.1.0"})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { st.Close() })
	return st
}

func (f *fixture) semState(st *sqlite.Store, name string) *backends.SemaphoreState {
	f.t.Helper()
	m, err := st.ObserveSemaphores(context.Background(), []string{name})
	if err != nil {
		f.t.Fatal(err)
	}
	return m[name]
}

func acquire(t *testing.T, st *sqlite.Store, name string, n int) []string {
	t.Helper()
	var owners []string
	for i := 0; i < n; i++ {
		owner := fmt.Sprintf("owner-%s-%d-%d", name, time.Now().UnixNano(), i)
		if _, err := st.TryAcquire(context.Background(), backends.SemRef{Name: name}, backends.AcquireRequest{Owner: owner, Host: "h", PID: 1, Lease: time.Minute}); err != nil {
			t.Fatalf("acquire %d of %s: %v", i, name, err)
		}
		owners = append(owners, owner)
	}
	return owners
}

func wantNoSlot(t *testing.T, st *sqlite.Store, ref backends.SemRef) {
	t.Helper()
	_, err := st.TryAcquire(context.Background(), ref, backends.AcquireRequest{Owner: "intruder", Host: "h", PID: 1, Lease: time.Minute})
	if !errors.Is(err, backends.ErrNoSlot) {
		t.Fatalf("acquire on full %s: got %v, want ErrNoSlot", ref, err)
	}
}

const threeKinds = `
backends:
  db: {type: sqlite, path: ../data/db.db}
semaphores:
  reindex: {limit: 3, lease: 1m}
cron:
  nightly:
    schedule: "0 4 * * *"
    timezone: Asia/Tokyo
    command: ["/bin/true"]
queues:
  thumbs: {partitions: 4}
`

func TestCreateThenNoChanges(t *testing.T) {
	f := newFixture(t)
	f.write(threeKinds)

	p := f.plan(reconcile.Options{})
	if got := p.SummaryLine(); got != "Plan: 3 to add, 0 to change, 0 to destroy." {
		t.Fatalf("first plan: %q\n%s", got, text(p))
	}
	out := text(p)
	for _, want := range []string{"+ semaphore.reindex", "+ limit: 3", "+ cron.nightly", "+ queue.thumbs", "+ partitions: 4"} {
		if !strings.Contains(out, want) {
			t.Errorf("plan text lacks %q:\n%s", want, out)
		}
	}
	// plan is read-only: the store must not exist yet.
	if _, err := os.Stat(filepath.Join(f.dataDir, "db.db")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("plan created the store: %v", err)
	}

	res := f.apply(reconcile.Options{})
	if res.Generation != 1 {
		t.Fatalf("generation = %d, want 1", res.Generation)
	}
	p = f.plan(reconcile.Options{})
	if p.HasChanges() || p.SummaryLine() != "No changes." {
		t.Fatalf("plan after apply:\n%s", text(p))
	}
	// Apply again is a no-op and records nothing new.
	if res := f.apply(reconcile.Options{}); res.Generation != 0 || res.Applied != 0 {
		t.Fatalf("second apply did something: %+v", res)
	}

	st := f.store("db")
	if s := f.semState(st, "reindex"); s == nil || s.Slots != 3 || s.Config.Limit != 3 {
		t.Fatalf("semaphore state: %+v", s)
	}
	crons, err := st.ObserveCrons(context.Background(), []string{"nightly"})
	if err != nil {
		t.Fatal(err)
	}
	c := crons["nightly"]
	if c == nil {
		t.Fatal("cron task not created")
	}
	// 04:00 Asia/Tokyo is 19:00 UTC.
	if c.NextExec.UTC().Hour() != 19 || c.NextExec.Minute() != 0 {
		t.Fatalf("next_exec = %v, want 19:00 UTC", c.NextExec)
	}
	now, _ := st.Now(context.Background())
	if !c.NextExec.After(now) || c.NextExec.Sub(now) > 24*time.Hour {
		t.Fatalf("next_exec %v is not the next occurrence after %v", c.NextExec, now)
	}
	qs, err := st.ObserveQueues(context.Background(), []string{"thumbs"})
	if err != nil {
		t.Fatal(err)
	}
	if q := qs["thumbs"]; q == nil || q.PartitionsPresent != 4 {
		t.Fatalf("queue state: %+v", qs["thumbs"])
	}
}

func TestLimitUpAndDownWithSlotsHeld(t *testing.T) {
	f := newFixture(t)
	f.write(strings.Replace(threeKinds, "limit: 3", "limit: 3", 1))
	f.apply(reconcile.Options{})
	st := f.store("db")
	acquire(t, st, "reindex", 3)
	wantNoSlot(t, st, backends.SemRef{Name: "reindex"})

	// Up: 3 -> 5 admits exactly two more.
	f.write(strings.Replace(threeKinds, "limit: 3", "limit: 5", 1))
	p := f.plan(reconcile.Options{})
	if !strings.Contains(text(p), "~ limit: 3 -> 5") || p.SummaryLine() != "Plan: 0 to add, 1 to change, 0 to destroy." {
		t.Fatalf("plan for limit up:\n%s", text(p))
	}
	f.apply(reconcile.Options{})
	owners := acquire(t, st, "reindex", 2)
	wantNoSlot(t, st, backends.SemRef{Name: "reindex"})

	// Down: 5 -> 2 with 5 held evicts nobody and admits nobody.
	f.write(strings.Replace(threeKinds, "limit: 3", "limit: 2", 1))
	p = f.plan(reconcile.Options{})
	if !strings.Contains(text(p), "~ limit: 5 -> 2") || !strings.Contains(text(p), "5 holder(s) keep their slots") {
		t.Fatalf("plan for limit down:\n%s", text(p))
	}
	f.apply(reconcile.Options{})
	s := f.semState(st, "reindex")
	if len(s.Holders) != 5 || s.Config.Limit != 2 {
		t.Fatalf("after limit down: %d holders, limit %d", len(s.Holders), s.Config.Limit)
	}
	wantNoSlot(t, st, backends.SemRef{Name: "reindex"})
	if p := f.plan(reconcile.Options{}); p.HasChanges() {
		t.Fatalf("held slots above the limit must not show as drift:\n%s", text(p))
	}
	// Releasing down to the limit retires slots and still admits nobody.
	all := f.semState(st, "reindex").Holders
	for _, h := range all[:3] {
		if err := st.Release(context.Background(), backends.SemRef{Name: "reindex"}, h.Owner); err != nil {
			t.Fatal(err)
		}
	}
	wantNoSlot(t, st, backends.SemRef{Name: "reindex"})
	if s := f.semState(st, "reindex"); s.Slots != 2 {
		t.Fatalf("slots after releases = %d, want 2", s.Slots)
	}
	_ = owners
	if p := f.plan(reconcile.Options{}); p.HasChanges() {
		t.Fatalf("plan after drain:\n%s", text(p))
	}
}

func TestReplaceWithSlotsHeld(t *testing.T) {
	f := newFixture(t)
	two := `
backends:
  a: {type: sqlite, path: ../data/a.db}
  b: {type: sqlite, path: ../data/b.db}
cluster: {backend: a}
semaphores:
  s: {backend: %s, limit: 2}
`
	f.write(fmt.Sprintf(two, "a"))
	f.apply(reconcile.Options{})
	sa := f.store("a")
	owners := acquire(t, sa, "s", 2)

	f.write(fmt.Sprintf(two, "b"))
	p := f.plan(reconcile.Options{})
	out := text(p)
	if !strings.Contains(out, "-/+ semaphore.s") || !strings.Contains(out, "forces replacement") ||
		!strings.Contains(out, "admits nobody until 2 holder(s) on a") || p.SummaryLine() != "Plan: 1 to add, 0 to change, 1 to destroy." {
		t.Fatalf("replace plan:\n%s", out)
	}
	f.apply(reconcile.Options{})
	sb := f.store("b")
	// The new object exists but admits nobody while a's holders remain.
	wantNoSlot(t, sb, backends.SemRef{Name: "s"})
	wantNoSlot(t, sa, backends.SemRef{Name: "s"})
	p = f.plan(reconcile.Options{})
	if p.HasChanges() || len(p.Waiting) != 1 {
		t.Fatalf("plan while draining:\n%s", text(p))
	}
	// One holder releases: still one left, still nobody admitted.
	if err := sa.Release(context.Background(), backends.SemRef{Name: "s"}, owners[0]); err != nil {
		t.Fatal(err)
	}
	f.apply(reconcile.Options{})
	wantNoSlot(t, sb, backends.SemRef{Name: "s"})
	if err := sa.Release(context.Background(), backends.SemRef{Name: "s"}, owners[1]); err != nil {
		t.Fatal(err)
	}
	p = f.plan(reconcile.Options{})
	if !strings.Contains(text(p), "finishes its replacement") {
		t.Fatalf("plan after drain:\n%s", text(p))
	}
	f.apply(reconcile.Options{})
	acquire(t, sb, "s", 2)
	wantNoSlot(t, sb, backends.SemRef{Name: "s"})
	if s := f.semState(sa, "s"); s != nil {
		t.Fatalf("old semaphore still on a: %+v", s)
	}
	if p := f.plan(reconcile.Options{}); p.HasChanges() || len(p.Waiting) != 0 {
		t.Fatalf("final plan:\n%s", text(p))
	}
}

func TestRemoveObjectsAndEmptyGuard(t *testing.T) {
	f := newFixture(t)
	f.write(threeKinds)
	f.apply(reconcile.Options{})
	st := f.store("db")
	owners := acquire(t, st, "reindex", 1)

	// An empty spec is refused: nothing changes.
	f.write("backends:\n  db: {type: sqlite, path: ../data/db.db}\n")
	p := f.plan(reconcile.Options{})
	if len(p.Blocked) == 0 || !strings.Contains(text(p), "--allow-empty") {
		t.Fatalf("empty spec not blocked:\n%s", text(p))
	}
	_, err := f.engine(false).Apply(context.Background(), reconcile.Options{}, "")
	if !errors.Is(err, reconcile.ErrBlocked) {
		t.Fatalf("apply of empty spec: %v", err)
	}
	if s := f.semState(st, "reindex"); s == nil || s.Config.Limit != 3 {
		t.Fatalf("refused apply changed the semaphore: %+v", s)
	}

	// Removing one object deletes it; the held semaphore drains.
	f.write(strings.Replace(threeKinds, "semaphores:\n  reindex: {limit: 3, lease: 1m}\n", "", 1))
	p = f.plan(reconcile.Options{})
	if !strings.Contains(text(p), "- semaphore.reindex") || !strings.Contains(text(p), "waits for 1 holder(s)") {
		t.Fatalf("delete plan:\n%s", text(p))
	}
	f.apply(reconcile.Options{})
	wantNoSlot(t, st, backends.SemRef{Name: "reindex"})
	p = f.plan(reconcile.Options{})
	if p.HasChanges() || len(p.Waiting) != 1 {
		t.Fatalf("plan while draining:\n%s", text(p))
	}
	if err := st.Release(context.Background(), backends.SemRef{Name: "reindex"}, owners[0]); err != nil {
		t.Fatal(err)
	}
	p = f.plan(reconcile.Options{})
	if p.SummaryLine() != "Plan: 0 to add, 0 to change, 1 to destroy." {
		t.Fatalf("plan after drain:\n%s", text(p))
	}
	f.apply(reconcile.Options{})
	if s := f.semState(st, "reindex"); s != nil {
		t.Fatalf("semaphore not deleted: %+v", s)
	}

	// With --allow-empty everything else goes.
	f.write("backends:\n  db: {type: sqlite, path: ../data/db.db}\n")
	f.apply(reconcile.Options{AllowEmpty: true})
	state, err := st.LoadState(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(state.Entries) != 0 {
		t.Fatalf("inventory not empty: %+v", state.Entries)
	}
}

func TestPreventDestroy(t *testing.T) {
	f := newFixture(t)
	f.write(strings.Replace(threeKinds, "limit: 3, lease: 1m", "limit: 3, lease: 1m, prevent_destroy: true", 1))
	f.apply(reconcile.Options{})
	f.write(strings.Replace(threeKinds, "semaphores:\n  reindex: {limit: 3, lease: 1m}\n", "", 1))
	p := f.plan(reconcile.Options{})
	if len(p.Blocked) != 1 || !strings.Contains(p.Blocked[0], "prevent_destroy") {
		t.Fatalf("prevent_destroy not enforced:\n%s", text(p))
	}
	if _, err := f.engine(false).Apply(context.Background(), reconcile.Options{}, ""); !errors.Is(err, reconcile.ErrBlocked) {
		t.Fatalf("apply: %v", err)
	}
	// Removing the flag first, then the object, works.
	f.write(threeKinds)
	f.apply(reconcile.Options{})
	f.write(strings.Replace(threeKinds, "semaphores:\n  reindex: {limit: 3, lease: 1m}\n", "", 1))
	f.apply(reconcile.Options{})
}

func TestQueuePartitionsAndJobs(t *testing.T) {
	f := newFixture(t)
	f.write(threeKinds)
	f.apply(reconcile.Options{})
	st := f.store("db")
	insertJobs(t, st, "thumbs", 3, 5)
	insertJobs(t, st, "thumbs", 0, 2)

	f.write(strings.Replace(threeKinds, "partitions: 4", "partitions: 2", 1))
	p := f.plan(reconcile.Options{})
	if !strings.Contains(text(p), "~ partitions: 4 -> 2") || !strings.Contains(text(p), "none is lost") {
		t.Fatalf("plan:\n%s", text(p))
	}
	f.apply(reconcile.Options{})
	qs, _ := st.ObserveQueues(context.Background(), []string{"thumbs"})
	if q := qs["thumbs"]; q.Ready != 7 || q.Stranded != 0 || q.PartitionsPresent != 2 {
		t.Fatalf("after shrink: %+v", q)
	}

	// Deleting a queue with jobs is refused without the flag.
	f.write(strings.Replace(threeKinds, "queues:\n  thumbs: {partitions: 4}\n", "", 1))
	p = f.plan(reconcile.Options{})
	if len(p.Blocked) != 1 || !strings.Contains(p.Blocked[0], "7 job(s)") {
		t.Fatalf("delete with jobs not blocked:\n%s", text(p))
	}
	f.apply(reconcile.Options{AllowDestroyJobs: true})
	qs, _ = st.ObserveQueues(context.Background(), []string{"thumbs"})
	if qs["thumbs"] != nil {
		t.Fatal("queue not deleted")
	}
}

func TestCronScheduleChangeRecomputes(t *testing.T) {
	f := newFixture(t)
	f.write(threeKinds)
	f.apply(reconcile.Options{})
	st := f.store("db")
	before, _ := st.ObserveCrons(context.Background(), []string{"nightly"})

	// A command change keeps next_exec.
	f.write(strings.Replace(threeKinds, `["/bin/true"]`, `"echo hi"`, 1))
	p := f.plan(reconcile.Options{})
	if !strings.Contains(text(p), "applies from the next run") {
		t.Fatalf("plan:\n%s", text(p))
	}
	f.apply(reconcile.Options{})
	after, _ := st.ObserveCrons(context.Background(), []string{"nightly"})
	if !after["nightly"].NextExec.Equal(before["nightly"].NextExec) {
		t.Fatalf("command change moved next_exec: %v -> %v", before["nightly"].NextExec, after["nightly"].NextExec)
	}

	// A timezone change recomputes it: 04:00 UTC.
	f.write(strings.Replace(threeKinds, "Asia/Tokyo", "UTC", 1))
	p = f.plan(reconcile.Options{})
	if !strings.Contains(text(p), "~ timezone: Asia/Tokyo -> UTC") || !strings.Contains(text(p), "recomputed") {
		t.Fatalf("plan:\n%s", text(p))
	}
	f.apply(reconcile.Options{})
	after, _ = st.ObserveCrons(context.Background(), []string{"nightly"})
	if h := after["nightly"].NextExec.UTC().Hour(); h != 4 {
		t.Fatalf("next_exec after tz change = %v", after["nightly"].NextExec)
	}
}

func TestRunOnCreate(t *testing.T) {
	f := newFixture(t)
	f.write(strings.Replace(threeKinds, `command: ["/bin/true"]`, "command: [\"/bin/true\"]\n    run_on_create: true", 1))
	f.apply(reconcile.Options{})
	st := f.store("db")
	crons, _ := st.ObserveCrons(context.Background(), []string{"nightly"})
	now, _ := st.Now(context.Background())
	if next := crons["nightly"].NextExec; next.After(now) {
		t.Fatalf("run_on_create: next_exec %v is after now %v", next, now)
	}
}

func TestConcurrentApplies(t *testing.T) {
	f := newFixture(t)
	f.write(threeKinds)
	const n = 4
	engines := make([]*reconcile.Engine, n)
	for i := range engines {
		engines[i] = f.engine(false)
		engines[i].Host = fmt.Sprintf("host-%d", i)
	}
	var wg sync.WaitGroup
	results := make([]*reconcile.Result, n)
	errs := make([]error, n)
	for i := range engines {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			results[i], errs[i] = engines[i].Apply(context.Background(), reconcile.Options{}, "")
		}(i)
	}
	wg.Wait()
	applied := 0
	for i := range engines {
		if errs[i] != nil {
			t.Fatalf("apply %d: %v", i, errs[i])
		}
		if results[i].Generation > 0 {
			applied++
		}
	}
	// The lock serialises them: one creates, the others re-plan to no-ops.
	if applied != 1 {
		t.Fatalf("%d applies recorded a generation, want 1", applied)
	}
	st := f.store("db")
	state, _ := st.LoadState(context.Background())
	if len(state.Entries) != 3 || state.Last.Generation != 1 {
		t.Fatalf("state after concurrent applies: %d entries, last %+v", len(state.Entries), state.Last)
	}
	if s := f.semState(st, "reindex"); s.Slots != 3 {
		t.Fatalf("slots = %d", s.Slots)
	}
}

func TestApprovedPlanMustMatch(t *testing.T) {
	f := newFixture(t)
	f.write(threeKinds)
	e := f.engine(false)
	p, err := e.Plan(context.Background(), reconcile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	approved := p.Fingerprint()
	// Another host applies in between.
	f.apply(reconcile.Options{})
	_, err = e.Apply(context.Background(), reconcile.Options{}, approved)
	if !errors.Is(err, reconcile.ErrPlanChanged) {
		t.Fatalf("stale approval: %v", err)
	}
}

func TestPlanJSON(t *testing.T) {
	f := newFixture(t)
	f.write(threeKinds)
	var buf bytes.Buffer
	if err := f.plan(reconcile.Options{}).WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"action": "create"`, `"summary_text": "Plan: 3 to add, 0 to change, 0 to destroy."`, `"has_changes": true`} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("json lacks %s:\n%s", want, buf.String())
		}
	}
}
