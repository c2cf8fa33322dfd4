package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/mysql"
	"github.com/coordd/coordd/internal/testenv"
)

// TestFailoverToStaleReplica: a MariaDB replica that missed the primary's
// last writes (replication stopped: STOP SLAVE) is promoted. The fencing
// numbers (a lease-mode semaphore, a keyed instance, a cron task) and the
// leader term handed out on it next are above those the lost writes handed
// out: every bump counts from at least the server's clock. What a failover
// does not keep, and the test shows: the slot the lost acquire took is free
// on the new primary (its holder learns it at its next renewal).
func TestFailoverToStaleReplica(t *testing.T) {
	ctx := context.Background()
	primary := testenv.StartMariaDB(t, "--server-id=1", "--log-bin=mariadb-bin", "--binlog-format=ROW")
	replica := testenv.StartMariaDB(t, "--server-id=2", "--log-bin=mariadb-bin", "--binlog-format=ROW")
	pdb, rdb := sqlOpen(t, primary.DSN("")), sqlOpen(t, replica.DSN(""))

	// Replicate everything from here on.
	var file string
	var pos int64
	if err := pdb.QueryRowContext(ctx, "SHOW MASTER STATUS").Scan(&file, &pos, new(string), new(string)); err != nil {
		t.Fatal(err)
	}
	// CHANGE MASTER takes no placeholders; the file name is the server's
	// own (letters, digits, '-' and '.').
	mustExec(t, rdb, fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%d, MASTER_USER='root', MASTER_PASSWORD='', MASTER_LOG_FILE='%s', MASTER_LOG_POS=%d",
		primary.Port, file, pos))
	mustExec(t, rdb, "START SLAVE")
	dsn := primary.CreateDatabase(t)
	p, err := mysql.Open(ctx, "db", dsn, "coordd_", backends.Options{Version: "0.1.0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if err := p.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	sem := backends.SemaphoreConfig{Name: "s", Limit: 1, Lease: time.Minute, Mode: "lease", MaxWaiting: -1}
	keyed := backends.SemaphoreConfig{Name: "k", Limit: 1, Lease: time.Minute, Mode: "lease", MaxWaiting: -1, Keyed: true}
	for _, c := range []backends.SemaphoreConfig{sem, keyed} {
		if err := p.PutSemaphore(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.PutCron(ctx, "c", []byte(`{"schedule":"@daily","command":{"argv":["true"]}}`), time.Now().Add(time.Hour), true); err != nil {
		t.Fatal(err)
	}
	claim := func(s *mysql.Store) backends.Occurrence {
		t.Helper()
		occ, err := s.ClaimOccurrence(ctx, backends.ClaimRequest{Task: "c", Attempt: 1, Owner: "o", Host: "h", Lease: time.Minute, Manual: true})
		if err != nil {
			t.Fatalf("claim: %v", err)
		}
		if err := backends.FinishOne(ctx, s, occ, backends.RunResult{Status: backends.RunSucceeded}); err != nil {
			t.Fatal(err)
		}
		return occ
	}
	claim(p)
	term, err := p.ElectLeader(ctx, "h1", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.ResignLeader(ctx, term); err != nil {
		t.Fatal(err)
	}
	g, err := p.TryAcquire(ctx, backends.SemRef{Name: "s"}, backends.AcquireRequest{Owner: "first", Host: "h1", PID: 1, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Release(ctx, backends.SemRef{Name: "s"}, "first"); err != nil {
		t.Fatal(err)
	}
	_ = g
	caughtUp(t, pdb, rdb)

	// The writes the replica misses.
	mustExec(t, rdb, "STOP SLAVE")
	lost, err := p.TryAcquire(ctx, backends.SemRef{Name: "s"}, backends.AcquireRequest{Owner: "old", Host: "h1", PID: 1, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	lostInst, err := p.TryAcquire(ctx, backends.SemRef{Name: "k", Key: "a"}, backends.AcquireRequest{Owner: "old", Host: "h1", PID: 1, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	lostOcc := claim(p)
	lostTerm, err := p.ElectLeader(ctx, "h1", time.Second)
	if err != nil {
		t.Fatal(err)
	}

	// The replica takes over.
	mustExec(t, rdb, "RESET SLAVE ALL")
	r, err := mysql.Open(ctx, "db", replica.DSN(dbName(t, dsn)), "coordd_", backends.Options{Version: "0.1.0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	got, err := r.TryAcquire(ctx, backends.SemRef{Name: "s"}, backends.AcquireRequest{Owner: "new", Host: "h2", PID: 2, Lease: time.Minute})
	if err != nil {
		t.Fatalf("acquire on the promoted replica: %v", err)
	}
	if got.Fencing <= lost.Fencing {
		t.Errorf("fencing after the failover %d, want above the lost acquire's %d", got.Fencing, lost.Fencing)
	}
	t.Logf("the lost acquire's slot is free on the promoted replica: a second holder (fencing %d) next to the first (%d)", got.Fencing, lost.Fencing)
	gotInst, err := r.TryAcquire(ctx, backends.SemRef{Name: "k", Key: "a"}, backends.AcquireRequest{Owner: "new", Host: "h2", PID: 2, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if gotInst.Fencing <= lostInst.Fencing {
		t.Errorf("keyed instance fencing after the failover %d, want above the lost acquire's %d", gotInst.Fencing, lostInst.Fencing)
	}
	if occ := claim(r); occ.Fencing <= lostOcc.Fencing {
		t.Errorf("cron fencing after the failover %d, want above the lost claim's %d", occ.Fencing, lostOcc.Fencing)
	}
	newTerm, err := r.ElectLeader(ctx, "h2", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if newTerm.Term <= lostTerm.Term {
		t.Errorf("term after the failover %d, want above the lost election's %d", newTerm.Term, lostTerm.Term)
	}
	// The first holder learns at its next renewal that its slot is not
	// held on the new primary.
	if _, err := r.Extend(ctx, backends.SemRef{Name: "s"}, "old", time.Minute); !errors.Is(err, backends.ErrLost) {
		t.Errorf("the lost holder's extend on the promoted replica: %v, want ErrLost", err)
	}
}

func sqlOpen(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

func mustExec(t *testing.T, db *sql.DB, q string, args ...any) {
	t.Helper()
	if _, err := db.ExecContext(context.Background(), q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// caughtUp waits until the replica has applied everything the primary
// wrote so far (MASTER_POS_WAIT).
func caughtUp(t *testing.T, pdb, rdb *sql.DB) {
	t.Helper()
	var file string
	var pos int64
	if err := pdb.QueryRow("SHOW MASTER STATUS").Scan(&file, &pos, new(string), new(string)); err != nil {
		t.Fatal(err)
	}
	var res sql.NullInt64
	if err := rdb.QueryRow("SELECT MASTER_POS_WAIT(?, ?, 60)", file, pos).Scan(&res); err != nil {
		t.Fatal(err)
	}
	if !res.Valid || res.Int64 < 0 {
		var status string
		_ = rdb.QueryRow("SELECT 1").Scan(&status)
		t.Fatalf("the replica did not catch up (MASTER_POS_WAIT %v)", res)
	}
}

// dbName is the database a DSN selects.
func dbName(t *testing.T, dsn string) string {
	t.Helper()
	for i := len(dsn) - 1; i >= 0; i-- {
		if dsn[i] == '/' {
			name := dsn[i+1:]
			for j := 0; j < len(name); j++ {
				if name[j] == '?' {
					return name[:j]
				}
			}
			return name
		}
	}
	t.Fatalf("no database in %s", dsn)
	return ""
}
