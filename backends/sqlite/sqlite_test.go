package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/backendtest"
	"github.com/coordd/coordd/backends/sqlite"
	"github.com/coordd/coordd/spec"
)

func TestMain(m *testing.M) {
	if os.Getenv(openerEnv) != "" {
		os.Exit(opener()) // a child of TestConcurrentOpenMigrate
	}
	goleak.VerifyTestMain(m)
}

// openStore opens a handle closed by t.Cleanup.
func openStore(t testing.TB, path string, opts backends.Options) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), "embedded", path, opts)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return s
}

func migrated(t testing.TB, path string) *sqlite.Store {
	t.Helper()
	s := openStore(t, path, backends.Options{Version: "0.1.0"})
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return s
}

// execSQL runs raw SQL behind coordd's back.
func execSQL(t *testing.T, b backends.Backend, query string, args ...any) {
	t.Helper()
	if _, err := b.(*sqlite.Store).DB().ExecContext(t.Context(), query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

func harness() backendtest.Harness {
	return backendtest.Harness{
		New: func(t *testing.T) func() backends.Backend {
			// A directory that does not exist yet: Open must create it.
			path := filepath.Join(t.TempDir(), "data", "coordd.db")
			return func() backends.Backend { return openStore(t, path, backends.Options{Version: "0.1.0"}) }
		},
		DeleteSlot: func(t *testing.T, b backends.Backend, name string, slot int) {
			execSQL(t, b, `DELETE FROM semaphore_slots WHERE name = ? AND slot = ?`, name, slot)
		},
		InstanceRows: instanceRows,
		InsertJobs: func(t *testing.T, b backends.Backend, queue string, p, n int) {
			for i := range n {
				execSQL(t, b, `INSERT INTO queue_jobs (queue, partition, payload, state, available_at, enqueued_at)
VALUES (?, ?, ?, 'ready', 0, 0)`, queue, p, []byte(fmt.Sprintf("job %d", i)))
			}
		},
	}
}

func TestConformance(t *testing.T) { backendtest.Run(t, harness()) }

// instanceRows lists the rows of every instance of keyed semaphore name,
// whatever their state.
func instanceRows(t *testing.T, b backends.Backend, name string) []string {
	t.Helper()
	rows, err := b.(*sqlite.Store).DB().QueryContext(t.Context(), `
SELECT 'slot ' || ikey || ' ' || slot || ' ' || owner FROM semaphore_instance_slots WHERE name = ?1
UNION ALL SELECT 'waiter ' || ikey || ' ' || owner FROM semaphore_instance_waiters WHERE name = ?1`, name)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var r string
		if err := rows.Scan(&r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestReadOnlyMissingFile(t *testing.T) {
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "absent")
	path := filepath.Join(dir, "coordd.db")
	s := openStore(t, path, backends.Options{ReadOnly: true, Version: "0.1.0"})

	st, err := s.LoadState(ctx)
	if err != nil || len(st.Entries) != 0 || st.Last != nil {
		t.Fatalf("load state = %+v, %v; want empty", st, err)
	}
	sems, err := s.ObserveSemaphores(ctx, []string{"a"})
	if err != nil || len(sems) != 0 {
		t.Fatalf("observe semaphores = %v, %v; want empty", sems, err)
	}
	crons, err := s.ObserveCrons(ctx, []string{"a"})
	if err != nil || len(crons) != 0 {
		t.Fatalf("observe crons = %v, %v; want empty", crons, err)
	}
	queues, err := s.ObserveQueues(ctx, []string{"a"})
	if err != nil || len(queues) != 0 {
		t.Fatalf("observe queues = %v, %v; want empty", queues, err)
	}
	hs, err := s.Holders(ctx, backends.SemRef{Name: "a"})
	if err != nil || len(hs) != 0 {
		t.Fatalf("holders = %v, %v; want none", hs, err)
	}
	info, err := s.Schema(ctx)
	if err != nil || info.Version != 0 || info.Latest < 1 {
		t.Fatalf("schema = %+v, %v; want version 0", info, err)
	}
	if now, err := s.Now(ctx); err != nil || now.IsZero() {
		t.Fatalf("now = %v, %v", now, err)
	}
	if err := s.Migrate(ctx); !errors.Is(err, sqlite.ErrReadOnly) {
		t.Errorf("migrate = %v, want ErrReadOnly", err)
	}
	if err := s.PutSemaphore(ctx, backends.SemaphoreConfig{Name: "a", Limit: 1}); !errors.Is(err, sqlite.ErrReadOnly) {
		t.Errorf("put semaphore = %v, want ErrReadOnly", err)
	}
	if _, err := s.TryLockApply(ctx, "me", time.Minute); !errors.Is(err, sqlite.ErrReadOnly) {
		t.Errorf("lock apply = %v, want ErrReadOnly", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("read-only open created %s (stat: %v)", dir, err)
	}
}

func TestReadOnlyExistingFile(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "coordd.db")
	w := migrated(t, path)
	if err := w.PutSemaphore(ctx, backends.SemaphoreConfig{Name: "s", Limit: 2, Lease: time.Minute, Mode: "lease", MaxWaiting: -1}); err != nil {
		t.Fatal(err)
	}
	r := openStore(t, path, backends.Options{ReadOnly: true})
	m, err := r.ObserveSemaphores(ctx, []string{"s"})
	if err != nil || m["s"] == nil || m["s"].Slots != 2 || m["s"].Config.MaxWaiting != -1 {
		t.Fatalf("read-only observe = %v, %v; want s with 2 slots", m, err)
	}
	info, err := r.Schema(ctx)
	if err != nil || info.Version != info.Latest {
		t.Fatalf("read-only schema = %+v, %v", info, err)
	}
	if err := r.PutSemaphore(ctx, backends.SemaphoreConfig{Name: "s", Limit: 5}); !errors.Is(err, sqlite.ErrReadOnly) {
		t.Errorf("read-only put = %v, want ErrReadOnly", err)
	}
	if _, err := r.TryAcquire(ctx, backends.SemRef{Name: "s"}, backends.AcquireRequest{Owner: "o", Lease: time.Minute}); !errors.Is(err, sqlite.ErrReadOnly) {
		t.Errorf("read-only acquire = %v, want ErrReadOnly", err)
	}
	if m, _ := w.ObserveSemaphores(ctx, []string{"s"}); m["s"].Config.Limit != 2 || len(m["s"].Holders) != 0 {
		t.Errorf("read-only handle changed the store: %+v", m["s"])
	}
}

func TestUnmigratedReadsEmpty(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "coordd.db")
	s := openStore(t, path, backends.Options{})
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("writable open did not create the file: %v", err)
	}
	for _, b := range []*sqlite.Store{s, openStore(t, path, backends.Options{ReadOnly: true})} {
		st, err := b.LoadState(ctx)
		if err != nil || len(st.Entries) != 0 || st.Last != nil {
			t.Fatalf("load state = %+v, %v; want empty", st, err)
		}
		sems, err := b.ObserveSemaphores(ctx, []string{"a"})
		if err != nil || len(sems) != 0 {
			t.Fatalf("observe semaphores = %v, %v; want empty", sems, err)
		}
		info, err := b.Schema(ctx)
		if err != nil || info.Version != 0 {
			t.Fatalf("schema = %+v, %v; want version 0", info, err)
		}
	}
	if err := s.PutSemaphore(ctx, backends.SemaphoreConfig{Name: "a", Limit: 1}); err == nil {
		t.Fatal("put semaphore on an unmigrated store succeeded")
	}
}

func TestTwoHandlesOneFile(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "coordd.db")
	a := migrated(t, path)
	b := openStore(t, path, backends.Options{Version: "0.1.0"})
	if err := a.PutSemaphore(ctx, backends.SemaphoreConfig{Name: "s", Limit: 1, Lease: time.Minute, Mode: "lease"}); err != nil {
		t.Fatal(err)
	}
	g, err := b.TryAcquire(ctx, backends.SemRef{Name: "s"}, backends.AcquireRequest{Owner: "ob", Host: "h", PID: 1, Lease: time.Minute})
	if err != nil {
		t.Fatalf("acquire through the second handle: %v", err)
	}
	if _, err := a.TryAcquire(ctx, backends.SemRef{Name: "s"}, backends.AcquireRequest{Owner: "oa", Lease: time.Minute}); !errors.Is(err, backends.ErrNoSlot) {
		t.Fatalf("acquire through the first handle = %v, want ErrNoSlot", err)
	}
	hs, err := a.Holders(ctx, backends.SemRef{Name: "s"})
	if err != nil || len(hs) != 1 || hs[0].Owner != "ob" || hs[0].Fencing != g.Fencing {
		t.Fatalf("holders seen by the first handle = %+v, %v", hs, err)
	}
	if err := a.Release(ctx, backends.SemRef{Name: "s"}, "ob"); err != nil {
		t.Fatalf("release of b's grant through a: %v", err)
	}
}

