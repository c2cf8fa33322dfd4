package postgres_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/backendtest"
	"github.com/coordd/coordd/backends/postgres"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/spec"
)

// count runs a count(*) query behind coordd's back.
func count(t *testing.T, s *postgres.Store, query string, args ...any) int {
	t.Helper()
	var n int
	if err := s.DB().QueryRowContext(t.Context(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// tablesIn counts the tables of schema.
func tablesIn(t *testing.T, s *postgres.Store, schema string) int {
	return count(t, s, `SELECT count(*) FROM information_schema.tables WHERE table_schema = $1`, schema)
}

// TestConcurrentMigrateRunsOnce: four hosts starting together on an empty
// database migrate once (the advisory lock) and all succeed.
func TestConcurrentMigrateRunsOnce(t *testing.T) {
	dsn := testenv.PostgresDSN(t)
	const n = 4
	stores := make([]*postgres.Store, n)
	for i := range stores {
		stores[i] = openStore(t, dsn, "coordd", backends.Options{Version: "0.1.0"})
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, s := range stores {
		wg.Go(func() { errs[i] = s.Migrate(t.Context()) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("migrate %d: %v", i, err)
		}
	}
	info, err := stores[0].Schema(t.Context())
	if err != nil || info.Version != info.Latest {
		t.Fatalf("schema = %+v, %v", info, err)
	}
	if rows := count(t, stores[0], `SELECT count(*) FROM `+stores[0].Table("schema_migrations")); rows != info.Latest {
		t.Errorf("schema_migrations has %d rows, want %d", rows, info.Latest)
	}
}

// TestFailedMigrationLeavesNothing: a migration that fails part-way (a
// table of its name is in the way) rolls back whole: no table of coordd's,
// no recorded version, not even the schema it created; once the obstacle
// is gone, Migrate succeeds.
func TestFailedMigrationLeavesNothing(t *testing.T) {
	ctx := t.Context()
	dsn := testenv.PostgresDSN(t)
	s := openStore(t, dsn, "fresh", backends.Options{Version: "0.1.0"})
	// The obstacle lives in public, under the name the last table of the
	// first migration takes when the store's schema is public.
	p := openStore(t, dsn, "public", backends.Options{Version: "0.1.0"})
	if _, err := p.DB().ExecContext(ctx, `CREATE TABLE public.coordd_hosts (x int)`); err != nil {
		t.Fatal(err)
	}
	err := p.Migrate(ctx)
	if err == nil || !strings.Contains(err.Error(), "0001_init") {
		t.Fatalf("migrate over an obstacle = %v, want an error naming 0001_init", err)
	}
	if n := tablesIn(t, p, "public"); n != 1 {
		t.Errorf("public holds %d tables after the failed migration, want only the obstacle", n)
	}
	if _, err := p.DB().ExecContext(ctx, `DROP TABLE public.coordd_hosts`); err != nil {
		t.Fatal(err)
	}
	if err := p.Migrate(ctx); err != nil {
		t.Fatalf("migrate once the obstacle is gone: %v", err)
	}
	// A schema of coordd's own is created by Migrate, and only then.
	if n := count(t, s, `SELECT count(*) FROM information_schema.schemata WHERE schema_name = 'fresh'`); n != 0 {
		t.Fatalf("Open created the schema")
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if n := tablesIn(t, s, "fresh"); n < 10 {
		t.Errorf("schema fresh holds %d tables after Migrate", n)
	}
}

// TestUnmigratedReadsEmptyWritesFail: before the first migration a store
// reads as empty (status beside a daemon that has not started) and
// refuses writes, creating nothing.
func TestUnmigratedReadsEmptyWritesFail(t *testing.T) {
	ctx := t.Context()
	s := openStore(t, testenv.PostgresDSN(t), "coordd", backends.Options{Version: "0.1.0"})
	if st, err := s.LoadState(ctx); err != nil || len(st.Entries) != 0 || st.Last != nil {
		t.Fatalf("load state = %+v, %v; want empty", st, err)
	}
	if _, err := s.CurrentLeader(ctx); !errors.Is(err, backends.ErrNotFound) {
		t.Fatalf("current leader = %v, want ErrNotFound", err)
	}
	if err := s.PutSemaphore(ctx, backends.SemaphoreConfig{Name: "a", Limit: 1}); err == nil {
		t.Fatal("put semaphore on an unmigrated store succeeded")
	}
	if n := tablesIn(t, s, "coordd"); n != 0 {
		t.Errorf("unmigrated store has %d tables", n)
	}
}

// TestSchemaTooNewRefused: a store migrated by a newer binary that raised
// min_binary is refused by older ones; a binary as new or newer, or
// without a version (counted as newest), migrates it.
func TestSchemaTooNewRefused(t *testing.T) {
	ctx := t.Context()
	dsn := testenv.PostgresDSN(t)
	s := openStore(t, dsn, "coordd", backends.Options{Version: "0.1.0"})
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().ExecContext(ctx, `UPDATE `+s.Table("schema_migrations")+` SET min_binary = '0.3.0'`); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"0.1.0", "v0.2.9", "0.2.99-rc1"} {
		if err := openStore(t, dsn, "coordd", backends.Options{Version: v}).Migrate(ctx); !errors.Is(err, backends.ErrSchemaTooNew) {
			t.Errorf("migrate as %s = %v, want ErrSchemaTooNew", v, err)
		}
	}
	for _, v := range []string{"", "0.3.0", "1.0.0", "dev"} {
		if err := openStore(t, dsn, "coordd", backends.Options{Version: v}).Migrate(ctx); err != nil {
			t.Errorf("migrate as %q = %v, want success", v, err)
		}
	}
}

// TestSchemasAndPrefixesAreApart: two stores in one database, in other
// schemas or with other prefixes, see nothing of each other.
func TestSchemasAndPrefixesAreApart(t *testing.T) {
	ctx := t.Context()
	dsn := testenv.PostgresDSN(t)
	open := func(schema, prefix string) *postgres.Store {
		s, err := postgres.Open(ctx, "pg", dsn, schema, prefix, backends.Options{Version: "0.1.0"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		if err := s.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		return s
	}
	a := open("one", "coordd_")
	for _, b := range []*postgres.Store{open("two", "coordd_"), open("one", "other_")} {
		if err := a.PutSemaphore(ctx, backends.SemaphoreConfig{Name: "s", Limit: 1, Lease: time.Minute, Mode: spec.ModeLease, MaxWaiting: -1}); err != nil {
			t.Fatal(err)
		}
		if m, err := b.ObserveSemaphores(ctx, []string{"s"}); err != nil || len(m) != 0 {
			t.Errorf("%s sees %v, %v; want nothing", b.Table("semaphores"), m, err)
		}
		if _, err := b.TryAcquire(ctx, backends.SemRef{Name: "s"}, backends.AcquireRequest{Owner: "o", Lease: time.Minute}); !errors.Is(err, backends.ErrNotFound) {
			t.Errorf("acquire through %s = %v, want ErrNotFound", b.Table("semaphores"), err)
		}
	}
}

// TestOpenRefusesUnsafeIdentifiers: the schema and prefix are spliced into
// SQL (quoted); Open checks them again, whatever the caller.
func TestOpenRefusesUnsafeIdentifiers(t *testing.T) {
	dsn := testenv.PostgresDSN(t)
	for _, c := range [][2]string{{`a"; DROP TABLE x; --`, "coordd_"}, {"Upper", "coordd_"}, {"coordd", `p"`}, {"coordd", strings.Repeat("p", 33)}} {
		if s, err := postgres.Open(t.Context(), "pg", dsn, c[0], c[1], backends.Options{}); err == nil {
			s.Close()
			t.Errorf("Open with schema %q prefix %q succeeded", c[0], c[1])
		}
	}
}

// TestPoolMaxConnsBoundsThePool: pool_max_conns in the DSN bounds the
// statement pool and is not sent to the server (which would refuse an
// unknown setting); a bad value is refused at Open.
func TestPoolMaxConnsBoundsThePool(t *testing.T) {
	dsn := testenv.PostgresDSN(t)
	s := openStore(t, dsn+"&pool_max_conns=2", "coordd", backends.Options{Version: "0.1.0"})
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := s.DB().Stats().MaxOpenConnections; got != 2 {
		t.Errorf("max open connections = %d, want 2", got)
	}
	for _, v := range []string{"0", "many"} {
		if b, err := postgres.Open(t.Context(), "pg", dsn+"&pool_max_conns="+v, "coordd", "coordd_", backends.Options{}); err == nil {
			b.Close()
			t.Errorf("pool_max_conns=%s accepted", v)
		}
	}
}

// TestQueuePriorityMigration: 0012 applied to a store that holds jobs (set
// back to version 11, the column gone and queue_jobs_ready as 0001 made
// it): the jobs stored before keep their push order with priority 0, a job
// pushed after with a higher priority is claimed first, and the claim
// index, once 0013 has run after it, is (queue, priority DESC, id) of the
// ready jobs.
func TestQueuePriorityMigration(t *testing.T) {
	ctx := t.Context()
	dsn := testenv.PostgresDSN(t)
	s := openStore(t, dsn, "coordd", backends.Options{Version: "0.1.0"})
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	cfg := backends.QueueConfig{Name: "q", Partitions: 4, VisibilityTimeout: time.Minute, MaxAttempts: 3,
		Unique: spec.UniqueNone, MaxPayload: 1 << 20, Claim: spec.ClaimPartition}
	if _, err := s.PutQueue(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	var old []int64
	for i := range 3 {
		j, err := s.Push(ctx, "q", backends.PushRequest{Payload: fmt.Appendf(nil, "old %d", i), Key: fmt.Sprint("k", i)})
		if err != nil {
			t.Fatal(err)
		}
		old = append(old, j.ID)
	}
	jobs := s.Table("queue_jobs")
	execSQL(t, s, `DELETE FROM `+s.Table("schema_migrations")+` WHERE version >= 12`)
	execSQL(t, s, `DROP INDEX `+s.Table("queue_jobs_ready"))
	execSQL(t, s, `ALTER TABLE `+jobs+` DROP COLUMN priority`)
	execSQL(t, s, `CREATE INDEX coordd_queue_jobs_ready ON `+jobs+` (queue, state, id)`)

	r := openStore(t, dsn, "coordd", backends.Options{Version: "0.1.0"})
	if err := r.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	var def string
	if err := r.DB().QueryRowContext(ctx, `SELECT indexdef FROM pg_indexes WHERE schemaname = 'coordd' AND indexname = 'coordd_queue_jobs_ready'`).Scan(&def); err != nil {
		t.Fatal(err)
	}
	if want := "(queue, priority DESC, id) WHERE (state = 'ready'::text)"; !strings.HasSuffix(def, want) {
		t.Errorf("queue_jobs_ready is %s, want %s", def, want)
	}
	backendtest.UrgentFirstAfterMigration(t, r, "q", old)
}
