package main

// Promises of README.md ("Commands") and docs/operations.md ("The daemon",
// "Upgrades and schema migrations") about the command line that no other
// test holds to.

import (
	"bufio"
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

// TestPromisePlanDetailedExitcodeError: "plan --detailed-exitcode: 0 no
// changes, 2 changes, 1 error": an error is 1, never 2, even when the plan
// would have changes: an invalid spec, a backend that cannot be reached,
// and a plan that the guard rails block.
func TestPromisePlanDetailedExitcodeError(t *testing.T) {
	c := newCLI(t)
	invalid := writeSpec(t, "semaphores:\n  s: {limit: 0}\n")
	if code, _, errs := c.run("", false, "plan", "-f", invalid, "--detailed-exitcode"); code != 1 {
		t.Errorf("invalid spec: exit %d, want 1\n%s", code, errs)
	}
	for typ, decl := range map[string]string{
		"mysql":    `{type: mysql, dsn: "root@tcp(127.0.0.1:1)/coordd?timeout=2s"}`,
		"postgres": `{type: postgres, dsn: "postgres://postgres@127.0.0.1:1/coordd?sslmode=disable&connect_timeout=2"}`,
	} {
		unreachable := writeSpec(t, "backends:\n  db: "+decl+"\nsemaphores:\n  s: {limit: 1}\n")
		if code, _, errs := c.run("", false, "plan", "-f", unreachable, "--detailed-exitcode"); code != 1 || !strings.Contains(errs, "connection refused") {
			t.Errorf("unreachable %s backend: exit %d, want 1 for the refused connection\n%s", typ, code, errs)
		}
	}
	p := writeSpec(t, good)
	if code, _, errs := c.run("", false, "apply", "-f", p, "--auto-approve"); code != 0 {
		t.Fatalf("apply: %s", errs)
	}
	// Deleting everything is a change the guard rails refuse.
	empty := writeSpec(t, "# nothing\n")
	if code, out, errs := c.run("", false, "plan", "-f", empty, "--detailed-exitcode"); code != 1 {
		t.Errorf("blocked plan: exit %d, want 1\n%s\n%s", code, out, errs)
	}
	if code, _, errs := c.run("", false, "plan", "-f", empty, "--detailed-exitcode", "--allow-empty"); code != 2 {
		t.Errorf("the same plan allowed: exit %d, want 2\n%s", code, errs)
	}
}

// TestPromiseSpecFlagDefault: "-f takes a file or a directory and defaults
// to $COORDD_SPEC, then /etc/coordd".
func TestPromiseSpecFlagDefault(t *testing.T) {
	c := newCLI(t)
	p := writeSpec(t, good)
	run := func(env map[string]string, args ...string) (int, string, string) {
		var out, errb strings.Builder
		code := run(t.Context(), &cliEnv{
			stdin: strings.NewReader(""), stdout: &out, stderr: &errb,
			getenv: func(k string) string { return env[k] },
		}, args)
		return code, out.String(), errb.String()
	}
	if code, out, errs := run(map[string]string{"COORDD_SPEC": p}, "validate"); code != 0 || !strings.Contains(out, "valid") {
		t.Fatalf("validate with COORDD_SPEC and no -f: %d %s %s", code, out, errs)
	}
	if code, _, errs := run(map[string]string{"COORDD_SPEC": p}, "plan"); code != 0 {
		t.Fatalf("plan with COORDD_SPEC and no -f: %d %s", code, errs)
	}
	// -f wins over the variable.
	bad := writeSpec(t, "semaphores:\n  s: {limit: 0}\n")
	if code, _, errs := run(map[string]string{"COORDD_SPEC": p}, "validate", "-f", bad); code != 1 || !strings.Contains(errs, bad) {
		t.Fatalf("-f over COORDD_SPEC: %d %s", code, errs)
	}
	// Without either: /etc/coordd, for every command that reads a spec.
	for _, cmd := range [][]string{{"validate"}, {"plan"}, {"apply"}, {"run"}, {"status"}, {"sem", "run"}, {"sem", "status"}, {"cron", "run"}, {"queue", "push"}} {
		// --help is on stdout.
		code, help, _ := run(map[string]string{}, append(cmd, "--help")...)
		if code != 0 || !strings.Contains(help, `(default "/etc/coordd")`) {
			t.Errorf("%s --help without COORDD_SPEC: %d, want -f defaulting to /etc/coordd:\n%s", strings.Join(cmd, " "), code, help)
		}
		code, help, _ = run(map[string]string{"COORDD_SPEC": p}, append(cmd, "--help")...)
		if code != 0 || !strings.Contains(help, fmt.Sprintf("(default %q)", p)) {
			t.Errorf("%s --help with COORDD_SPEC: %d, want -f defaulting to it:\n%s", strings.Join(cmd, " "), code, help)
		}
	}
	if _, err := os.Stat("/etc/coordd"); os.IsNotExist(err) {
		if code, _, errs := run(map[string]string{}, "validate"); code != 1 || !strings.Contains(errs, "no spec at /etc/coordd (the default") {
			t.Fatalf("validate without -f or COORDD_SPEC: %d, want /etc/coordd reported missing:\n%s", code, errs)
		}
	}
	_ = c
}

// TestPromiseLogJSON: "logs go to stderr, JSON with --log-json, level with
// --log-level": every line the daemon writes is one JSON object with its
// level and message, and --log-level warn drops the info lines.
func TestPromiseLogJSON(t *testing.T) {
	env := proctest.NewEnv(t)
	specPath := writeSpec(t, "semaphores:\n  s: {limit: 1}\n")
	d := env.Start(t, "daemon", "run", "-f", specPath, "--host-id", "solo", "--log-json")
	proctest.Eventually(t, 20*time.Second, "the apply logged", func() bool { return strings.Contains(d.Output(), "apply done") })
	d.Signal(syscall.SIGTERM)
	if code := d.Wait(t, 30*time.Second); code != 0 {
		t.Fatalf("daemon exited %d", code)
	}
	levels := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(d.Output()))
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("not a JSON line: %q (%v)\n%s", sc.Text(), err, d.Output())
		}
		lvl, _ := line["@level"].(string)
		msg, _ := line["@message"].(string)
		if lvl == "" || msg == "" || line["@timestamp"] == nil {
			t.Fatalf("JSON line without level, message or time: %q", sc.Text())
		}
		levels[lvl]++
	}
	if levels["info"] == 0 {
		t.Fatalf("levels seen %v, want info lines", levels)
	}

	quiet := env.Start(t, "quiet", "run", "-f", specPath, "--host-id", "quiet", "--log-json", "--log-level", "warn")
	time.Sleep(time.Second) // long enough for its start lines (info)
	quiet.Signal(syscall.SIGTERM)
	if code := quiet.Wait(t, 30*time.Second); code != 0 {
		t.Fatalf("daemon exited %d", code)
	}
	if strings.Contains(quiet.Output(), `"@level":"info"`) || strings.Contains(quiet.Output(), "coordd running") {
		t.Fatalf("--log-level warn printed info lines:\n%s", quiet.Output())
	}
}

