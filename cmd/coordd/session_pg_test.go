package main

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/coordd/coordd/internal/testenv"
)

// pgSessionFixture applies a spec with one mode-session semaphore on a
// fresh PostgreSQL database and returns the spec path, the data dir and a
// connection to the database.
func pgSessionFixture(t *testing.T, limit int, lease string) (specPath, dataDir string, db *sql.DB) {
	t.Helper()
	dsn := testenv.PostgresDSN(t)
	dataDir = t.TempDir()
	specPath = writeSpec(t, fmt.Sprintf(`backends:
  db: {type: postgres, dsn: %q, schema: coordd, table_prefix: "sess_"}
semaphores:
  s: {limit: %d, lease: %s, mode: session}
`, dsn, limit, lease))
	if out, err := coorddCmd(t, dataDir, "apply", "-f", specPath, "--auto-approve").CombinedOutput(); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return specPath, dataDir, db
}

// TestSemRunSessionKill9Postgres: a session-mode slot is an advisory lock
// that PostgreSQL frees the moment its holder dies (the kernel closes the
// dead process's socket and the server ends its session), with no lease
// to run out: after a kill -9 of the holder (a lease of a minute) the next
// `sem run --no-wait` gets the slot at once.
func TestSemRunSessionKill9Postgres(t *testing.T) {
	specPath, dataDir, _ := pgSessionFixture(t, 1, "1m")
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	holder := coorddCmd(t, dataDir, "sem", "run", "s", "-f", specPath, "--", "sh", "-c", "echo $$ > "+pidFile+"; exec sleep 60")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	childPid, _ := strconv.Atoi(waitFile(t, pidFile, 20*time.Second))
	if code := exitCode(t, coorddCmd(t, dataDir, "sem", "run", "s", "-f", specPath, "--no-wait", "--", "true").Run()); code != 75 {
		t.Fatalf("--no-wait while held: exit %d, want 75", code)
	}
	out, _ := coorddCmd(t, dataDir, "sem", "status", "s", "-f", specPath).Output()
	if !strings.Contains(string(out), "mode session") || !strings.Contains(string(out), "connection ") {
		t.Errorf("sem status does not show the session holder:\n%s", out)
	}
	_ = holder.Process.Signal(syscall.SIGKILL)
	_ = holder.Wait()
	killed := time.Now()
	for {
		code := exitCode(t, coorddCmd(t, dataDir, "sem", "run", "s", "-f", specPath, "--no-wait", "--", "true").Run())
		if code == 0 {
			break
		}
		if code != 75 || time.Since(killed) > 5*time.Second {
			t.Fatalf("after the holder's kill -9: exit %d %v later, want 0 at once (the lease is 1m)", code, time.Since(killed))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("slot free %v after the kill -9", time.Since(killed))
	for deadline := time.Now().Add(10 * time.Second); alive(childPid); {
		if time.Now().After(deadline) {
			t.Fatalf("child %d outlived its killed holder", childPid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSemRunSessionLostPostgres: when the holder's backend is ended behind
// its back (pg_terminate_backend; a server restart does the same), the
// slot is free in the server at once, the holder notices on its next
// check and stops its command: exit 122.
func TestSemRunSessionLostPostgres(t *testing.T) {
	specPath, dataDir, db := pgSessionFixture(t, 1, "3s")
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	holder := coorddCmd(t, dataDir, "sem", "run", "s", "-f", specPath, "--", "sh", "-c", "echo $$ > "+pidFile+"; exec sleep 60")
	holder.Stderr = os.Stderr
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- holder.Wait() }()
	childPid, _ := strconv.Atoi(waitFile(t, pidFile, 20*time.Second))
	var pid int64
	if err := db.QueryRow(`SELECT (session_holders -> '0' ->> 'pid')::bigint FROM coordd.sess_semaphores WHERE name = 's'`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if code := exitCode(t, err); code != 122 {
			t.Fatalf("sem run exit %d after its session ended, want 122", code)
		}
	case <-time.After(30 * time.Second):
		_ = holder.Process.Kill()
		t.Fatal("sem run did not notice that its session ended")
	}
	if alive(childPid) {
		t.Fatalf("child %d outlived the lost slot", childPid)
	}
}
