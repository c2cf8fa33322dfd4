package sqlite_test

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/sqlite"
)

// openerEnv, set to a number of handles, makes the test binary an opener
// (see opener) instead of running tests.
const openerEnv = "COORDD_SQLITE_TEST_OPENER"

// TestOpenWaitsForWriter opens a new file while another connection holds its
// write lock, as the process converting it to WAL does for a moment. The
// switch to WAL in Open must wait for the lock, not fail at once with
// SQLITE_BUSY because it began as a read.
func TestOpenWaitsForWriter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "coordd.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tx, err := db.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(t.Context(), `CREATE TABLE held (x INTEGER)`); err != nil {
		t.Fatal(err)
	}
	// Open fails at once if it does not wait, so the hold only has to outlast
	// Open's first try.
	released := make(chan error, 1)
	time.AfterFunc(300*time.Millisecond, func() { released <- tx.Commit() })
	s, err := sqlite.Open(t.Context(), "embedded", path, backends.Options{Version: "0.1.0"})
	if err := <-released; err != nil {
		t.Fatalf("commit of the holder: %v", err)
	}
	if err != nil {
		t.Fatalf("open while another connection holds the write lock: %v", err)
	}
	defer s.Close()
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	var mode string
	if err := s.DB().QueryRowContext(t.Context(), `PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal mode = %q, %v; want wal", mode, err)
	}
}

// TestConcurrentOpenMigrate starts several processes that, round after round,
// open and migrate one new file at the same moment, through several handles
// each, as coordd daemons started together do. Every open and migration
// must wait for the others instead of failing with SQLITE_BUSY, and the file
// must end up in WAL mode.
func TestConcurrentOpenMigrate(t *testing.T) {
	const procs, handles, rounds = 3, 2, 5
	type child struct {
		cmd    *exec.Cmd
		in     io.WriteCloser
		out    *bufio.Scanner
		stderr strings.Builder
	}
	children := make([]*child, procs)
	for i := range children {
		c := &child{cmd: exec.Command(os.Args[0], "-test.run=^$")}
		c.cmd.Env = append(os.Environ(), openerEnv+"="+strconv.Itoa(handles))
		c.cmd.Stderr = &c.stderr
		in, err := c.cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out, err := c.cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		c.in, c.out = in, bufio.NewScanner(out)
		children[i] = c
	}
	t.Cleanup(func() {
		for _, c := range children {
			c.in.Close() // EOF: the opener exits
			if err := c.cmd.Wait(); err != nil {
				t.Errorf("opener %d: %v\n%s", c.cmd.Process.Pid, err, c.stderr.String())
			}
		}
	})

	dir := t.TempDir()
	for r := range rounds {
		path := filepath.Join(dir, strconv.Itoa(r), "coordd.db")
		for _, c := range children {
			if _, err := fmt.Fprintln(c.in, path); err != nil {
				t.Fatalf("round %d: %v", r, err)
			}
		}
		for _, c := range children {
			if !c.out.Scan() {
				t.Fatalf("round %d: opener %d stopped: %v", r, c.cmd.Process.Pid, c.out.Err()) // Wait reports why
			}
			if line := c.out.Text(); line != "ok" {
				t.Errorf("round %d: opener %d: %s", r, c.cmd.Process.Pid, line)
			}
		}
		s := openStore(t, path, backends.Options{Version: "0.1.0", ReadOnly: true})
		var mode string
		if err := s.DB().QueryRowContext(t.Context(), `PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
			t.Errorf("round %d: journal mode = %q, %v; want wal", r, mode, err)
		}
	}
}

// opener reads file paths from stdin, one a round. For each it opens and
// migrates the file through $COORDD_SQLITE_TEST_OPENER handles at once, then
// writes "ok" or the first error, on one line, to stdout.
func opener() int {
	handles, err := strconv.Atoi(os.Getenv(openerEnv))
	if err != nil || handles < 1 {
		fmt.Fprintf(os.Stderr, "%s=%q: want a positive number\n", openerEnv, os.Getenv(openerEnv))
		return 2
	}
	ctx := context.Background()
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		path := in.Text()
		errs := make([]error, handles)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Go(func() {
				s, err := sqlite.Open(ctx, "embedded", path, backends.Options{Version: "0.1.0"})
				if err != nil {
					errs[i] = err
					return
				}
				defer s.Close()
				errs[i] = s.Migrate(ctx)
			})
		}
		wg.Wait()
		line := "ok"
		for _, err := range errs {
			if err != nil {
				line = strings.ReplaceAll(err.Error(), "\n", " ")
				break
			}
		}
		fmt.Println(line)
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}
