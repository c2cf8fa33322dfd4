package reconcile_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	goredis "github.com/redis/go-redis/v9"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/open"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/reconcile"
	"github.com/coordd/coordd/spec"
)

// The promises of docs/design.md ("Desired, applied, observed", "Safety
// rules", "Fencing numbers") and docs/operations.md ("Guard rails") held on
// every backend that supports them, not only on the embedded store that
// reconcile_test.go uses. Backend x is the one under test; the
// cluster state lives on x where x can hold it, else on a local file.

var (
	clusterTypes = []string{spec.TypeSQLite, spec.TypeMySQL, spec.TypePostgres, spec.TypeRedis}
	objectTypes  = []string{spec.TypeSQLite, spec.TypeMySQL, spec.TypePostgres, spec.TypeRedis, spec.TypeMemcached}
)

// target is backend x of one type, on its own database, key prefix or file.
type target struct {
	typ  string
	decl string // the YAML flow mapping declaring x
	dsn  string // mysql and postgres
	url  string // redis
	addr string // memcached
	pfx  string // redis and memcached key prefix
	path string // sqlite
}

func newTarget(t *testing.T, typ string) *target {
	t.Helper()
	x := &target{typ: typ}
	switch typ {
	case spec.TypeSQLite:
		x.path = filepath.Join(t.TempDir(), "x.db")
		x.decl = fmt.Sprintf("{type: sqlite, path: %q}", x.path)
	case spec.TypeMySQL:
		x.dsn = testenv.MySQLDSN(t)
		x.decl = fmt.Sprintf("{type: mysql, dsn: %q}", x.dsn)
	case spec.TypePostgres:
		x.dsn = testenv.PostgresDSN(t)
		x.decl = fmt.Sprintf("{type: postgres, dsn: %q, schema: coordd}", x.dsn)
	case spec.TypeRedis:
		x.url, x.pfx = testenv.RedisURL(t)
		x.decl = fmt.Sprintf("{type: redis, url: %q, key_prefix: %q}", x.url, x.pfx)
	case spec.TypeMemcached:
		x.addr, x.pfx = testenv.MemcachedAddr(t)
		x.decl = fmt.Sprintf("{type: memcached, servers: [%q], key_prefix: %q}", x.addr, x.pfx)
	default:
		t.Fatalf("no target of type %s", typ)
	}
	return x
}

// each runs fn once per backend type, as a subtest.
func each(t *testing.T, types []string, fn func(t *testing.T, x *target)) {
	for _, typ := range types {
		t.Run(typ, func(t *testing.T) { fn(t, newTarget(t, typ)) })
	}
}