func TestSchemaTooNew(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "coordd.db")
	s := migrated(t, path)
	execSQL(t, s, `UPDATE schema_migrations SET min_binary = '0.3.0'`)
	info, err := s.Schema(ctx)
	if err != nil || info.MinBinary != "0.3.0" {
		t.Fatalf("schema = %+v, %v; want min_binary 0.3.0", info, err)
	}
	for _, v := range []string{"0.1.0", "v0.2.9", "0.2.99-rc1"} {
		err := openStore(t, path, backends.Options{Version: v}).Migrate(ctx)
		if !errors.Is(err, backends.ErrSchemaTooNew) {
			t.Errorf("migrate as %s = %v, want ErrSchemaTooNew", v, err)
		}
	}
	for _, v := range []string{"", "0.3.0", "v0.3.0-rc1", "1.0.0", "dev"} {
		if err := openStore(t, path, backends.Options{Version: v}).Migrate(ctx); err != nil {
			t.Errorf("migrate as %q = %v, want success", v, err)
		}
	}
}

func TestSpecialPath(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "we?ird #dir% x")
	path := filepath.Join(dir, "co?ordd.db")
	migrated(t, path)
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("store not at %q: %v", path, err)
	}
	info, err := openStore(t, path, backends.Options{ReadOnly: true}).Schema(t.Context())
	if err != nil || info.Version != info.Latest {
		t.Fatalf("read-only schema at %q = %+v, %v; want migrated", path, info, err)
	}
}

