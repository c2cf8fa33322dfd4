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
	"sync"
	"syscall"
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

	server string
	args   []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// StartMariaDB installs a fresh data directory with mariadb-install-db and
// starts mariadbd on it, waiting until it accepts connections. The binaries
// are looked up in PATH, then /usr/sbin, /usr/bin and /usr/local/sbin. A
// missing binary fails the test (install mariadb-server).
func StartMariaDB(t testing.TB) *MariaDB {
	t.Helper()
	installDB := findBinary(t, "mariadb-install-db", "mysql_install_db")
	server := findBinary(t, "mariadbd", "mysqld")

	// Not t.TempDir: its path contains the test name, and a Unix socket path
	// must fit in 108 bytes.
	dir, err := os.MkdirTemp("", "coordd-mariadbd-")
	if err != nil {
		t.Fatalf("testenv: mariadbd temp dir: %v", err)
	}
	m := &MariaDB{Port: freePort(t), Dir: dir, server: server}
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
	m.mu.Lock()
	if m.cmd != nil && !exited(m.done) {
		m.mu.Unlock()
		t.Fatalf("testenv: the private mariadbd at %s is already running", m.Addr())
	}
	logf, err := os.OpenFile(filepath.Join(m.Dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		m.mu.Unlock()
		t.Fatalf("testenv: %v", err)
	}
	cmd := exec.Command(m.server, m.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, so that a ^C meant for go test does not reach
	// it first; SIGKILL if this process dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	logf.Close()
	if err != nil {
		m.mu.Unlock()
		t.Fatalf("testenv: starting %s: %v", m.server, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	m.cmd, m.done = cmd, done
	m.mu.Unlock()

	db, err := sql.Open("mysql", m.DSN(""))
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	defer db.Close()
	deadline := time.Now().Add(mariadbStartTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err = db.PingContext(ctx)
		cancel()
		if err == nil {
			return
		}
		if exited(done) {
			t.Fatalf("testenv: the private mariadbd exited during startup:\n%s", m.LogTail(40))
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: the private mariadbd at %s was not ready within %s: %v\n%s", m.Addr(), mariadbStartTimeout, err, m.LogTail(40))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Kill sends SIGKILL to mariadbd and waits until it has exited: clients see
// their connections reset and new ones refused. Start brings it back.
func (m *MariaDB) Kill() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return
	}
	_ = m.cmd.Process.Signal(syscall.SIGKILL)
	<-m.done
}

// Stop shuts mariadbd down cleanly (SIGTERM), with SIGKILL after 30 s, and
// waits until it has exited. Stopping a stopped server does nothing.
func (m *MariaDB) Stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil || exited(m.done) {
		return
	}
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.done:
	case <-time.After(mariadbStopTimeout):
		_ = m.cmd.Process.Signal(syscall.SIGKILL)
		<-m.done
	}
}

// Running reports whether mariadbd is running.
func (m *MariaDB) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cmd != nil && !exited(m.done)
}

// LogTail returns the last n lines of the server's log.
func (m *MariaDB) LogTail(n int) string {
	b, err := os.ReadFile(filepath.Join(m.Dir, "server.log"))
	if err != nil {
		return fmt.Sprintf("(no server log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func exited(done chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// findBinary returns the first of names found in PATH or in the sbin and
// bin directories that a non-root PATH often lacks.
func findBinary(t testing.TB, names ...string) string {
	t.Helper()
	for _, name := range names {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
		for _, dir := range []string{"/usr/sbin", "/usr/bin", "/usr/local/sbin"} {
			p := filepath.Join(dir, name)
			if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
				return p
			}
		}
	}
	t.Fatalf("testenv: none of %s found in PATH, /usr/sbin, /usr/bin or /usr/local/sbin: install mariadb-server", strings.Join(names, ", "))
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
