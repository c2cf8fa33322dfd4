package main

// Promises of README.md's command table and docs/design.md's "Running
// commands under a lease" about `sem run` and `sem status` that no test
// held to before: the holder fields of sem status, exit 122 when the slot
// is lost, signals while waiting, the warning about a local difference.

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/coordd/coordd/internal/proctest"
	"github.com/coordd/coordd/internal/testenv"
)

// semBackends are the backends that hold semaphores.
var semBackends = []string{"sqlite", "mysql", "postgres", "redis", "memcached"}

// semBackend is the backends section and cluster line of a spec whose
// backend "db" is a fresh store of type typ for semaphores (memcached's
// cluster state in an embedded store), and for sqlite the store's file.
func semBackend(t *testing.T, typ string) (header, sqlitePath string) {
	t.Helper()
	switch typ {
	case "sqlite":
		sqlitePath = filepath.Join(t.TempDir(), "x.db")
		return fmt.Sprintf("backends:\n  db: {type: sqlite, path: %q}\ncluster: {backend: db}\n", sqlitePath), sqlitePath
	case "memcached":
		addr, prefix := testenv.MemcachedAddr(t)
		return fmt.Sprintf("backends:\n  local: {type: sqlite, path: %q}\n  db: {type: memcached, servers: [%q], key_prefix: %q}\ncluster: {backend: local}\n",
			filepath.Join(t.TempDir(), "local.db"), addr, prefix), ""
	}
	return hostsBackend(t, typ), ""
}

// semStatusOf runs sem status --json for s.
func semStatusOf(t *testing.T, env *proctest.Env, specPath string) semStatusJSON {
	t.Helper()
	out, code := env.Run(t, "sem", "status", "s", "-f", specPath, "--json")
	var st []semStatusJSON
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || len(st) != 1 {
		t.Fatalf("sem status --json: %d\n%s", code, out)
	}
	return st[0]
}