func TestMigrationsRecorded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "coordd.db")
	s := migrated(t, path)
	var n int
	var minBinary, by string
	var at int64
	err := s.DB().QueryRowContext(t.Context(), `SELECT count(*), min(min_binary), min(applied_by), min(applied_at) FROM schema_migrations`).Scan(&n, &minBinary, &by, &at)
	if err != nil {
		t.Fatal(err)
	}
	info, _ := s.Schema(t.Context())
	if n != info.Latest || minBinary != "0.1.0" || by != "0.1.0" || time.Since(time.UnixMicro(at)) > time.Hour {
		t.Errorf("recorded %d migrations, min_binary %s, by %s, at %v", n, minBinary, by, time.UnixMicro(at))
	}
}

// TestObserveManyFewRoundTrips observes 10,000 semaphores: all must come
// back, in a constant number of statements.
func TestObserveManyFewRoundTrips(t *testing.T) {
	ctx := t.Context()
	s := migrated(t, filepath.Join(t.TempDir(), "coordd.db"))
	names := fill(t, s, 10000)
	before := s.RoundTrips()
	start := time.Now()
	m, err := s.ObserveSemaphores(ctx, names)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("observed %d semaphores in %v", len(m), time.Since(start))
	// The transaction, configs, slots, waiters, and the holders and
	// waiters of keyed semaphores' instances.
	if trips := s.RoundTrips() - before; trips > 6 {
		t.Errorf("observe took %d round trips, want at most 6", trips)
	}
	if len(m) != len(names) {
		t.Fatalf("observed %d, want %d", len(m), len(names))
	}
	for i, n := range names {
		if st := m[n]; st == nil || st.Config.Limit != i%4+1 || st.Slots != i%4+1 || len(st.Holders) != 0 {
			t.Fatalf("%s observed as %+v", n, st)
		}
	}
}

func BenchmarkObserveSemaphores10k(b *testing.B) {
	s := migrated(b, filepath.Join(b.TempDir(), "coordd.db"))
	names := fill(b, s, 10000)
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.ObserveSemaphores(context.Background(), names); err != nil {
			b.Fatal(err)
		}
	}
}

// fill creates n semaphores sem-00000... with limits 1..4 behind coordd's
// back, in two statements (PutSemaphore is one transaction each, slow under
// -race).
func fill(t testing.TB, s *sqlite.Store, n int) []string {
	t.Helper()
	ctx := context.Background()
	if _, err := s.DB().ExecContext(ctx, `WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?)
INSERT INTO semaphores (name, lim, lease_ns, mode) SELECT printf('sem-%05d', i), i % 4 + 1, 60000000000, 'lease' FROM n`, n); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().ExecContext(ctx, `WITH RECURSIVE k(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM k WHERE i < 3)
INSERT INTO semaphore_slots (name, slot) SELECT name, i FROM semaphores, k WHERE i < lim`); err != nil {
		t.Fatal(err)
	}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("sem-%05d", i)
	}
	return names
}

