//go:build linux

package testenv

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// How long a private postgres may take to become ready (initdb, or crash
// recovery after Kill), and to stop after SIGTERM (a fast shutdown).
const (
	postgresStartTimeout = 90 * time.Second
	postgresStopTimeout  = 30 * time.Second
)

// Postgres is a private PostgreSQL server that one test owns: unlike the
// shared server of PostgresDSN, the test may kill it with SIGKILL and start
// it again on the same port and data directory.
//
// It listens on 127.0.0.1 only, on a free port, with trust authentication
// for the user postgres; its data, socket and log live in a temp dir. When
// the test runs as root the server runs as the system user postgres, which
// Debian's package creates (PostgreSQL refuses to run as root).
// t.Cleanup stops it and removes the dir; it gets SIGKILL if the test
// process dies first.
type Postgres struct {
	// Port is the TCP port on 127.0.0.1; it stays the same across restarts.
	Port int
	// Dir holds data/, the socket and server.log.
	Dir string

	*server
}

// StartPostgres runs initdb on a fresh data directory and starts postgres
// on it, waiting until it accepts connections. The binaries are looked up
// in PATH, then in Debian's /usr/lib/postgresql/<version>/bin. Extra
// arguments are appended to postgres's command line (e.g. "-c",
// "wal_level=logical").
func StartPostgres(t testing.TB, extra ...string) *Postgres {
	t.Helper()
	initdb := findPostgresBinary(t, "initdb")
	bin := findPostgresBinary(t, "postgres")
	dir, err := os.MkdirTemp("", "coordd-postgres-")
	if err != nil {
		t.Fatalf("testenv: postgres temp dir: %v", err)
	}
	p := &Postgres{Port: freePort(t), Dir: dir, server: &server{name: "postgres", bin: bin, dir: dir, stopTimeout: postgresStopTimeout, tree: true, stopSignal: syscall.SIGINT}}
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("testenv: last lines of the private postgres's log:\n%s", p.LogTail(40))
		}
		_ = os.RemoveAll(dir)
	})
	if os.Geteuid() == 0 {
		p.cred = postgresUser(t)
		if err := os.Chown(dir, int(p.cred.Uid), int(p.cred.Gid)); err != nil {
			t.Fatalf("testenv: %v", err)
		}
	}
	data := filepath.Join(dir, "data")
	cmd := exec.Command(initdb, "-D", data, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("testenv: %s: %v\n%s", initdb, err, out)
	}
	// fsync off: a kill of postgres (not of the machine) loses nothing
	// committed, and the tests stay fast.
	p.args = append([]string{
		"-D", data,
		"-p", strconv.Itoa(p.Port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories=" + dir,
		"-c", "max_connections=300",
		"-c", "fsync=off",
		"-c", "shared_buffers=32MB",
	}, extra...)
	p.Start(t)
	return p
}

// Addr is 127.0.0.1:PORT.
func (p *Postgres) Addr() string { return fmt.Sprintf("127.0.0.1:%d", p.Port) }

// DSN is a postgres:// URL for the user postgres on this server, selecting
// database db ("postgres" when empty).
func (p *Postgres) DSN(db string) string {
	if db == "" {
		db = "postgres"
	}
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable&connect_timeout=10", p.Addr(), db)
}

// CreateDatabase creates a fresh database `coordd_test_<random hex>` and
// returns a URL selecting it. It is not dropped: the whole server goes away
// with the test.
func (p *Postgres) CreateDatabase(t testing.TB) string {
	t.Helper()
	name := DatabasePrefix + randomHex(t, 8)
	db, err := sql.Open("pgx", p.DSN(""))
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	if _, err := db.ExecContext(ctx, `CREATE DATABASE "`+name+`"`); err != nil {
		t.Fatalf("testenv: creating database %s on the private postgres at %s: %v", name, p.Addr(), err)
	}
	return p.DSN(name)
}

// Start starts postgres (again, after Kill or Stop) on the same port and
// data directory and waits until it accepts connections; after Kill this
// includes crash recovery.
func (p *Postgres) Start(t testing.TB) {
	t.Helper()
	db, err := sql.Open("pgx", p.DSN(""))
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	defer db.Close()
	// A pid file left by a killed server names a pid that may be reused;
	// postgres checks it itself, so it stays.
	p.start(t, p.Addr(), postgresStartTimeout, db.PingContext)
}

// findPostgresBinary finds name in PATH or in the newest of Debian's
// /usr/lib/postgresql/<version>/bin.
func findPostgresBinary(t testing.TB, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	for i := len(dirs) - 1; i >= 0; i-- {
		p := filepath.Join(dirs[i], name)
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	t.Fatalf("testenv: %s not found in PATH or /usr/lib/postgresql/*/bin: install postgresql", name)
	return ""
}

// postgresUser is the credential of the system user postgres.
func postgresUser(t testing.TB) *syscall.Credential {
	t.Helper()
	u, err := user.Lookup("postgres")
	if err != nil {
		t.Fatalf("testenv: running as root, the private postgres needs the system user postgres (install postgresql): %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
}