// TestPromiseSemStatusFields: "sem status: limit and holders (host, pid,
// since, expires, fencing number)", in the text and in --json, on every
// backend: the pid is the holding sem run's, the fencing number the one
// its command got, the expiry a lease after the last renewal at most.
func TestPromiseSemStatusFields(t *testing.T) {
	for _, typ := range semBackends {
		t.Run(typ, func(t *testing.T) {
			header, _ := semBackend(t, typ)
			specPath := writeSpec(t, header+"semaphores:\n  s: {backend: db, limit: 2, lease: 6s}\n")
			env := proctest.NewEnv(t)
			if out, code := env.Run(t, "apply", "-f", specPath, "--auto-approve"); code != 0 {
				t.Fatalf("apply: %s", out)
			}
			info := filepath.Join(t.TempDir(), "info")
			holder := env.Start(t, "holder", "sem", "run", "s", "-f", specPath, "--host-id", "web7", "--",
				"sh", "-c", "echo $COORDD_FENCING_TOKEN > "+info+".tmp; mv "+info+".tmp "+info+"; exec sleep 60")
			defer func() { holder.Signal(syscall.SIGTERM); holder.Wait(t, 30*time.Second) }()
			fencing, err := strconv.ParseInt(waitFile(t, info, 20*time.Second), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			pid := holder.Cmd.Process.Pid

			st := semStatusOf(t, env, specPath)
			if len(st.Holders) != 1 {
				t.Fatalf("holders %+v, want one (%+v)", st.Holders, st)
			}
			h := st.Holders[0]
			if h.Host != "web7" || h.PID != pid || h.Fencing != fencing || h.Slot < 0 || h.Slot > 1 {
				t.Fatalf("holder %+v, want host web7, pid %d, fencing %d", h, pid, fencing)
			}
			if h.AcquiredAt.IsZero() || !h.ExpiresAt.After(h.AcquiredAt) || h.ExpiresAt.Sub(h.AcquiredAt) > 6*time.Second+time.Minute ||
				time.Until(h.ExpiresAt) > 6*time.Second+5*time.Second {
				t.Fatalf("holder since %v, expires %v: want an expiry at most a lease (6s) after the last renewal", h.AcquiredAt, h.ExpiresAt)
			}
			out, code := env.Run(t, "sem", "status", "s", "-f", specPath)
			for _, want := range []string{
				"host web7", fmt.Sprintf("pid %d", pid), "since " + h.AcquiredAt.UTC().Format(time.RFC3339),
				"expires ", fmt.Sprintf("fencing %d", fencing),
			} {
				if code != 0 || !strings.Contains(out, want) {
					t.Errorf("sem status lacks %q: %d\n%s", want, code, out)
				}
			}
		})
	}
}

// TestPromiseSemStatusSessionConnection: "sem status shows a session
// holder's connection id" (design.md, mode session): the processlist id of
// the connection whose named lock holds the slot.
func TestPromiseSemStatusSessionConnection(t *testing.T) {
	specPath, dataDir, db := sessionFixture(t, 1, "3s", "poll")
	pidFile := filepath.Join(t.TempDir(), "pid")
	holder := coorddCmd(t, dataDir, "sem", "run", "s", "-f", specPath, "--", "sh", "-c", "echo $$ > "+pidFile+"; exec sleep 60")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Process.Signal(syscall.SIGTERM); _ = holder.Wait() }()
	waitFile(t, pidFile, 20*time.Second)
	var conn int64
	if err := db.QueryRow("SELECT JSON_VALUE(session_holders, '$.\"0\".conn') FROM sess_semaphores WHERE name = 's'").Scan(&conn); err != nil {
		t.Fatal(err)
	}
	var lock sql.NullInt64
	if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?", conn).Scan(&lock); err != nil || lock.Int64 != 1 {
		t.Fatalf("connection %d is not in the processlist: %v", conn, err)
	}
	out, err := coorddCmd(t, dataDir, "sem", "status", "s", "-f", specPath).CombinedOutput()
	if err != nil || !strings.Contains(string(out), fmt.Sprintf("connection %d", conn)) {
		t.Fatalf("sem status does not name connection %d: %v\n%s", conn, err, out)
	}
	out, err = coorddCmd(t, dataDir, "sem", "status", "s", "-f", specPath, "--json").Output()
	var st []semStatusJSON
	if err != nil || json.Unmarshal(out, &st) != nil || len(st) != 1 || len(st[0].Holders) != 1 || st[0].Holders[0].Session != conn {
		t.Fatalf("sem status --json: want holder session %d: %v\n%s", conn, err, out)
	}
}

