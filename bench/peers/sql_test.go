package peers

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"maragu.dev/goqite"
	"maragu.dev/goqite/jobs"
	_ "modernc.org/sqlite" // the "sqlite" driver goqite runs on here, as coordd does

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/queue"
)

// goqiteSchema is goqite's schema_sqlite.sql (v0.4.0).
const goqiteSchema = `
create table goqite (
  id text primary key default ('m_' || lower(hex(randomblob(16)))),
  created text not null default (strftime('%Y-%m-%dT%H:%M:%fZ')),
  updated text not null default (strftime('%Y-%m-%dT%H:%M:%fZ')),
  queue text not null,
  body blob not null,
  timeout text not null default (strftime('%Y-%m-%dT%H:%M:%fZ')),
  received integer not null default 0,
  priority integer not null default 0
) strict;

create trigger goqite_updated_timestamp after update on goqite begin
  update goqite set updated = strftime('%Y-%m-%dT%H:%M:%fZ') where id = old.id;
end;

create index goqite_queue_priority_created_idx on goqite (queue, priority desc, created);
`

// BenchmarkPeersSQLiteQueue: drain 10,000 jobs with 4 handlers, goqite's
// job runner (Limit 4, modernc SQLite in WAL mode, one connection as its
// README sets up; once with its defaults, once with a 1 ms PollInterval,
// the one the ratio compares against) against coordd's Work (concurrency
// 4) on the embedded store. Both files use synchronous=NORMAL, coordd's setting (goqite's
// README leaves SQLite's default, FULL, which syncs every commit): the
// same durability on both sides.
func BenchmarkPeersSQLiteQueue(b *testing.B) {
	ctx := context.Background()
	dir := b.TempDir()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "goqite.db")+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)")
	if err != nil {
		b.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	b.Cleanup(func() { db.Close() })
	if _, err := db.Exec(goqiteSchema); err != nil {
		b.Fatal(err)
	}
	gq := goqite.New(goqite.NewOpts{DB: db, Name: "jobs"})
	e := coorddEngine(b, fmt.Sprintf("backends:\n  s: {type: sqlite, path: %q}\nqueues:\n  jobs: {}\n", filepath.Join(dir, "coordd.db")))
	qc, err := queue.New(backendOf(b, e))
	if err != nil {
		b.Fatal(err)
	}
	payload := []byte(`{"image":42}`)
	n := scale(10000) / rounds()

	b.ResetTimer()
	for range b.N {
		s := alternate(b, []string{"goqite, PollInterval 1ms", "goqite defaults", "default Work"}, func(i, _ int) (int, time.Duration) {
			if i < 2 {
				for range n {
					if _, err := jobs.Create(ctx, gq, "noop", goqite.Message{Body: payload}); err != nil {
						b.Fatal(err)
					}
				}
				var done atomic.Int64
				all := make(chan struct{})
				opts := jobs.NewRunnerOpts{Limit: 4, Queue: gq}
				if i == 0 {
					// The runner sleeps PollInterval (100 ms by default)
					// whenever its Limit jobs are running, which no-op
					// jobs make it hit often: the peer at its best.
					opts.PollInterval = time.Millisecond
				}
				r := jobs.NewRunner(opts)
				r.Register("noop", func(context.Context, []byte) error {
					if done.Add(1) == int64(n) {
						close(all)
					}
					return nil
				})
				rctx, cancel := context.WithCancel(ctx)
				stopped := make(chan struct{})
				start := time.Now()
				go func() { r.Start(rctx); close(stopped) }()
				<-all
				took := time.Since(start)
				cancel()
				<-stopped
				return n, took
			}
			for range n {
				if _, err := qc.Push(ctx, "jobs", payload, queue.PushOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			start := time.Now()
			if err := qc.Work(ctx, "jobs", queue.WorkerOptions{Concurrency: 4, Drain: true}, func(context.Context, backends.Job) error { return nil }); err != nil {
				b.Fatal(err)
			}
			return n, time.Since(start)
		})
		record(row{measure: fmt.Sprintf("SQLite queue drain, 4 handlers, %d jobs, jobs/s", scale(10000)), unit: "jobs/s",
			peers: s[:2], coordd: s[2], target: 1.3})
	}
}

// The textbook MySQL queue, written plainly: an autocommit INSERT to push;
// a claim that locks the oldest visible job with FOR UPDATE SKIP LOCKED and
// takes it for a visibility timeout; a DELETE to ack.
const (
	qTextbookTable = `CREATE TABLE textbook_jobs (
  id BIGINT AUTO_INCREMENT PRIMARY KEY,
  payload BLOB NOT NULL,
  owner VARCHAR(64) NULL,
  visible_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  KEY visible (visible_at, id)
) ENGINE=InnoDB`
	qTextbookPush = `INSERT INTO textbook_jobs (payload) VALUES (?)`
	// qFloorPush is the textbook push into a copy of coordd's job table
	// (the row a keyless push writes, no queue row read, no wake-up).
	qFloorPush = "INSERT INTO floor_jobs (queue, `partition`, payload, unique_key, attempt, state, available_at, enqueued_at, last_error)\n" +
		"VALUES ('enq', 0, ?, NULL, 0, 'ready', 0, 0, '')"
	qTextbookPick  = `SELECT id, payload FROM textbook_jobs WHERE visible_at <= NOW(6) ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED`
	qTextbookTake  = `UPDATE textbook_jobs SET owner = ?, visible_at = NOW(6) + INTERVAL 300 SECOND WHERE id = ?`
	qTextbookAck   = `DELETE FROM textbook_jobs WHERE id = ? AND owner = ?`
	qTextbookCount = `SELECT COUNT(*) FROM textbook_jobs`
)

// textbookClaim claims one job, or returns 0 when none is visible.
func textbookClaim(ctx context.Context, db *sql.DB, owner string) (int64, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	var id int64
	var payload []byte
	switch err := tx.QueryRowContext(ctx, qTextbookPick).Scan(&id, &payload); {
	case err == sql.ErrNoRows:
		return 0, tx.Commit()
	case err != nil:
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, qTextbookTake, owner, id); err != nil {
		return 0, err
	}
	return id, tx.Commit()
}

// BenchmarkPeersMySQLQueue: push with 8 producers (a plain autocommit
// INSERT against coordd's Push) and drain 5,000 jobs with 8 handlers (the
// textbook SKIP LOCKED queue against coordd's Work), both on the shared
// MariaDB in a database of their own.
func BenchmarkPeersMySQLQueue(b *testing.B) {
	ctx := context.Background()
	dsn := testenv.MySQLDSN(b)
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		b.Fatal(err)
	}
	cfg.InterpolateParams = true // the same one round trip per statement coordd forces
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		b.Fatal(err)
	}
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(16)
	b.Cleanup(func() { db.Close() })
	if _, err := db.ExecContext(ctx, qTextbookTable); err != nil {
		b.Fatal(err)
	}
	e := coorddEngine(b, fmt.Sprintf("backends:\n  m: {type: mysql, dsn: %q, table_prefix: peers_}\nqueues:\n  drain: {}\n  enq: {}\n", dsn))
	// coordd's own job table with nothing else: the floor of a push into
	// its schema (the indexes that claim order and keys need).
	if _, err := db.ExecContext(ctx, `CREATE TABLE floor_jobs LIKE peers_queue_jobs`); err != nil {
		b.Fatal(err)
	}
	qc, err := queue.New(backendOf(b, e))
	if err != nil {
		b.Fatal(err)
	}
	payload := []byte(`{"image":42}`)
	const producers, handlers = 8, 8
	pushN := scale(8000) / rounds()
	drainN := scale(5000) / rounds()

	push := func(n int, one func() error) time.Duration { return concurrently(b, producers, n, one) }
	insert := func() error { _, err := db.ExecContext(ctx, qTextbookPush, payload); return err }
	floorInsert := func() error { _, err := db.ExecContext(ctx, qFloorPush, payload); return err }
	coorddPush := func(q string) func() error {
		return func() error { _, err := qc.Push(ctx, q, payload, queue.PushOptions{}); return err }
	}

	b.ResetTimer()
	for range b.N {
		pushed := alternate(b, []string{"plain autocommit INSERT", "the same INSERT into coordd's job table", "Push"}, func(i, _ int) (int, time.Duration) {
			switch i {
			case 0:
				took := push(pushN, insert)
				if _, err := db.ExecContext(ctx, `DELETE FROM textbook_jobs`); err != nil {
					b.Fatal(err)
				}
				return pushN, took
			case 1:
				return pushN, push(pushN, floorInsert)
			}
			return pushN, push(pushN, coorddPush("enq"))
		})
		record(row{measure: fmt.Sprintf("MariaDB push, %d producers, jobs/s", producers), unit: "jobs/s",
			peers: pushed[:2], coordd: pushed[2], target: 0.8})

		drained := alternate(b, []string{"textbook SKIP LOCKED", "default Work"}, func(i, _ int) (int, time.Duration) {
			if i == 0 {
				push(drainN, insert)
				var wg sync.WaitGroup
				var failed atomic.Value
				start := time.Now()
				for h := range handlers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						owner := fmt.Sprintf("textbook-%d", h)
						for {
							id, err := textbookClaim(ctx, db, owner)
							if err != nil {
								failed.Store(err)
								return
							}
							if id == 0 {
								return // empty: a drain stops here
							}
							if _, err := db.ExecContext(ctx, qTextbookAck, id, owner); err != nil {
								failed.Store(err)
								return
							}
						}
					}()
				}
				wg.Wait()
				took := time.Since(start)
				if err, _ := failed.Load().(error); err != nil {
					b.Fatal(err)
				}
				var left int
				if err := db.QueryRowContext(ctx, qTextbookCount).Scan(&left); err != nil || left != 0 {
					b.Fatalf("textbook queue not drained: %d left, %v", left, err)
				}
				return drainN, took
			}
			push(drainN, coorddPush("drain"))
			start := time.Now()
			if err := qc.Work(ctx, "drain", queue.WorkerOptions{Concurrency: handlers, Drain: true}, func(context.Context, backends.Job) error { return nil }); err != nil {
				b.Fatal(err)
			}
			return drainN, time.Since(start)
		})
		record(row{measure: fmt.Sprintf("MariaDB drain, %d handlers, %d jobs, jobs/s", handlers, scale(5000)), unit: "jobs/s",
			peers: drained[:1], coordd: drained[1], target: 2.0})
	}
}