// TestPromiseQueueWorkTimeout: a queue's `timeout` stops a job's command
// (TERM, then KILL after the grace when TERM is ignored); the attempt
// counts as failed ("timed out").
func TestPromiseQueueWorkTimeout(t *testing.T) {
	c := newCLI(t)
	p := queueFixture(t, c, "{visibility_timeout: 3s, timeout: 1s, max_attempts: 1}")
	env := &proctest.Env{Bin: proctest.Binary(t), DataDir: c.dataDir}
	dir := t.TempDir()
	for i, script := range []string{
		"echo $$ > " + dir + "/0; exec sleep 60",                             // stops at TERM
		"echo $$ > " + dir + "/1; trap '' TERM; while :; do sleep 0.1; done", // needs KILL
	} {
		if code, _, errs := c.run("", false, "queue", "push", "q", "-f", p, "job"); code != 0 {
			t.Fatalf("push: %s", errs)
		}
		w := env.Start(t, "worker", "queue", "work", "q", "-f", p, "--drain", "--", "sh", "-c", script)
		if code := w.Wait(t, 30*time.Second); code != 0 {
			t.Fatalf("queue work: exit %d (the timeout is 1s)", code)
		}
		pid, err := strconv.Atoi(waitFile(t, filepath.Join(dir, strconv.Itoa(i)), time.Second))
		if err != nil || alive(pid) {
			t.Fatalf("command %d (%v) still alive after queue work returned", pid, err)
		}
		if st := queueStatsOf(t, c, p); st.Dead != int64(i+1) || st.Ready+st.InFlight != 0 {
			t.Fatalf("stats after the timeout: %+v", st)
		}
	}
	code, out, _ := c.run("", false, "queue", "dead", "q", "-f", p)
	if code != 0 || strings.Count(out, "timed out") != 2 {
		t.Fatalf("dead jobs should say they timed out: %d\n%s", code, out)
	}
}