// written reports whether coordd left anything in x: a file, a table, a
// key.
func (x *target) written(t *testing.T) bool {
	t.Helper()
	ctx := context.Background()
	switch x.typ {
	case spec.TypeSQLite:
		_, err := os.Stat(x.path)
		return !errors.Is(err, os.ErrNotExist)
	case spec.TypeMySQL:
		db, err := sql.Open("mysql", x.dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var n int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE()").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	case spec.TypePostgres:
		db, err := sql.Open("pgx", x.dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		// A table anywhere, or a schema besides the ones every database has.
		var n int
		if err := db.QueryRowContext(ctx, `SELECT (SELECT COUNT(*) FROM information_schema.tables
			WHERE table_schema NOT IN ('pg_catalog', 'information_schema'))
			+ (SELECT COUNT(*) FROM pg_namespace
			WHERE nspname NOT IN ('public', 'information_schema') AND nspname NOT LIKE 'pg\_%')`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	case spec.TypeRedis:
		opts, err := goredis.ParseURL(x.url)
		if err != nil {
			t.Fatal(err)
		}
		c := goredis.NewClient(opts)
		defer c.Close()
		keys, _, err := c.Scan(ctx, 0, x.pfx+"*", 1000).Result()
		if err != nil {
			t.Fatal(err)
		}
		return len(keys) > 0
	}
	t.Fatalf("written: no check for %s", x.typ)
	return false
}

// spec loads the fixture's current spec.
func (f *fixture) spec() *spec.Spec {
	f.t.Helper()
	s, err := spec.Load(f.dir, spec.LoadOptions{DataDir: f.dataDir, Getenv: func(string) (string, bool) { return "", false }})
	if err != nil {
		f.t.Fatalf("load spec: %v", err)
	}
	return s
}

// handle opens a runtime handle on backend name of the current spec, as a
// `sem run` or a daemon would.
func (f *fixture) handle(name string) backends.Backend {
	f.t.Helper()
	b := f.spec().Backends[name]
	if b == nil {
		f.t.Fatalf("no backend %s in the spec", name)
	}
	h, err := open.Open(context.Background(), b, backends.Options{Version: "0.1.0"})
	if err != nil {
		f.t.Fatalf("open %s: %v", name, err)
	}
	f.t.Cleanup(func() { h.Close() })
	return h
}

func observeSem(t *testing.T, b backends.Backend, name string) *backends.SemaphoreState {
	t.Helper()
	m, err := b.Semaphores().ObserveSemaphores(context.Background(), []string{name})
	if err != nil {
		t.Fatal(err)
	}
	return m[name]
}

func grab(t *testing.T, b backends.Backend, name string) (owner string, g backends.Grant, err error) {
	t.Helper()
	owner = fmt.Sprintf("owner-%d", time.Now().UnixNano())
	g, err = b.Semaphores().TryAcquire(context.Background(), backends.SemRef{Name: name}, backends.AcquireRequest{Owner: owner, Host: "h", PID: 1, Lease: time.Minute})
	return owner, g, err
}

func mustGrab(t *testing.T, b backends.Backend, name string) (string, backends.Grant) {
	t.Helper()
	owner, g, err := grab(t, b, name)
	if err != nil {
		t.Fatalf("acquire %s: %v", name, err)
	}
	return owner, g
}

func noChanges(t *testing.T, f *fixture, what string) {
	t.Helper()
	if p := f.plan(reconcile.Options{}); p.HasChanges() || len(p.Waiting) != 0 || len(p.Blocked) != 0 {
		t.Fatalf("%s: want no changes:\n%s", what, text(p))
	}
}

// TestPromisePlanIsReadOnly: "plan opens backends read-only: it never
// creates a file, migrates a schema or changes state", on every backend;
// apply then creates, and a second apply records nothing.
func TestPromisePlanIsReadOnly(t *testing.T) {
	each(t, clusterTypes, func(t *testing.T, x *target) {
		f := newFixture(t)
		f.write("backends:\n  x: " + x.decl + `
semaphores:
  s: {limit: 2}
cron:
  c: {schedule: "@daily", command: "true"}
queues:
  q: {partitions: 2}
`)
		p := f.plan(reconcile.Options{})
		if p.SummaryLine() != "Plan: 3 to add, 0 to change, 0 to destroy." {
			t.Fatalf("first plan:\n%s", text(p))
		}
		if x.written(t) {
			t.Fatalf("plan wrote to the %s backend", x.typ)
		}
		if res := f.apply(reconcile.Options{}); res.Generation != 1 {
			t.Fatalf("first apply: generation %d, want 1", res.Generation)
		}
		noChanges(t, f, "after apply")
		if res := f.apply(reconcile.Options{}); res.Generation != 0 || res.Applied != 0 {
			t.Fatalf("a second apply did something: %+v", res)
		}
	})
}

// TestPromiseHalfDoneApplyRepaired: "a crash half-way through an apply is
// repaired by the next plan: an object that was created but not recorded
// shows as + again and is adopted; one that was deleted but not forgotten
// shows as - again and the delete is a no-op". The adopted semaphore keeps
// its holder and still admits exactly its limit.
func TestPromiseHalfDoneApplyRepaired(t *testing.T) {
	each(t, clusterTypes, func(t *testing.T, x *target) {
		f := newFixture(t)
		head := "backends:\n  x: " + x.decl + "\nsemaphores:\n  s: {limit: 2}\n"
		f.write(head + "cron:\n  c: {schedule: \"@daily\", command: \"true\"}\nqueues:\n  q: {}\n")
		f.apply(reconcile.Options{})
		h := f.handle("x")
		ctx := context.Background()
		mustGrab(t, h, "s")

		// Created but not recorded: the inventory forgets semaphore.s.
		ss := h.Cluster()
		unlock, err := ss.TryLockApply(ctx, "crash", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ss.CommitApply(ctx, "crash", backends.ApplyRecord{SpecHash: "half", Host: "crashed"}, nil,
			[]spec.Address{{Kind: spec.KindSemaphore, Name: "s"}}); err != nil {
			t.Fatal(err)
		}
		if err := unlock(ctx); err != nil {
			t.Fatal(err)
		}
		p := f.plan(reconcile.Options{})
		if !strings.Contains(text(p), "+ semaphore.s") || p.Summary.Add != 1 || len(p.Blocked) != 0 {
			t.Fatalf("an unrecorded object should show as + again:\n%s", text(p))
		}
		f.apply(reconcile.Options{})
		noChanges(t, f, "after adopting semaphore.s")
		if st := observeSem(t, h, "s"); st == nil || len(st.Holders) != 1 || st.Config.Limit != 2 {
			t.Fatalf("adopted semaphore: %+v, want its holder kept and limit 2", st)
		}
		mustGrab(t, h, "s")
		if _, _, err := grab(t, h, "s"); !errors.Is(err, backends.ErrNoSlot) {
			t.Fatalf("third acquire on the adopted limit-2 semaphore: %v, want ErrNoSlot", err)
		}

		// Deleted but not forgotten: the objects are gone from the backend
		// while the inventory still lists them.
		if err := h.Crons().DeleteCron(ctx, "c"); err != nil {
			t.Fatal(err)
		}
		if err := h.Queues().DeleteQueue(ctx, "q", true); err != nil {
			t.Fatal(err)
		}
		f.write(head)
		p = f.plan(reconcile.Options{})
		if out := text(p); !strings.Contains(out, "- cron.c") || !strings.Contains(out, "- queue.q") || p.Summary.Destroy != 2 || len(p.Blocked) != 0 {
			t.Fatalf("deleted but recorded objects should show as - again:\n%s", out)
		}
		f.apply(reconcile.Options{})
		noChanges(t, f, "after the no-op deletes")
		st, err := ss.LoadState(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Entries) != 1 || st.Entries[0].Address.String() != "semaphore.s" {
			t.Fatalf("inventory after the deletes: %+v, want semaphore.s alone", st.Entries)
		}
	})
}

// TestPromisePruneOnlyInventory: "Prune only touches inventory entries. An
// object coordd never created, or one created by a different cluster
// backend, is never deleted." Two clusters share backend x, each with its
// state in a file of its own; cluster B deletes everything it applied and
// nothing else.
func TestPromisePruneOnlyInventory(t *testing.T) {
	each(t, objectTypes, func(t *testing.T, x *target) {
		root := t.TempDir()
		a, b := newFixture(t), newFixture(t)
		clusterSpec := func(name string) string {
			return fmt.Sprintf("backends:\n  %s: {type: sqlite, path: %q}\n  x: %s\ncluster: {backend: %s}\n", name, filepath.Join(root, name+".db"), x.decl, name)
		}
		a.write(clusterSpec("a") + "semaphores:\n  mine-a: {backend: x, limit: 1}\n")
		b.write(clusterSpec("b") + "semaphores:\n  mine-b: {backend: x, limit: 1}\n")
		a.apply(reconcile.Options{})
		b.apply(reconcile.Options{})
		h := a.handle("x")
		lim := -1
		if x.typ == spec.TypeMemcached {
			lim = -1 // memcached keeps no waiter line
		}
		if err := h.Semaphores().PutSemaphore(context.Background(),
			backends.SemaphoreConfig{Name: "foreign", Limit: 1, Lease: time.Minute, Mode: spec.ModeLease, MaxWaiting: lim}); err != nil {
			t.Fatal(err)
		}

		b.write(clusterSpec("b"))
		p := b.plan(reconcile.Options{AllowEmpty: true})
		if out := text(p); p.Summary.Destroy != 1 || !strings.Contains(out, "- semaphore.mine-b") ||
			strings.Contains(out, "mine-a") || strings.Contains(out, "foreign") {
			t.Fatalf("cluster b's plan must delete mine-b alone:\n%s", out)
		}
		b.apply(reconcile.Options{AllowEmpty: true})
		if observeSem(t, h, "mine-b") != nil {
			t.Fatal("mine-b is still there")
		}
		for _, n := range []string{"mine-a", "foreign"} {
			if st := observeSem(t, h, n); st == nil || st.Config.Limit != 1 {
				t.Fatalf("%s after cluster b's prune: %+v, want it untouched", n, st)
			}
		}
		noChanges(t, a, "cluster a after b's prune")
	})
}

// TestPromiseReplaceGuards: "prevent_destroy: true blocks deleting or
// replacing an object" and "Deleting or replacing a queue that still holds
// jobs is refused unless --allow-destroy-jobs" (a delayed job included),
// for an object moving from backend x to another one; a refused apply
// changes nothing.
func TestPromiseReplaceGuards(t *testing.T) {
	each(t, objectTypes, func(t *testing.T, x *target) {
		f := newFixture(t)
		queues := x.typ != spec.TypeMemcached
		write := func(on string, protect bool) {
			y := fmt.Sprintf("backends:\n  local: {type: sqlite, path: ../data/local.db}\n  x: %s\ncluster: {backend: local}\n", x.decl)
			y += fmt.Sprintf("semaphores:\n  p: {backend: %s, limit: 2, prevent_destroy: %v}\n", on, protect)
			if queues {
				y += fmt.Sprintf("queues:\n  q: {backend: %s}\n", on)
			}
			f.write(y)
		}
		write("x", true)
		f.apply(reconcile.Options{})
		h, local := f.handle("x"), f.handle("local")
		if queues {
			// A delayed job is a job too: the guard must count it.
			if _, err := h.Queues().Push(context.Background(), "q", backends.PushRequest{Payload: []byte("job"), Delay: time.Hour}); err != nil {
				t.Fatal(err)
			}
		}

		write("local", true)
		p := f.plan(reconcile.Options{})
		blocked := strings.Join(p.Blocked, "\n")
		if !strings.Contains(blocked, "semaphore.p: prevent_destroy") {
			t.Fatalf("replacing a prevent_destroy semaphore is not blocked:\n%s", text(p))
		}
		if queues && !strings.Contains(blocked, "queue.q: 1 job(s) on x") {
			t.Fatalf("replacing a queue with a job is not blocked:\n%s", text(p))
		}
		if _, err := f.engine(false).Apply(context.Background(), reconcile.Options{}, ""); !errors.Is(err, reconcile.ErrBlocked) {
			t.Fatalf("apply of a blocked replace: %v, want ErrBlocked", err)
		}
		if st := observeSem(t, h, "p"); st == nil || st.Config.Limit != 2 {
			t.Fatalf("the refused replace changed p on x: %+v", st)
		}
		if st := observeSem(t, local, "p"); st != nil {
			t.Fatalf("the refused replace created p on local: %+v", st)
		}

		// Lift the flag first; the queue's job still blocks without the flag.
		write("x", false)
		f.apply(reconcile.Options{})
		write("local", false)
		if queues {
			if _, err := f.engine(false).Apply(context.Background(), reconcile.Options{}, ""); !errors.Is(err, reconcile.ErrBlocked) {
				t.Fatalf("replace of a queue with a job: %v, want ErrBlocked", err)
			}
			qs, err := h.Queues().ObserveQueues(context.Background(), []string{"q"})
			if err != nil || qs["q"] == nil || qs["q"].Jobs() != 1 {
				t.Fatalf("the refused replace touched the queue: %+v, %v", qs["q"], err)
			}
		}
		f.apply(reconcile.Options{AllowDestroyJobs: true})
		noChanges(t, f, "after the replace")
		if st := observeSem(t, local, "p"); st == nil || st.Config.Limit != 2 {
			t.Fatalf("p on local after the replace: %+v", st)
		}
	})
}

// TestPromiseFencingAboveAfterRecreate: "a semaphore deleted and created
// again, or replaced onto another backend, still hands out numbers above
// any an old holder can have", and a new counter starts at the backend's
// time in microseconds. memcached's clock counts whole seconds (and its
// `stats` time lags), so across backends it holds there once the grant is
// two seconds old: the test waits for that before each move on memcached.
// It fails if memcached keeps the counter of a deleted semaphore: a
// semaphore replaced away and back would hand out numbers below those its
// holders had on the other backend.
func TestPromiseFencingAboveAfterRecreate(t *testing.T) {
	each(t, objectTypes, func(t *testing.T, x *target) {
		f := newFixture(t)
		head := fmt.Sprintf("backends:\n  local: {type: sqlite, path: ../data/local.db}\n  x: %s\ncluster: {backend: local}\n", x.decl)
		on := func(b string) string { return head + fmt.Sprintf("semaphores:\n  s: {backend: %s, limit: 1}\n", b) }
		handles := map[string]backends.Backend{}
		hd := func(b string) backends.Backend {
			if handles[b] == nil {
				handles[b] = f.handle(b)
			}
			return handles[b]
		}
		var last int64
		var lastAt time.Time
		settle := func() {
			t.Helper()
			if x.typ != spec.TypeMemcached {
				return
			}
			for _, b := range []string{"x", "local"} {
				waitPast(t, hd(b), lastAt.Add(2*time.Second))
			}
		}
		take := func(b, what string) {
			t.Helper()
			h := hd(b)
			owner, g := mustGrab(t, h, "s")
			lastAt = time.Now()
			if g.Fencing <= last {
				t.Fatalf("%s: fencing %d, not above %d handed out before", what, g.Fencing, last)
			}
			last = g.Fencing
			if err := h.Semaphores().Release(context.Background(), backends.SemRef{Name: "s"}, owner); err != nil {
				t.Fatal(err)
			}
		}

		f.write(on("x"))
		before := time.Now().Add(-time.Minute) // the backend's clock, within a minute of the host's
		f.apply(reconcile.Options{})
		take("x", "first holder")
		if last < before.UnixMicro() {
			t.Fatalf("first fencing number %d is below the backend time in µs (%d)", last, before.UnixMicro())
		}
		take("x", "second holder")

		f.write(head)
		f.apply(reconcile.Options{AllowEmpty: true})
		if observeSem(t, hd("x"), "s") != nil {
			t.Fatal("s was not deleted")
		}
		f.write(on("x"))
		f.apply(reconcile.Options{})
		take("x", "created again")

		settle()
		f.write(on("local"))
		f.apply(reconcile.Options{})
		take("local", "replaced onto local")
		settle()
		f.write(on("x"))
		f.apply(reconcile.Options{})
		take("x", "replaced back onto x")
	})
}

// TestPromiseApplyGuardsEveryClusterBackend: the empty spec guard, the
// approved plan check and two applies at once, with the cluster state on
// each backend that can hold it; apply generations count 1, 2, 3.
func TestPromiseApplyGuardsEveryClusterBackend(t *testing.T) {
	each(t, clusterTypes, func(t *testing.T, x *target) {
		f := newFixture(t)
		head := "backends:\n  x: " + x.decl + "\n"
		f.write(head + "semaphores:\n  s: {limit: 1}\n")

		// Two applies at once: one records generation 1, the other finds
		// nothing to do.
		const n = 3
		engines := make([]*reconcile.Engine, n)
		for i := range engines {
			engines[i] = f.engine(false)
			engines[i].Host = fmt.Sprintf("host-%d", i)
		}
		var wg sync.WaitGroup
		gens, errs := make([]int64, n), make([]error, n)
		for i := range engines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := engines[i].Apply(context.Background(), reconcile.Options{}, "")
				if res != nil {
					gens[i] = res.Generation
				}
				errs[i] = err
			}()
		}
		wg.Wait()
		applied := 0
		for i := range engines {
			if errs[i] != nil {
				t.Fatalf("concurrent apply %d: %v", i, errs[i])
			}
			if gens[i] > 0 {
				applied++
				if gens[i] != 1 {
					t.Fatalf("first generation %d, want 1", gens[i])
				}
			}
		}
		if applied != 1 {
			t.Fatalf("%d concurrent applies recorded a generation, want 1", applied)
		}

		// An approved plan that another apply made stale changes nothing.
		f.write(head + "semaphores:\n  s: {limit: 2}\n")
		e := f.engine(false)
		p, err := e.Plan(context.Background(), reconcile.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if res := f.apply(reconcile.Options{}); res.Generation != 2 {
			t.Fatalf("second generation %d, want 2", res.Generation)
		}
		f.write(head + "semaphores:\n  s: {limit: 3}\n")
		if _, err := e.Apply(context.Background(), reconcile.Options{}, p.Fingerprint()); !errors.Is(err, reconcile.ErrPlanChanged) {
			t.Fatalf("apply of a stale approval: %v, want ErrPlanChanged", err)
		}

		// An empty spec is refused and deletes nothing.
		f.write(head)
		if _, err := f.engine(false).Apply(context.Background(), reconcile.Options{}, ""); !errors.Is(err, reconcile.ErrBlocked) {
			t.Fatalf("apply of an empty spec: %v, want ErrBlocked", err)
		}
		if st := observeSem(t, f.handle("x"), "s"); st == nil || st.Config.Limit != 2 {
			t.Fatalf("the refused empty apply changed s: %+v", st)
		}
		if res := f.apply(reconcile.Options{AllowEmpty: true}); res.Generation != 3 {
			t.Fatalf("third generation %d, want 3", res.Generation)
		}
	})
}

// TestPromiseDriftRepaired: "drift made outside coordd (a deleted row, a
// lost token) shows up in the plan and is repaired": a cron task deleted
// from backend x behind coordd's back; on memcached, where a semaphore is
// keys that may be evicted, its config and its fencing counter.
func TestPromiseDriftRepaired(t *testing.T) {
	each(t, objectTypes, func(t *testing.T, x *target) {
		f := newFixture(t)
		y := fmt.Sprintf("backends:\n  local: {type: sqlite, path: ../data/local.db}\n  x: %s\ncluster: {backend: local}\n", x.decl)
		y += "semaphores:\n  s: {backend: x, limit: 2}\n"
		if x.typ != spec.TypeMemcached {
			y += "cron:\n  c: {backend: x, schedule: \"@daily\", command: \"true\"}\n"
		}
		f.write(y)
		f.apply(reconcile.Options{})
		h := f.handle("x")
		ctx := context.Background()
		var want []string
		if x.typ == spec.TypeMemcached {
			_, g := mustGrab(t, h, "s")
			mc := memcache.New(x.addr)
			for _, k := range []string{"cfg", "fencing"} {
				if err := mc.Delete(x.pfx + "{sem:s}" + k); err != nil {
					t.Fatalf("delete %s: %v", k, err)
				}
			}
			_ = mc.Close()
			want = []string{"semaphore.s", "missing in backend x"}
			defer func() {
				_, g2 := mustGrab(t, h, "s")
				if g2.Fencing <= g.Fencing {
					t.Errorf("fencing after the repair %d, not above %d", g2.Fencing, g.Fencing)
				}
			}()
		} else {
			if err := h.Crons().DeleteCron(ctx, "c"); err != nil {
				t.Fatal(err)
			}
			want = []string{"cron.c", "missing in backend x"}
		}
		p := f.plan(reconcile.Options{})
		out := text(p)
		if len(p.Changes) != 0 || len(p.Drift) != 1 || !strings.Contains(out, "Drift: state changed outside coordd") {
			t.Fatalf("want one drift entry and no spec change:\n%s", out)
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Fatalf("plan lacks %q:\n%s", w, out)
			}
		}
		f.apply(reconcile.Options{})
		noChanges(t, f, "after the repair")
		if x.typ != spec.TypeMemcached {
			crons, err := h.Crons().ObserveCrons(ctx, []string{"c"})
			if err != nil || crons["c"] == nil || crons["c"].NextExec.IsZero() {
				t.Fatalf("cron task not repaired: %+v, %v", crons["c"], err)
			}
		}
	})
}

// waitPast waits until backend b's clock is past at.
func waitPast(t *testing.T, b backends.Backend, at time.Time) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		now, err := b.Now(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if now.After(at) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s clock still at %v, waiting for %v", b.Name(), now, at)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestPromiseRedisLossRecreatesCronAndQueuesAtOnce: when Redis lost its
// data, "Cron tasks and queues are re-created at once (their next run
// times recomputed; the jobs are lost)" while the semaphores wait for the
// hold (operations.md, "When Redis loses its data").
func TestPromiseRedisLossRecreatesCronAndQueuesAtOnce(t *testing.T) {
	x := newTarget(t, spec.TypeRedis)
	f := newFixture(t)
	f.write(fmt.Sprintf(`backends:
  local: {type: sqlite, path: ../data/local.db}
  x: %s
cluster: {backend: local}
semaphores:
  s: {backend: x, limit: 1, lease: 1m}
cron:
  c: {backend: x, schedule: "@daily", command: "true"}
queues:
  q: {backend: x}
`, x.decl))
	f.apply(reconcile.Options{})
	h := f.handle("x")
	ctx := context.Background()
	opts, err := goredis.ParseURL(x.url)
	if err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(opts)
	defer c.Close()
	if _, err := testenv.DeleteRedisPrefix(ctx, c, x.pfx); err != nil {
		t.Fatal(err)
	}

	p := f.plan(reconcile.Options{})
	waiting := ""
	for _, w := range p.Waiting {
		waiting += w.Address.String() + " "
	}
	if waiting != "semaphore.s " {
		t.Fatalf("waiting %q, want the semaphore alone:\n%s", waiting, text(p))
	}
	f.applyHeld()
	crons, err := h.Crons().ObserveCrons(ctx, []string{"c"})
	if err != nil || crons["c"] == nil || crons["c"].NextExec.IsZero() {
		t.Fatalf("cron task after the loss: %+v, %v; want it re-created with a next run", crons["c"], err)
	}
	if qs, err := h.Queues().ObserveQueues(ctx, []string{"q"}); err != nil || qs["q"] == nil {
		t.Fatalf("queue after the loss: %+v, %v; want it re-created", qs["q"], err)
	}
	if _, err := h.Queues().Push(ctx, "q", backends.PushRequest{Payload: []byte("again")}); err != nil {
		t.Fatalf("push after the loss: %v", err)
	}
	if st := observeSem(t, h, "s"); st != nil {
		t.Fatalf("the semaphore came back during the hold: %+v", st)
	}
}

// TestPromiseApplyOrder: apply "executes the changes in order: semaphores,
// cron tasks, queues, then deletes in reverse kind order (a cron task that
// names a semaphore goes before the semaphore)", the order design.md
// states.
func TestPromiseApplyOrder(t *testing.T) {
	f := newFixture(t)
	head := "backends:\n  db: {type: sqlite, path: ../data/db.db}\n"
	f.write(head + `cron:
  c: {schedule: "@daily", command: "true", semaphore: s}
queues:
  q: {}
semaphores:
  s: {limit: 1}
`)
	order := func(p *reconcile.Plan) string {
		var out []string
		for _, c := range p.Changes {
			out = append(out, c.Action.Symbol()+c.Address.String())
		}
		return strings.Join(out, " ")
	}
	if got := order(f.plan(reconcile.Options{})); got != "+semaphore.s +cron.c +queue.q" {
		t.Fatalf("create order %q, want semaphores, cron tasks, queues", got)
	}
	f.apply(reconcile.Options{})
	f.write(head + "semaphores:\n  keep: {limit: 1}\n")
	if got := order(f.plan(reconcile.Options{})); got != "+semaphore.keep -queue.q -cron.c -semaphore.s" {
		t.Fatalf("delete order %q, want creates first, then queues, cron tasks, semaphores", got)
	}
	f.apply(reconcile.Options{})
	noChanges(t, f, "after the deletes")
}

// TestPromiseCronNextExecEveryBackend: run_on_create "run once when the
// task is first applied" (due at once); a command change "applies from the
// next run" (next_exec kept); a schedule or timezone change recomputes it,
// on every backend that holds cron tasks.
func TestPromiseCronNextExecEveryBackend(t *testing.T) {
	each(t, clusterTypes, func(t *testing.T, x *target) {
		f := newFixture(t)
		task := func(cmd, tz string, onCreate bool) string {
			return fmt.Sprintf("backends:\n  x: %s\ncron:\n  c: {schedule: \"0 4 * * *\", timezone: %s, command: %q, run_on_create: %v}\n  d: {schedule: \"0 4 * * *\", timezone: %s, command: \"true\"}\n", x.decl, tz, cmd, onCreate, tz)
		}
		f.write(task("true", "Asia/Tokyo", true))
		f.apply(reconcile.Options{})
		h := f.handle("x")
		ctx := context.Background()
		observe := func() map[string]*backends.CronState {
			t.Helper()
			m, err := h.Crons().ObserveCrons(ctx, []string{"c", "d"})
			if err != nil || m["c"] == nil || m["d"] == nil {
				t.Fatalf("observe crons: %v, %v", m, err)
			}
			return m
		}
		now, err := h.Now(ctx)
		if err != nil {
			t.Fatal(err)
		}
		first := observe()
		if first["c"].NextExec.After(now) {
			t.Fatalf("run_on_create: next_exec %v is after now %v", first["c"].NextExec, now)
		}
		if d := first["d"].NextExec; !d.After(now) || d.UTC().Hour() != 19 {
			t.Fatalf("next_exec %v, want the next 04:00 Tokyo (19:00 UTC) after %v", d, now)
		}

		f.write(task("echo changed", "Asia/Tokyo", true))
		f.apply(reconcile.Options{})
		if got := observe(); !got["d"].NextExec.Equal(first["d"].NextExec) || !got["c"].NextExec.Equal(first["c"].NextExec) {
			t.Fatalf("a command change moved next_exec: %v -> %v", first["c"].NextExec, got["c"].NextExec)
		}
		f.write(task("echo changed", "UTC", true))
		f.apply(reconcile.Options{})
		if got := observe(); got["d"].NextExec.UTC().Hour() != 4 {
			t.Fatalf("a timezone change kept next_exec %v, want 04:00 UTC", got["d"].NextExec)
		}
	})
}

// TestPromiseReplaceAdmitsNobodyUntilDrained: a replace (a change of
// `backend`) "creates the new one with limit 0 until the old holders are
// gone ... The new object never admits anybody while the old one still has
// holders", from every backend that holds semaphores onto a local file.
func TestPromiseReplaceAdmitsNobodyUntilDrained(t *testing.T) {
	each(t, objectTypes, func(t *testing.T, x *target) {
		f := newFixture(t)
		on := func(b string) string {
			return fmt.Sprintf("backends:\n  local: {type: sqlite, path: ../data/local.db}\n  x: %s\ncluster: {backend: local}\nsemaphores:\n  s: {backend: %s, limit: 2}\n", x.decl, b)
		}
		f.write(on("x"))
		f.apply(reconcile.Options{})
		h, local := f.handle("x"), f.handle("local")
		owner, _ := mustGrab(t, h, "s")

		f.write(on("local"))
		f.apply(reconcile.Options{})
		for _, b := range []backends.Backend{h, local} {
			if _, _, err := grab(t, b, "s"); err == nil {
				t.Fatalf("%s admitted a holder while the old one holds on x", b.Name())
			}
		}
		if p := f.plan(reconcile.Options{}); p.HasChanges() || len(p.Waiting) != 1 {
			t.Fatalf("plan while the replace drains:\n%s", text(p))
		}
		if err := h.Semaphores().Release(context.Background(), backends.SemRef{Name: "s"}, owner); err != nil {
			t.Fatal(err)
		}
		f.apply(reconcile.Options{})
		mustGrab(t, local, "s")
		mustGrab(t, local, "s")
		if _, _, err := grab(t, local, "s"); !errors.Is(err, backends.ErrNoSlot) {
			t.Fatalf("third acquire after the replace: %v, want ErrNoSlot", err)
		}
		if st := observeSem(t, h, "s"); st != nil {
			t.Fatalf("the old semaphore is still on x: %+v", st)
		}
		noChanges(t, f, "after the replace")
	})
}
