package mysql_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/backendtest"
	"github.com/coordd/coordd/backends/mysql"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/spec"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// openStore opens a handle closed by t.Cleanup (before testenv drops the
// database, as cleanups run last-registered first).
func openStore(t testing.TB, dsn, prefix string, opts backends.Options) *mysql.Store {
	t.Helper()
	s, err := mysql.Open(context.Background(), "cluster", dsn, prefix, opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return s
}

func migrated(t testing.TB, dsn, prefix string) *mysql.Store {
	t.Helper()
	s := openStore(t, dsn, prefix, backends.Options{Version: "0.1.0"})
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return s
}

// execSQL runs raw SQL behind coordd's back; {p} is the store's prefix.
func execSQL(t *testing.T, b backends.Backend, query string, args ...any) {
	t.Helper()
	s := b.(*mysql.Store)
	q := strings.ReplaceAll(query, "{p}", s.Prefix())
	if _, err := s.DB().ExecContext(t.Context(), q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func harness() backendtest.Harness {
	return backendtest.Harness{
		New: func(t *testing.T) func() backends.Backend {
			dsn := testenv.MySQLDSN(t)
			return func() backends.Backend { return openStore(t, dsn, "coordd_", backends.Options{Version: "0.1.0"}) }
		},
		DeleteSlot: func(t *testing.T, b backends.Backend, name string, slot int) {
			execSQL(t, b, "DELETE FROM `{p}semaphore_slots` WHERE name = ? AND slot = ?", name, slot)
		},
		SemaphoreModes: []string{spec.ModeSession, spec.ModeSession + "/" + spec.WakeKill},
		InstanceRows:   instanceRows,
		ClockFencing:   true,
		KillSession: func(t *testing.T, b backends.Backend, id int64) {
			execSQL(t, b, "KILL CONNECTION ?", id)
		},
		InsertJobs: func(t *testing.T, b backends.Backend, queue string, p, n int) {
			for i := range n {
				execSQL(t, b, "INSERT INTO `{p}queue_jobs` (queue, `partition`, payload, state, available_at, enqueued_at, last_error)\n"+
					"VALUES (?, ?, ?, 'ready', 0, 0, '')", queue, p, fmt.Appendf(nil, "job %d", i))
			}
		},
	}
}

func TestConformance(t *testing.T) { backendtest.Run(t, harness()) }

// instanceRows lists the rows of every instance of keyed semaphore name,
// whatever their state.
func instanceRows(t *testing.T, b backends.Backend, name string) []string {
	t.Helper()
	s := b.(*mysql.Store)
	q := strings.ReplaceAll("SELECT CONCAT('slot ', ikey, ' ', slot, ' ', owner) FROM `{p}semaphore_instance_slots` WHERE name = ?\n"+
		"UNION ALL SELECT CONCAT('waiter ', ikey, ' ', owner) FROM `{p}semaphore_instance_waiters` WHERE name = ?", "{p}", s.Prefix())
	rows, err := s.DB().QueryContext(t.Context(), q, name, name)
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

// tables counts the tables of the test database.
func tables(t *testing.T, s *mysql.Store) int {
	t.Helper()
	var n int
	if err := s.DB().QueryRowContext(t.Context(), `SELECT count(*) FROM information_schema.tables WHERE table_schema = DATABASE()`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestReadOnlyEmptyDatabase(t *testing.T) {
	ctx := t.Context()
	dsn := testenv.MySQLDSN(t)
	s := openStore(t, dsn, "", backends.Options{ReadOnly: true, Version: "0.1.0"})

	st, err := s.LoadState(ctx)
	if err != nil || len(st.Entries) != 0 || st.Last != nil {
		t.Fatalf("load state = %+v, %v; want empty", st, err)
	}
	sems, err := s.ObserveSemaphores(ctx, []string{"a"})
	if err != nil || len(sems) != 0 {
		t.Fatalf("observe semaphores = %v, %v; want empty", sems, err)
	}
	hs, err := s.Holders(ctx, backends.SemRef{Name: "a"})
	if err != nil || len(hs) != 0 {
		t.Fatalf("holders = %v, %v; want none", hs, err)
	}
	if _, err := s.CurrentLeader(ctx); !errors.Is(err, backends.ErrNotFound) {
		t.Fatalf("current leader = %v, want ErrNotFound", err)
	}
	if _, err := s.FindApply(ctx, "x"); !errors.Is(err, backends.ErrNotFound) {
		t.Fatalf("find apply = %v, want ErrNotFound", err)
	}
	info, err := s.Schema(ctx)
	if err != nil || info.Version != 0 || info.Latest < 1 {
		t.Fatalf("schema = %+v, %v; want version 0", info, err)
	}
	if now, err := s.Now(ctx); err != nil || now.IsZero() || now.Location() != time.UTC {
		t.Fatalf("now = %v, %v", now, err)
	}
	if err := s.Migrate(ctx); !errors.Is(err, mysql.ErrReadOnly) {
		t.Errorf("migrate = %v, want ErrReadOnly", err)
	}
	if err := s.PutSemaphore(ctx, backends.SemaphoreConfig{Name: "a", Limit: 1}); !errors.Is(err, mysql.ErrReadOnly) {
		t.Errorf("put semaphore = %v, want ErrReadOnly", err)
	}
	if _, err := s.TryLockApply(ctx, "me", time.Minute); !errors.Is(err, mysql.ErrReadOnly) {
		t.Errorf("lock apply = %v, want ErrReadOnly", err)
	}
	if n := tables(t, s); n != 0 {
		t.Errorf("read-only store created %d tables", n)
	}
}

// TestReadDuringFirstMigration: Migrate creates the version table before
// the tables of 0001; a reader that comes in between (coordd status while
// the first daemon migrates) sees an empty store, not a missing table.
func TestReadDuringFirstMigration(t *testing.T) {
	ctx := t.Context()
	s := openStore(t, testenv.MySQLDSN(t), "t_", backends.Options{ReadOnly: true, Version: "0.1.0"})
	if _, err := s.DB().ExecContext(ctx, "CREATE TABLE `t_schema_migrations` (version INT NOT NULL PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	if st, err := s.LoadState(ctx); err != nil || len(st.Entries) != 0 || st.Last != nil {
		t.Fatalf("load state = %+v, %v; want empty", st, err)
	}
	if _, err := s.CurrentLeader(ctx); !errors.Is(err, backends.ErrNotFound) {
		t.Fatalf("current leader = %v, want ErrNotFound", err)
	}
}

func TestUnmigratedWritesFail(t *testing.T) {
	s := openStore(t, testenv.MySQLDSN(t), "", backends.Options{Version: "0.1.0"})
	if err := s.PutSemaphore(t.Context(), backends.SemaphoreConfig{Name: "a", Limit: 1}); err == nil {
		t.Fatal("put semaphore on an unmigrated store succeeded")
	}
	if n := tables(t, s); n != 0 {
		t.Errorf("unmigrated store has %d tables", n)
	}
}

func TestSchemaTooNew(t *testing.T) {
	ctx := t.Context()
	dsn := testenv.MySQLDSN(t)
	s := migrated(t, dsn, "")
	execSQL(t, s, "UPDATE `{p}schema_migrations` SET min_binary = '0.3.0'")
	info, err := s.Schema(ctx)
	if err != nil || info.MinBinary != "0.3.0" {
		t.Fatalf("schema = %+v, %v; want min_binary 0.3.0", info, err)
	}
	for _, v := range []string{"0.1.0", "v0.2.9", "0.2.99-rc1"} {
		err := openStore(t, dsn, "", backends.Options{Version: v}).Migrate(ctx)
		if !errors.Is(err, backends.ErrSchemaTooNew) {
			t.Errorf("migrate as %s = %v, want ErrSchemaTooNew", v, err)
		}
	}
	for _, v := range []string{"", "0.3.0", "1.0.0", "dev"} {
		if err := openStore(t, dsn, "", backends.Options{Version: v}).Migrate(ctx); err != nil {
			t.Errorf("migrate as %q = %v, want success", v, err)
		}
	}
}

func TestConcurrentMigrate(t *testing.T) {
	dsn := testenv.MySQLDSN(t)
	const n = 4
	stores := make([]*mysql.Store, n)
	for i := range stores {
		stores[i] = openStore(t, dsn, "c_", backends.Options{Version: "0.1.0"})
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
	var rows int
	if err := stores[0].DB().QueryRowContext(t.Context(), "SELECT count(*) FROM `c_schema_migrations`").Scan(&rows); err != nil || rows != info.Latest {
		t.Errorf("schema_migrations has %d rows (%v), want %d", rows, err, info.Latest)
	}
}

func TestTablePrefix(t *testing.T) {
	ctx := t.Context()
	dsn := testenv.MySQLDSN(t)
	a := migrated(t, dsn, "a_")
	b := migrated(t, dsn, "b_")
	if err := a.PutSemaphore(ctx, backends.SemaphoreConfig{Name: "s", Limit: 1, Lease: time.Minute, Mode: spec.ModeLease, MaxWaiting: -1}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.ElectLeader(ctx, "host-a", time.Minute); err != nil {
		t.Fatal(err)
	}
	if m, err := b.ObserveSemaphores(ctx, []string{"s"}); err != nil || len(m) != 0 {
		t.Errorf("prefix b sees %v, %v; want nothing", m, err)
	}
	if _, err := b.TryAcquire(ctx, backends.SemRef{Name: "s"}, backends.AcquireRequest{Owner: "o", Lease: time.Minute}); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("acquire through prefix b = %v, want ErrNotFound", err)
	}
	if _, err := b.CurrentLeader(ctx); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("prefix b leader = %v, want ErrNotFound", err)
	}
	if m, err := a.ObserveSemaphores(ctx, []string{"s"}); err != nil || m["s"] == nil || m["s"].Slots != 1 {
		t.Errorf("prefix a sees %v, %v", m, err)
	}
	var n int
	if err := a.DB().QueryRowContext(ctx, `SELECT count(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name LIKE 'b\_%'`).Scan(&n); err != nil || n == 0 {
		t.Errorf("prefix b tables: %d, %v", n, err)
	}
	if _, err := mysql.Open(ctx, "x", dsn, "bad-prefix", backends.Options{}); err == nil {
		t.Error("open with an invalid prefix succeeded")
	}
}

func TestNamesAreCaseSensitive(t *testing.T) {
	ctx := t.Context()
	s := migrated(t, testenv.MySQLDSN(t), "")
	for _, n := range []string{"S", "s"} {
		if err := s.PutSemaphore(ctx, backends.SemaphoreConfig{Name: n, Limit: 1, Lease: time.Minute, Mode: spec.ModeLease}); err != nil {
			t.Fatal(err)
		}
	}
	m, err := s.ObserveSemaphores(ctx, []string{"S", "s"})
	if err != nil || len(m) != 2 {
		t.Fatalf("observe = %v, %v; want two semaphores", m, err)
	}
}

// TestCommitApplyMany commits 10,000 inventory entries in one apply.
func TestCommitApplyMany(t *testing.T) {
	ctx := t.Context()
	s := migrated(t, testenv.MySQLDSN(t), "")
	unlock, err := s.TryLockApply(ctx, "me", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock(ctx)
	put := make([]backends.InventoryEntry, 10000)
	for i := range put {
		put[i] = backends.InventoryEntry{
			Address:   spec.Address{Kind: spec.KindSemaphore, Name: fmt.Sprintf("sem-%05d", i)},
			Placement: backends.Placement{Backend: "cluster", BackendType: spec.TypeMySQL, Spec: []byte(`{"limit":1}`)},
			Status:    backends.StatusActive,
		}
	}
	start := time.Now()
	before := s.RoundTrips()
	gen, err := s.CommitApply(ctx, "me", backends.ApplyRecord{SpecHash: "h", Host: "h"}, put, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("committed %d entries in %v, %d round trips", len(put), time.Since(start), s.RoundTrips()-before)
	if trips := s.RoundTrips() - before; trips > 40 {
		t.Errorf("commit took %d round trips", trips)
	}
	st, err := s.LoadState(ctx)
	if err != nil || len(st.Entries) != len(put) || st.Last == nil || st.Last.Generation != gen {
		t.Fatalf("load state: %d entries, last %+v, %v", len(st.Entries), st.Last, err)
	}
	remove := make([]spec.Address, 0, len(put))
	for _, e := range put[:7000] {
		remove = append(remove, e.Address)
	}
	if _, err := s.CommitApply(ctx, "me", backends.ApplyRecord{SpecHash: "h2", Host: "h"}, nil, remove); err != nil {
		t.Fatal(err)
	}
	if st, err := s.LoadState(ctx); err != nil || len(st.Entries) != 3000 {
		t.Fatalf("after remove: %d entries, %v", len(st.Entries), err)
	}
}

// TestObserveMany observes 2,500 semaphores across several IN chunks.
func TestObserveMany(t *testing.T) {
	ctx := t.Context()
	s := migrated(t, testenv.MySQLDSN(t), "")
	const n = 2500
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("sem-%05d", i)
	}
	var semVals, slotVals []string
	var semArgs, slotArgs []any
	for i, name := range names {
		semVals = append(semVals, "(?, ?, 60000000000, 'lease')")
		semArgs = append(semArgs, name, i%4+1)
		for k := range i%4 + 1 {
			slotVals = append(slotVals, "(?, ?)")
			slotArgs = append(slotArgs, name, k)
		}
	}
	execSQL(t, s, "INSERT INTO `{p}semaphores` (name, lim, lease_ns, mode) VALUES "+strings.Join(semVals, ", "), semArgs...)
	execSQL(t, s, "INSERT INTO `{p}semaphore_slots` (name, slot) VALUES "+strings.Join(slotVals, ", "), slotArgs...)
	before := s.RoundTrips()
	m, err := s.ObserveSemaphores(ctx, names)
	if err != nil {
		t.Fatal(err)
	}
	// Per chunk of inChunk names: configs, slots, waiters, and the
	// holders and waiters of keyed semaphores' instances.
	if trips := s.RoundTrips() - before; trips > 18 {
		t.Errorf("observe took %d round trips", trips)
	}
	if len(m) != n {
		t.Fatalf("observed %d, want %d", len(m), n)
	}
	for i, name := range names {
		if st := m[name]; st == nil || st.Config.Limit != i%4+1 || st.Slots != i%4+1 {
			t.Fatalf("%s observed as %+v", name, st)
		}
	}
}

// TestClockIgnoresSessionZone checks that a DSN asking for another session
// time zone changes nothing: Now is UTC and near the host clock. (The
// clock reads UTC_TIMESTAMP(6), which no session zone affects; Open also
// forces the session zone to +00:00.)
func TestClockIgnoresSessionZone(t *testing.T) {
	cfgDSN := testenv.MySQLDSN(t)
	s := openStore(t, cfgDSN+"&time_zone=%27%2B05%3A00%27", "", backends.Options{})
	now, err := s.Now(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(now); d > time.Hour || d < -time.Hour {
		t.Errorf("backend clock %v is %v off the host's", now, d)
	}
}

// TestReadBetweenMigrations: on a store whose newest migrations are missing
// (an older binary migrated it, or a daemon is between two DDL statements,
// which MySQL cannot roll back), a read that needs the newer columns fails
// with ErrSchemaOld naming both versions and what to do; a read that needs
// nothing new still works, and Schema reads the version.
func TestReadBetweenMigrations(t *testing.T) {
	ctx := t.Context()
	dsn := testenv.MySQLDSN(t)
	s := migrated(t, dsn, "o_")
	info, err := s.Schema(ctx)
	if err != nil {
		t.Fatal(err)
	}
	execSQL(t, s, "DELETE FROM `{p}schema_migrations` WHERE version >= 9")
	execSQL(t, s, "DROP TABLE `{p}notices`")
	for _, col := range []string{"host", "pid", "since"} {
		execSQL(t, s, "ALTER TABLE `{p}semaphore_waiters` DROP COLUMN "+col)
	}
	r := openStore(t, dsn, "o_", backends.Options{Version: "0.1.0"})
	if _, err := r.ObserveSemaphores(ctx, []string{"s"}); err != nil {
		t.Fatalf("observe semaphores, which needs no newer column: %v", err)
	}
	_, err = r.ListWaiters(ctx, backends.SemRef{Name: "s"})
	if !errors.Is(err, backends.ErrSchemaOld) || !strings.Contains(err.Error(), fmt.Sprintf("at version 8, this coordd reads version %d", info.Latest)) {
		t.Fatalf("list waiters = %v, want ErrSchemaOld naming both versions", err)
	}
	if got, err := r.Schema(ctx); err != nil || got.Version != 8 {
		t.Fatalf("schema = %+v, %v; want version 8", got, err)
	}
	if err := r.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ListWaiters(ctx, backends.SemRef{Name: "s"}); err != nil {
		t.Fatalf("list waiters after migrate: %v", err)
	}
}

// TestQueuePriorityMigration: 0015 applied to a store that holds jobs (set
// back to version 14: the column and queue_jobs_skip_locked gone,
// queue_jobs_ready as 0004 made it), then applied again over itself (a run
// cut short before its version row): the jobs stored before keep their
// order with priority 0, a job pushed after with a higher priority is
// claimed first in either claim mode, and the claim indexes hold priority
// descending.
func TestQueuePriorityMigration(t *testing.T) {
	ctx := t.Context()
	dsn := testenv.MySQLDSN(t)
	s := migrated(t, dsn, "p_")
	queue := func(name, claim string) backends.QueueConfig {
		return backends.QueueConfig{Name: name, Partitions: 4, VisibilityTimeout: time.Minute, MaxAttempts: 3,
			Unique: spec.UniqueNone, MaxPayload: 1 << 20, Claim: claim}
	}
	old := map[string][]int64{}
	for _, cfg := range []backends.QueueConfig{queue("part", spec.ClaimPartition), queue("skip", spec.ClaimSkipLocked)} {
		if _, err := s.PutQueue(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			j, err := s.Push(ctx, cfg.Name, backends.PushRequest{Payload: fmt.Appendf(nil, "old %d", i)})
			if err != nil {
				t.Fatal(err)
			}
			old[cfg.Name] = append(old[cfg.Name], j.ID)
		}
	}
	execSQL(t, s, "DELETE FROM `{p}schema_migrations` WHERE version >= 15")
	execSQL(t, s, "ALTER TABLE `{p}queue_jobs` DROP KEY queue_jobs_skip_locked")
	execSQL(t, s, "ALTER TABLE `{p}queue_jobs` DROP KEY queue_jobs_ready, ADD KEY queue_jobs_ready (queue, state, id)")
	execSQL(t, s, "ALTER TABLE `{p}queue_jobs` DROP COLUMN priority")

	r := openStore(t, dsn, "p_", backends.Options{Version: "0.1.0"})
	if err := r.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	execSQL(t, s, "DELETE FROM `{p}schema_migrations` WHERE version >= 15")
	if err := r.Migrate(ctx); err != nil {
		t.Fatalf("migrate over an applied 0015: %v", err)
	}
	for index, want := range map[string]string{
		"queue_jobs_ready":       "queue, state, priority DESC, id",
		"queue_jobs_skip_locked": "queue, state, priority DESC, available_at, id",
	} {
		var got string
		err := r.DB().QueryRowContext(ctx, `SELECT GROUP_CONCAT(CONCAT(column_name, IF(collation = 'D', ' DESC', '')) ORDER BY seq_in_index SEPARATOR ', ')
FROM information_schema.statistics WHERE table_schema = DATABASE() AND table_name = 'p_queue_jobs' AND index_name = ?`, index).Scan(&got)
		if err != nil || got != want {
			t.Errorf("%s is (%s), %v; want (%s)", index, got, err, want)
		}
	}
	for _, q := range []string{"part", "skip"} {
		backendtest.UrgentFirstAfterMigration(t, r, q, old[q])
	}
}
