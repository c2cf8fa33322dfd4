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

	_ "github.com/go-sql-driver/mysql"

	"github.com/coordd/coordd/internal/testenv"
)

// sessionFixture applies a spec with one mode-session semaphore on a fresh
// MariaDB database and returns the spec path, the data dir and a root
// connection to the database.
func sessionFixture(t *testing.T, limit int, lease, wake string) (specPath, dataDir string, db *sql.DB) {
	t.Helper()
	dsn := testenv.MySQLDSN(t)
	dataDir = t.TempDir()
	specPath = writeSpec(t, fmt.Sprintf(`backends:
  db: {type: mysql, dsn: %q, table_prefix: "sess_"}
semaphores:
  s: {limit: %d, lease: %s, mode: session, wake: %s}
`, dsn, limit, lease, wake))
	if out, err := coorddCmd(t, dataDir, "apply", "-f", specPath, "--auto-approve").CombinedOutput(); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return specPath, dataDir, db
}

// TestSemRunSessionKill9: a session-mode slot is freed by MySQL the moment
// its holder dies, with no lease to run out: after a kill -9 of the holder
// (a lease of a minute) the next `sem run --no-wait` gets the slot at once.
func TestSemRunSessionKill9(t *testing.T) {
	specPath, dataDir, _ := sessionFixture(t, 1, "1m", "poll")
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
	deadline := time.Now().Add(20 * time.Second) // far below the 1m lease
	for {
		code := exitCode(t, coorddCmd(t, dataDir, "sem", "run", "s", "-f", specPath, "--no-wait", "--", "true").Run())
		if code == 0 {
			break
		}
		if code != 75 || time.Now().After(deadline) {
			t.Fatalf("after the holder's kill -9: exit %d, want 0 well within the 1m lease", code)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for deadline := time.Now().Add(10 * time.Second); alive(childPid); {
		if time.Now().After(deadline) {
			t.Fatalf("child %d outlived its killed holder", childPid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSemRunSessionLost: when the holder's connection dies behind its back
// (here KILL CONNECTION; a server restart does the same), the slot is free
// in the server at once, the holder notices on its next ping and stops its
// command: exit 122.
func TestSemRunSessionLost(t *testing.T) {
	specPath, dataDir, db := sessionFixture(t, 1, "3s", "kill")
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	holder := coorddCmd(t, dataDir, "sem", "run", "s", "-f", specPath, "--", "sh", "-c", "echo $$ > "+pidFile+"; exec sleep 60")
	holder.Stderr = os.Stderr
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- holder.Wait() }()
	childPid, _ := strconv.Atoi(waitFile(t, pidFile, 20*time.Second))
	var conn int64
	if err := db.QueryRow("SELECT JSON_VALUE(session_holders, '$.\"0\".conn') FROM sess_semaphores WHERE name = 's'").Scan(&conn); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("KILL CONNECTION ?", conn); err != nil {
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