// TestPromiseSemRunSlotLost: "122 slot lost": another owner takes the
// slot behind the holder's back (as after a lease that ran out while the
// holder was stalled); the holder's next renewal finds it, stops the
// command and exits 122. On the stores where a slot is a row: sqlite and
// mysql mode lease, postgres (mode session: TestSemRunSessionLost; redis
// and memcached: TestBackendLossHolderStops).
func TestPromiseSemRunSlotLost(t *testing.T) {
	for _, typ := range []string{"sqlite", "mysql", "postgres"} {
		t.Run(typ, func(t *testing.T) {
			header, sqlitePath := semBackend(t, typ)
			specPath := writeSpec(t, header+"semaphores:\n  s: {backend: db, limit: 1, lease: 3s}\n")
			env := proctest.NewEnv(t)
			if out, code := env.Run(t, "apply", "-f", specPath, "--auto-approve"); code != 0 {
				t.Fatalf("apply: %s", out)
			}
			pidFile := filepath.Join(t.TempDir(), "pid")
			holder := env.Start(t, "holder", "sem", "run", "s", "-f", specPath, "--", "sh", "-c", "echo $$ > "+pidFile+"; exec sleep 60")
			child, err := strconv.Atoi(waitFile(t, pidFile, 20*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			var db *sql.DB
			steal := "UPDATE semaphore_slots SET owner = 'thief' WHERE name = 's' AND owner IS NOT NULL"
			switch typ {
			case "sqlite":
				db, err = sql.Open("sqlite", "file:"+sqlitePath+"?_pragma=busy_timeout(10000)")
			case "mysql":
				db, err = sql.Open("mysql", mysqlDSNOf(t, header))
				steal = "UPDATE mh_semaphore_slots SET owner = 'thief' WHERE name = 's' AND state = 'LOCK'"
			case "postgres":
				// hostsBackend's schema and prefix.
				db, err = sql.Open("pgx", mysqlDSNOf(t, header))
				steal = `UPDATE coordd.mh_semaphore_slots SET owner = 'thief' WHERE name = 's' AND owner IS NOT NULL`
			}
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			res, err := db.Exec(steal)
			if err != nil {
				t.Fatalf("stealing the slot: %v", err)
			}
			if n, _ := res.RowsAffected(); n != 1 {
				t.Fatalf("stealing the slot: %d rows changed, want 1", n)
			}
			if code := holder.Wait(t, 20*time.Second); code != 122 {
				t.Fatalf("sem run exited %d after its slot was taken, want 122\n%s", code, holder.Output())
			}
			if alive(child) {
				t.Fatalf("command %d outlived the lost slot", child)
			}
			if !strings.Contains(holder.Output(), "slot lost") {
				t.Errorf("sem run did not say the slot was lost:\n%s", holder.Output())
			}
		})
	}
}

// mysqlDSNOf is the DSN in a header written by hostsBackend (mysql or
// postgres; a postgres URL has no pool parameters to strip).
func mysqlDSNOf(t *testing.T, header string) string {
	t.Helper()
	i := strings.Index(header, `dsn: "`)
	if i < 0 {
		t.Fatalf("no dsn in %q", header)
	}
	rest := header[i+len(`dsn: `):]
	dsn, err := strconv.QuotedPrefix(rest)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := strconv.Unquote(dsn)
	// The pool parameters are coordd's, not the driver's.
	return strings.NewReplacer("&"+mysqlHostPool, "", "?"+mysqlHostPool, "").Replace(s)
}

// TestPromiseSemRunSignalWhileWaiting: "INT, TERM, HUP and QUIT received
// while waiting end the wait (exit 128+N, no slot taken)", on every
// backend (each waits its own way: polling, parked in the server, blocked
// on a list). The waiter leaves the line at once, its command never runs,
// and the slot is free as soon as the holder leaves.
func TestPromiseSemRunSignalWhileWaiting(t *testing.T) {
	for _, typ := range semBackends {
		t.Run(typ, func(t *testing.T) {
			header, _ := semBackend(t, typ)
			specPath := writeSpec(t, header+"semaphores:\n  s: {backend: db, limit: 1, lease: 10s}\n")
			env := proctest.NewEnv(t)
			if out, code := env.Run(t, "apply", "-f", specPath, "--auto-approve"); code != 0 {
				t.Fatalf("apply: %s", out)
			}
			dir := t.TempDir()
			held, stopHolder := filepath.Join(dir, "held"), filepath.Join(dir, "stop")
			holder := env.Start(t, "holder", "sem", "run", "s", "-f", specPath, "--",
				"sh", "-c", "echo held > "+held+"; while [ ! -e "+stopHolder+" ]; do sleep 0.05; done")
			waitFile(t, held, 20*time.Second)
			ran := filepath.Join(dir, "ran")
			for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT} {
				w := env.Start(t, "waiter", "sem", "run", "s", "-f", specPath, "--", "touch", ran)
				if typ != "memcached" { // memcached keeps no line: nothing shows a waiter
					proctest.Eventually(t, 20*time.Second, "the waiter in line", func() bool { return semStatusOf(t, env, specPath).Waiters == 1 })
				} else {
					time.Sleep(500 * time.Millisecond) // a few of its 200 ms polls
				}
				w.Signal(sig)
				if code := w.Wait(t, 20*time.Second); code != 128+int(sig) {
					t.Fatalf("%v while waiting: exit %d, want %d\n%s", sig, code, 128+int(sig), w.Output())
				}
				st := semStatusOf(t, env, specPath)
				if st.Waiters != 0 || len(st.Holders) != 1 || st.Holders[0].PID != holder.Cmd.Process.Pid {
					t.Fatalf("after %v: waiters %d, holders %+v; want the holder alone", sig, st.Waiters, st.Holders)
				}
			}
			if _, err := os.Stat(ran); err == nil {
				t.Fatal("an interrupted waiter ran its command")
			}
			writeFileT(t, stopHolder, "")
			if code := holder.Wait(t, 20*time.Second); code != 0 {
				t.Fatalf("holder exited %d", code)
			}
			// No slot was left taken by an interrupted waiter.
			if out, code := env.Run(t, "sem", "run", "s", "-f", specPath, "--no-wait", "--", "true"); code != 0 {
				t.Fatalf("sem run --no-wait after the holder left: %d %s", code, out)
			}
		})
	}
}

// TestPromiseSemRunWarnsOnLocalDifference: "The limit, lease and max_hold
// come from the applied state ... a difference is printed as a warning"
// (design.md); operations.md: "sem run warns when the local file differs".
// The applied values are the ones enforced (the child's max_hold).
func TestPromiseSemRunWarnsOnLocalDifference(t *testing.T) {
	c := newCLI(t)
	applied := writeSpec(t, "semaphores:\n  s: {limit: 2, lease: 30s, max_hold: 1h}\n")
	if code, _, errs := c.run("", false, "apply", "-f", applied, "--auto-approve"); code != 0 {
		t.Fatalf("apply: %s", errs)
	}
	for _, tc := range []struct{ what, local string }{
		{"limit", "semaphores:\n  s: {limit: 3, lease: 30s, max_hold: 1h}\n"},
		{"lease", "semaphores:\n  s: {limit: 2, lease: 40s, max_hold: 1h}\n"},
		{"max_hold", "semaphores:\n  s: {limit: 2, lease: 30s, max_hold: 1s}\n"},
	} {
		p := writeSpec(t, tc.local)
		// A command that outlives the local max_hold but not the applied one.
		code, _, errs := c.run("", false, "sem", "run", "s", "-f", p, "--", "sleep", "2")
		if code != 0 {
			t.Fatalf("%s differs: exit %d, want 0 (the applied max_hold 1h enforced):\n%s", tc.what, code, errs)
		}
		if !strings.Contains(errs, "warning") || !strings.Contains(errs, "differs from the applied one") {
			t.Errorf("%s differs: no warning:\n%s", tc.what, errs)
		}
	}
	if code, _, errs := c.run("", false, "sem", "run", "s", "-f", applied, "--", "true"); code != 0 || strings.Contains(errs, "warning") {
		t.Errorf("the applied spec itself: %d, warned:\n%s", code, errs)
	}
}

// TestPromiseSemRunMaxHold: spec.md, `max_hold`: "The longest one holder
// may keep a slot: its command gets TERM after this long, then KILL after
// a grace (sem run: lease/3, at most 10 s)". A command that honours TERM
// ends with it (143), one that ignores it is killed (137); either way the
// slot is free again. max_hold comes from the applied semaphore, on every
// backend.
func TestPromiseSemRunMaxHold(t *testing.T) {
	for _, typ := range semBackends {
		t.Run(typ, func(t *testing.T) {
			header, _ := semBackend(t, typ)
			specPath := writeSpec(t, header+"semaphores:\n  s: {backend: db, limit: 1, lease: 3s, max_hold: 1s}\n")
			env := proctest.NewEnv(t)
			if out, code := env.Run(t, "apply", "-f", specPath, "--auto-approve"); code != 0 {
				t.Fatalf("apply: %s", out)
			}
			for _, c := range []struct {
				script string
				want   int
			}{
				{"exec sleep 60", 128 + int(syscall.SIGTERM)},
				{"trap '' TERM; while :; do sleep 0.1; done", 128 + int(syscall.SIGKILL)},
			} {
				h := env.Start(t, "holder", "sem", "run", "s", "-f", specPath, "--", "sh", "-c", c.script)
				if code := h.Wait(t, 20*time.Second); code != c.want {
					t.Fatalf("%q under max_hold 1s: exit %d, want %d\n%s", c.script, code, c.want, h.Output())
				}
				if out, code := env.Run(t, "sem", "run", "s", "-f", specPath, "--no-wait", "--", "true"); code != 0 {
					t.Fatalf("the slot after max_hold stopped %q: %d %s", c.script, code, out)
				}
			}
		})
	}
}