// TestMigrateAllOrNothing: pending migrations apply in one transaction, so
// a reader never sees half of them and a failing one leaves the store as it
// was. The store is set back to version 4 with 0005's columns gone but
// 0006's still there: 0005 then applies and 0006 fails, and both must be
// undone. On a store left at an older version, a read that needs a newer
// column says so (ErrSchemaOld, run coordd apply); the others still work.
func TestMigrateAllOrNothing(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "coordd.db")
	s := migrated(t, path)
	execSQL(t, s, `DELETE FROM schema_migrations WHERE version > 4`)
	execSQL(t, s, `DROP TABLE notices`)
	execSQL(t, s, `DROP TABLE queue_counts`)
	execSQL(t, s, `DROP TABLE rate_limits`)
	execSQL(t, s, `DROP TABLE rate_tats`)
	execSQL(t, s, `DROP TABLE queue_once`)
	execSQL(t, s, `ALTER TABLE queue_jobs DROP COLUMN attempt_errors`)
	execSQL(t, s, `DROP INDEX queue_jobs_ready`)
	execSQL(t, s, `ALTER TABLE queue_jobs DROP COLUMN priority`)
	execSQL(t, s, `CREATE INDEX queue_jobs_ready ON queue_jobs (queue, state, id)`)
	for _, col := range []string{"paused_at", "paused_by", "paused_reason"} {
		execSQL(t, s, `ALTER TABLE queues DROP COLUMN `+col)
	}
	for _, col := range []string{"paused_at", "paused_by", "paused_reason"} {
		execSQL(t, s, `ALTER TABLE cron_tasks DROP COLUMN `+col)
	}
	r := openStore(t, path, backends.Options{Version: "0.1.0"})
	if _, err := r.ObserveSemaphores(ctx, []string{"s"}); err != nil {
		t.Fatalf("observe semaphores, which needs no newer column: %v", err)
	}
	if _, err := r.ObserveCrons(ctx, []string{"c"}); !errors.Is(err, backends.ErrSchemaOld) || !strings.Contains(err.Error(), "at version 4, this coordd reads version") {
		t.Fatalf("observe crons = %v, want ErrSchemaOld naming version 4", err)
	}
	if err := r.Migrate(ctx); err == nil || !strings.Contains(err.Error(), "0006_waiter_info") {
		t.Fatalf("migrate = %v, want 0006 to fail", err)
	}
	if info, err := r.Schema(ctx); err != nil || info.Version != 4 {
		t.Fatalf("schema after the failed migrate = %+v, %v; want version 4", info, err)
	}
	var n int
	if err := s.DB().QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info('cron_tasks') WHERE name = 'paused_at'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("0005's column after the failed migrate: %d, %v; want it rolled back", n, err)
	}
	for _, col := range []string{"host", "pid", "since"} {
		execSQL(t, s, `ALTER TABLE semaphore_waiters DROP COLUMN `+col)
		execSQL(t, s, `ALTER TABLE semaphore_instance_waiters DROP COLUMN `+col)
	}
	if err := r.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if info, err := r.Schema(ctx); err != nil || info.Version != info.Latest {
		t.Fatalf("schema = %+v, %v; want latest", info, err)
	}
	if _, err := r.ObserveCrons(ctx, []string{"c"}); err != nil {
		t.Fatal(err)
	}
}

// TestQueuePriorityMigration: 0012 applied to a store that holds jobs (set
// back to version 11, the column gone and queue_jobs_ready as 0003 made
// it): the jobs stored before keep their push order with priority 0, a job
// pushed after with a higher priority is claimed first, and the claim index
// is (queue, state, priority DESC, id).
func TestQueuePriorityMigration(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "coordd.db")
	s := migrated(t, path)
	cfg := backends.QueueConfig{Name: "q", Partitions: 4, VisibilityTimeout: time.Minute, MaxAttempts: 3,
		Unique: spec.UniqueNone, MaxPayload: 1 << 20, Claim: spec.ClaimPartition}
	if _, err := s.PutQueue(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	var old []int64
	for i := range 3 {
		j, err := s.Push(ctx, "q", backends.PushRequest{Payload: fmt.Appendf(nil, "old %d", i)})
		if err != nil {
			t.Fatal(err)
		}
		old = append(old, j.ID)
	}
	execSQL(t, s, `DELETE FROM schema_migrations WHERE version >= 12`)
	execSQL(t, s, `DROP INDEX queue_jobs_ready`)
	execSQL(t, s, `ALTER TABLE queue_jobs DROP COLUMN priority`)
	execSQL(t, s, `CREATE INDEX queue_jobs_ready ON queue_jobs (queue, state, id)`)

	r := openStore(t, path, backends.Options{Version: "0.1.0"})
	if err := r.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	var cols []string
	rows, err := r.DB().QueryContext(ctx, `SELECT name, desc FROM pragma_index_xinfo('queue_jobs_ready') WHERE key`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name string
		var desc bool
		if err := rows.Scan(&name, &desc); err != nil {
			t.Fatal(err)
		}
		if desc {
			name += " DESC"
		}
		cols = append(cols, name)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	if got := strings.Join(cols, ", "); got != "queue, state, priority DESC, id" {
		t.Errorf("queue_jobs_ready is (%s), want (queue, state, priority DESC, id)", got)
	}
	backendtest.UrgentFirstAfterMigration(t, r, "q", old)
}