// unmigratedStores are a spec on a store that was never migrated, per
// backend type, and a function counting the tables in that store.
func unmigratedStore(t *testing.T, typ string) (header string, tables func() int) {
	t.Helper()
	var db *sql.DB
	var err error
	var q string
	switch typ {
	case "sqlite":
		path := filepath.Join(t.TempDir(), "x.db")
		header = fmt.Sprintf("backends:\n  db: {type: sqlite, path: %q}\n", path)
		db, err = sql.Open("sqlite", "file:"+path)
		q = "SELECT count(*) FROM sqlite_master WHERE type = 'table'"
	case "mysql":
		dsn := testenv.MySQLDSN(t)
		header = fmt.Sprintf("backends:\n  db: {type: mysql, dsn: %q}\n", dsn)
		db, err = sql.Open("mysql", dsn)
		q = "SELECT count(*) FROM information_schema.tables WHERE table_schema = DATABASE()"
	case "postgres":
		dsn := testenv.PostgresDSN(t)
		header = fmt.Sprintf("backends:\n  db: {type: postgres, dsn: %q, schema: coordd}\n", dsn)
		db, err = sql.Open("pgx", dsn)
		q = "SELECT count(*) FROM information_schema.tables WHERE table_schema NOT IN ('pg_catalog', 'information_schema')"
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return header, func() int {
		var n int
		if err := db.QueryRow(q).Scan(&n); err != nil {
			t.Fatalf("counting tables: %v", err)
		}
		return n
	}
}

// TestPromiseUnmigratedStoreFailsCleanly: "sem run, cron run and queue
// push/work do not migrate either: on a store that was never migrated
// they fail" (operations.md, "Who migrates"), with their documented exit
// codes and a message saying what to do, and create no table; once an
// apply migrated the store they work.
func TestPromiseUnmigratedStoreFailsCleanly(t *testing.T) {
	for _, typ := range []string{"sqlite", "mysql", "postgres"} {
		t.Run(typ, func(t *testing.T) {
			header, tables := unmigratedStore(t, typ)
			p := writeSpec(t, header+`semaphores:
  s: {limit: 1, backend: db}
cron:
  t: {schedule: "@daily", command: "true", backend: db}
queues:
  q: {backend: db}
`)
			env := proctest.NewEnv(t)
			for _, tc := range []struct {
				args []string
				code int
			}{
				{[]string{"sem", "run", "s", "-f", p, "--", "true"}, 125},
				{[]string{"cron", "run", "t", "-f", p}, 125},
				{[]string{"queue", "push", "q", "-f", p, "x"}, 1},
				{[]string{"queue", "work", "q", "-f", p, "--drain", "--", "true"}, 1},
			} {
				out, code := env.Run(t, tc.args...)
				if code != tc.code || !strings.Contains(out, "not applied") || !strings.Contains(out, "run coordd apply") {
					t.Errorf("%s on an unmigrated store: exit %d, want %d saying to run coordd apply:\n%s", strings.Join(tc.args[:2], " "), code, tc.code, out)
				}
			}
			if n := tables(); n != 0 {
				t.Fatalf("the commands created %d tables in an unmigrated store", n)
			}
			if out, code := env.Run(t, "apply", "-f", p, "--auto-approve"); code != 0 {
				t.Fatalf("apply: %s", out)
			}
			for _, args := range [][]string{
				{"sem", "run", "s", "-f", p, "--", "true"},
				{"cron", "run", "t", "-f", p},
				{"queue", "push", "q", "-f", p, "x"},
				{"queue", "work", "q", "-f", p, "--drain", "--", "true"},
			} {
				if out, code := env.Run(t, args...); code != 0 {
					t.Errorf("%s after apply: exit %d\n%s", strings.Join(args[:2], " "), code, out)
				}
			}
		})
	}
}

// TestPromiseRollbackIgnoresUnknownSchema: "Rolling back. Within a minor
// version, install the older binary again and restart: it ignores the
// tables and columns it does not know." The store is migrated further
// than this binary knows by a compatible migration (min_binary 0.1.0) that
// adds a table, a column to every table and a row to the new table, as a
// newer binary of the same minor version would; this binary, standing for
// the older one, starts and runs everything on it.
func TestPromiseRollbackIgnoresUnknownSchema(t *testing.T) {
	for _, typ := range []string{"sqlite", "mysql", "postgres"} {
		t.Run(typ, func(t *testing.T) {
			header, _ := unmigratedStore(t, typ)
			objects := `semaphores:
  s: {limit: 1, backend: db}
cron:
  t: {schedule: "@every 1s", command: "true", backend: db}
queues:
  q: {backend: db}
`
			p := writeSpec(t, header+"cluster: {backend: db}\n"+objects)
			env := proctest.NewEnv(t)
			if out, code := env.Run(t, "apply", "-f", p, "--auto-approve"); code != 0 {
				t.Fatalf("apply: %s", out)
			}
			migrateFurther(t, typ, header)

			d := env.Start(t, "daemon", "run", "-f", p, "--host-id", "solo", "--shutdown-grace", "5s")
			proctest.Eventually(t, 30*time.Second, "a scheduled run", func() bool {
				out, _ := env.Run(t, "cron", "history", "t", "-f", p)
				return strings.Contains(out, "succeeded")
			})
			for _, args := range [][]string{
				{"plan", "-f", p, "--detailed-exitcode"},
				{"status", "-f", p},
				{"sem", "run", "s", "-f", p, "--", "true"},
				{"sem", "status", "-f", p},
				{"queue", "push", "q", "-f", p, "x"},
				{"queue", "work", "q", "-f", p, "--drain", "--", "true"},
				{"queue", "stats", "q", "-f", p},
			} {
				if out, code := env.Run(t, args...); code != 0 {
					t.Errorf("%s on a store migrated further: exit %d\n%s", strings.Join(args[:2], " "), code, out)
				}
			}
			d.Signal(syscall.SIGTERM)
			if code := d.Wait(t, 30*time.Second); code != 0 {
				t.Fatalf("daemon exited %d:\n%s", code, d.Output())
			}
			// A second apply re-migrates nothing and keeps the newer schema.
			if out, code := env.Run(t, "apply", "-f", p, "--auto-approve"); code != 0 {
				t.Fatalf("apply on a store migrated further: %s", out)
			}
		})
	}
}

// migrateFurther applies to the store in header what a newer binary of the
// same minor version could have applied: migration 9999, compatible with
// 0.1.0, adding a table with a row and a defaulted column to every table.
func migrateFurther(t *testing.T, typ, header string) {
	t.Helper()
	var db *sql.DB
	var err error
	var list string
	var stmts []string
	alter := "ALTER TABLE `%s` ADD COLUMN future_col INTEGER NOT NULL DEFAULT 7"
	switch typ {
	case "sqlite":
		path := header[strings.Index(header, `path: "`)+len(`path: "`):]
		path = path[:strings.Index(path, `"`)]
		db, err = sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
		list = "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
		stmts = []string{
			"CREATE TABLE future_things (id INTEGER PRIMARY KEY, what TEXT NOT NULL)",
			"INSERT INTO future_things (what) VALUES ('from a newer binary')",
			"INSERT INTO schema_migrations (version, name, min_binary, applied_at, applied_by) VALUES (9999, 'future', '0.1.0', 0, '0.1.99')",
		}
	case "mysql":
		dsn, _ := strconv.Unquote(header[strings.Index(header, "dsn: ")+len("dsn: ") : strings.LastIndex(header, "}")])
		db, err = sql.Open("mysql", dsn)
		list = "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()"
		stmts = []string{
			"CREATE TABLE coordd_future_things (id BIGINT AUTO_INCREMENT PRIMARY KEY, what TEXT NOT NULL)",
			"INSERT INTO coordd_future_things (what) VALUES ('from a newer binary')",
			"INSERT INTO coordd_schema_migrations (version, name, min_binary, applied_at, applied_by) VALUES (9999, 'future', '0.1.0', 0, '0.1.99')",
		}
	case "postgres":
		// The header unmigratedStore wrote: schema coordd, the default prefix.
		db, err = sql.Open("pgx", mysqlDSNOf(t, header))
		list = "SELECT table_name FROM information_schema.tables WHERE table_schema = 'coordd'"
		stmts = []string{
			`CREATE TABLE coordd.coordd_future_things (id bigserial PRIMARY KEY, what text NOT NULL)`,
			`INSERT INTO coordd.coordd_future_things (what) VALUES ('from a newer binary')`,
			`INSERT INTO coordd.coordd_schema_migrations (version, name, min_binary, applied_at, applied_by) VALUES (9999, 'future', '0.1.0', 0, '0.1.99')`,
		}
		alter = `ALTER TABLE coordd."%s" ADD COLUMN future_col bigint NOT NULL DEFAULT 7`
	}
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(list)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	rows.Close()
	if len(names) < 5 {
		t.Fatalf("tables %v: the store is not migrated", names)
	}
	for _, n := range names {
		stmts = append(stmts, fmt.Sprintf(alter, n))
	}
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}
