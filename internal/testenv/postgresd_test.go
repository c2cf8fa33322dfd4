//go:build linux

package testenv

import (
	"context"
	"database/sql"
	"testing"
	"time"
)

// TestStartPostgresKeepsDataAcrossKill: a private postgres killed with
// SIGKILL refuses connections, and after Start it serves what was
// committed before the kill.
func TestStartPostgresKeepsDataAcrossKill(t *testing.T) {
	p := StartPostgres(t)
	db, err := sql.Open("pgx", p.CreateDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := db.ExecContext(ctx, `CREATE TABLE t (v int); INSERT INTO t VALUES (42)`); err != nil {
		t.Fatal(err)
	}
	p.Kill()
	if err := db.PingContext(ctx); err == nil {
		t.Fatal("ping succeeded with the server killed")
	}
	p.Start(t)
	var v int
	if err := db.QueryRowContext(ctx, `SELECT v FROM t`).Scan(&v); err != nil || v != 42 {
		t.Fatalf("after restart: %d, %v; want 42", v, err)
	}
}
