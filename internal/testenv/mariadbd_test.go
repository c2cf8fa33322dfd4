//go:build linux

package testenv

import (
	"context"
	"testing"
	"time"
)

// TestStartMariaDB starts a private mariadbd, commits a row, kills the
// server with SIGKILL, and checks that clients are refused while it is down
// and that the row is there after Start on the same port and data dir.
func TestStartMariaDB(t *testing.T) {
	begin := time.Now()
	m := StartMariaDB(t)
	t.Logf("install-db + start: %s", time.Since(begin).Round(time.Millisecond))
	db := openMySQL(t, m.CreateDatabase(t))
	ctx := ctxT(t)
	for _, q := range []string{"CREATE TABLE t (id INT PRIMARY KEY) ENGINE=InnoDB", "INSERT INTO t VALUES (42)"} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	m.Kill()
	if m.Running() {
		t.Fatal("running after Kill")
	}
	down, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := db.PingContext(down); err == nil {
		t.Fatal("ping succeeded while mariadbd was killed")
	}

	begin = time.Now()
	m.Start(t)
	t.Logf("restart with crash recovery: %s", time.Since(begin).Round(time.Millisecond))
	var id int
	if err := db.QueryRowContext(ctx, "SELECT id FROM t").Scan(&id); err != nil || id != 42 {
		t.Fatalf("after the restart: id %d, %v", id, err)
	}

	// The DSN without a database reaches the same server.
	var port int
	if err := openMySQL(t, m.DSN("")).QueryRowContext(ctx, "SELECT @@port").Scan(&port); err != nil || port != m.Port {
		t.Fatalf("@@port %d (%v), want %d", port, err, m.Port)
	}
	db.Close()
	m.Stop()
	if m.Running() {
		t.Fatal("running after Stop")
	}
	m.Stop() // stopping twice is harmless
}
