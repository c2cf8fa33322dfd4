//go:build linux

package testenv

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// How long a private mariadbd may take to become ready (install-db, or
// InnoDB crash recovery after Kill), and to stop after SIGTERM.
const (
	mariadbStartTimeout = 90 * time.Second
	mariadbStopTimeout  = 30 * time.Second
)

// MariaDB is a private mariadbd that one test owns: unlike the shared server
// of MySQLDSN, the test may kill it with SIGKILL and start it again on the
// same port and data directory, to see what clients do while the database
// is gone and after it comes back.
//
// It listens on 127.0.0.1 only, on a free port, with root and no password;
// its data, socket and logs live in a temp dir. t.Cleanup stops it
// (SIGTERM, then SIGKILL) and removes the dir. The server also gets SIGKILL
// if the test process dies first (Pdeathsig), so a test binary killed by
// `go test -timeout` leaves no server behind.
//
// Methods other than Start may be called from any goroutine.
type MariaDB struct {
	// Port is the TCP port on 127.0.0.1; it stays the same across restarts.
	Port int
	// Dir holds data/, tmp/, the socket and server.log.
	Dir string

	*server
}

// StartMariaDB installs a fresh data directory with mariadb-install-db and
// starts mariadbd on it, waiting until it accepts connections. The binaries
// are looked up in PATH, then /usr/sbin, /usr/bin and /usr/local/sbin. A
// missing binary fails the test (install mariadb-server). Extra arguments
// are appended to mariadbd's command line (e.g. "--server-id=2",
// "--log-bin=mariadb-bin" for a replication test).
func StartMariaDB(t testing.TB, extra ...string) *MariaDB {
	t.Helper()
	installDB := findBinary(t, "mariadb-install-db", "mysql_install_db")
	bin := findBinary(t, "mariadbd", "mysqld")

	// Not t.TempDir: its path contains the test name, and a Unix socket path
	// must fit in 108 bytes.
	dir, err := os.MkdirTemp("", "coordd-mariadbd-")
	if err != nil {
		t.Fatalf("testenv: mariadbd temp dir: %v", err)
	}
	m := &MariaDB{Port: freePort(t), Dir: dir, server: &server{name: "mariadbd", bin: bin, dir: dir, stopTimeout: mariadbStopTimeout}}
	t.Cleanup(func() {
		m.Stop()
		if t.Failed() {
			t.Logf("testenv: last lines of the private mariadbd's log:\n%s", m.LogTail(40))
		}
		_ = os.RemoveAll(dir)
	})
	for _, d := range []string{"data", "tmp"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatalf("testenv: %v", err)
		}
	}

	// mariadbd refuses to run as root unless told to.
	var user []string
	if os.Geteuid() == 0 {
		user = []string{"--user=root"}
	}
	// Fresh system tables; root@localhost and root@127.0.0.1 get an empty
	// password (auth-root-authentication-method=normal) and all privileges.
	install := append([]string{"--no-defaults", "--datadir=" + filepath.Join(dir, "data")}, user...)
	help, _ := exec.Command(installDB, "--help").CombinedOutput()
	for _, opt := range []string{"--auth-root-authentication-method=normal", "--skip-test-db"} {
		if name, _, _ := strings.Cut(opt, "="); strings.Contains(string(help), name) {
			install = append(install, opt)
		}
	}
	if out, err := exec.Command(installDB, install...).CombinedOutput(); err != nil {
		t.Fatalf("testenv: %s %s: %v\n%s", installDB, strings.Join(install, " "), err, out)
	}

	// --no-defaults ignores /etc/mysql; flush-log-at-trx-commit=2 writes the
	// redo log at commit without fsync, which survives a kill of mariadbd
	// (not of the machine) and keeps the tests fast.
	m.args = append([]string{
		"--no-defaults",
		"--datadir=" + filepath.Join(dir, "data"),
		"--tmpdir=" + filepath.Join(dir, "tmp"),
		"--socket=" + filepath.Join(dir, "mysqld.sock"),
		"--pid-file=" + filepath.Join(dir, "mysqld.pid"),
		"--log-error=" + filepath.Join(dir, "server.log"),
		fmt.Sprintf("--port=%d", m.Port),
		"--bind-address=127.0.0.1",
		"--skip-name-resolve",
		"--character-set-server=utf8mb4",
		"--collation-server=utf8mb4_general_ci",
		"--max-connections=500",
		"--innodb-flush-log-at-trx-commit=2",
		"--innodb-buffer-pool-size=64M",
	}, user...)
	m.args = append(m.args, extra...)
	m.Start(t)
	return m
}

// Addr is 127.0.0.1:PORT.
func (m *MariaDB) Addr() string { return fmt.Sprintf("127.0.0.1:%d", m.Port) }

// DSN returns a go-sql-driver/mysql DSN for root (no password) on this
// server, selecting database db ("" for none), with parseTime=true.
func (m *MariaDB) DSN(db string) string {
	cfg := mysql.NewConfig()
	cfg.User = "root"
	cfg.Net = "tcp"
	cfg.Addr = m.Addr()
	cfg.DBName = db
	cfg.ParseTime = true
	cfg.Timeout = connectTimeout
	return cfg.FormatDSN()
}

// CreateDatabase creates a fresh database `coordd_test_<random hex>` and
// returns a DSN selecting it. It is not dropped: the whole server goes away
// with the test.
func (m *MariaDB) CreateDatabase(t testing.TB) string {
	t.Helper()
	name := DatabasePrefix + randomHex(t, 8)
	db, err := sql.Open("mysql", m.DSN(""))
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE `"+name+"`"); err != nil {
		t.Fatalf("testenv: creating database %s on the private mariadbd at %s: %v", name, m.Addr(), err)
	}
	return m.DSN(name)
}

// Start starts mariadbd (again, after Kill or Stop) on the same port and data
// directory and waits until it accepts connections. After Kill this includes
// InnoDB crash recovery. It fails the test when the server exits or is not
// ready within 90 s; the server log is in the message.
func (m *MariaDB) Start(t testing.TB) {
	t.Helper()
	db, err := sql.Open("mysql", m.DSN(""))
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	defer db.Close()
	m.start(t, m.Addr(), mariadbStartTimeout, db.PingContext)
}

// findBinary returns the first of names found in PATH or in the sbin and
// bin directories that a non-root PATH often lacks.
func findBinary(t testing.TB, names ...string) string {
	t.Helper()
	for _, name := range names {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
		for _, dir := range []string{"/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"} {
			p := filepath.Join(dir, name)
			if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
				return p
			}
		}
	}
	t.Fatalf("testenv: none of %s found in PATH, /usr/sbin, /usr/bin or /usr/local/sbin: install the server's package", strings.Join(names, ", "))
	return ""
}

// freePort asks the kernel for a free TCP port on 127.0.0.1. Another
// process may take it before mariadbd binds it; that race is accepted (the
// start then fails with the bind error in the log).
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: finding a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
