package main

// Every variable a child gets: the variables coordd gives cron commands,
// `sem run` and `queue work` are exactly those of the table in docs/spec.md
// ("Variables coordd sets"), in its formats, on sqlite, mysql and redis;
// the test reads the table, so the doc cannot drift from the code. A cron task with a semaphore hands its child the
// slot's fencing number, so the numbers a resource sees from both kinds of
// holder only grow.

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/open"
	"github.com/coordd/coordd/internal/proctest"
)

// childVarBackends are the backends that hold cron tasks and queues.
var childVarBackends = []string{"sqlite", "mysql", "postgres", "redis"}

// clusterBackend is the backends section and cluster line of a spec whose
// backend "db" is a fresh store of type typ.
func clusterBackend(t *testing.T, typ string) string {
	t.Helper()
	if typ == "sqlite" {
		return fmt.Sprintf("backends:\n  db: {type: sqlite, path: %q}\ncluster: {backend: db, leader_lease: 2s}\n", filepath.Join(t.TempDir(), "x.db"))
	}
	return hostsBackend(t, typ)
}

// docVar is one row of the table in docs/spec.md.
type docVar struct {
	name    string
	givenTo []string // "cron", "cron with semaphore", "sem run", "queue work"
	format  string
}

// varFormats are the formats the doc defines, as patterns.
var varFormats = map[string]*regexp.Regexp{
	"name":      regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`),
	"integer":   regexp.MustCompile(`^(0|[1-9][0-9]{0,18})$`),
	"timestamp": regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z$`),
	"hex32":     regexp.MustCompile(`^[0-9a-f]{32}$`),
	"key":       regexp.MustCompile(`^[^\x00-\x1f\x7f-\x{9f}]{1,255}$`),
}

var docGivenTo = map[string]bool{"cron": true, "cron with semaphore": true, "sem run": true, "sem run with key": true, "queue work": true, "rate run": true, "rate run with key": true}

// docVars reads the table under "### Variables coordd sets" in
// docs/spec.md and checks that each of its formats is defined there.
func docVars(t *testing.T) []docVar {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "spec.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	_, sec, ok := strings.Cut(doc, "\n### Variables coordd sets\n")
	if !ok {
		t.Fatal(`docs/spec.md has no "### Variables coordd sets" section`)
	}
	sec, _, _ = strings.Cut(sec, "\n#")
	var out []docVar
	sc := bufio.NewScanner(strings.NewReader(sec))
	for sc.Scan() {
		cells := strings.Split(strings.Trim(strings.TrimSpace(sc.Text()), "|"), "|")
		if len(cells) != 4 || !strings.HasPrefix(strings.TrimSpace(cells[0]), "`") {
			continue // not a row, or the header or separator
		}
		v := docVar{name: strings.Trim(strings.TrimSpace(cells[0]), "`"), format: strings.TrimSpace(cells[2])}
		for _, g := range strings.Split(cells[1], ",") {
			g = strings.TrimSpace(g)
			if !docGivenTo[g] {
				t.Fatalf("docs/spec.md: %s is given to %q, which this test does not know", v.name, g)
			}
			v.givenTo = append(v.givenTo, g)
		}
		if varFormats[v.format] == nil || !strings.Contains(sec, "- *"+v.format+"*:") {
			t.Fatalf("docs/spec.md: %s has format %q, not one the section defines or this test knows", v.name, v.format)
		}
		out = append(out, v)
	}
	if len(out) < 8 {
		t.Fatalf("docs/spec.md: only %d variables in the table", len(out))
	}
	return out
}

// parseEnv parses the output of env(1).
func parseEnv(out string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(l, "="); ok && regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`).MatchString(k) {
			m[k] = v
		}
	}
	return m
}

// inherited is the value the test gives every documented variable in its
// own environment: a command must never see it.
const inherited = "inherited-from-coordd"

// checkVars checks the environment dump out of a command of the kinds
// given against the doc: each variable given to one of them is there in
// its format (and equals want[name] when set); the others are absent; and
// no undocumented COORDD_ variable appears that coordd's own environment,
// parent (nil: this process's), did not hold with that value.
func checkVars(t *testing.T, what string, vars []docVar, out string, kinds []string, want map[string]string, parent []string) map[string]string {
	t.Helper()
	if parent == nil {
		parent = os.Environ()
	}
	parentEnv := parseEnv(strings.Join(parent, "\n"))
	got := parseEnv(out)
	if len(got) == 0 {
		t.Fatalf("%s: no environment dump:\n%s", what, out)
	}
	documented := map[string]bool{}
	for _, v := range vars {
		documented[v.name] = true
		given := false
		for _, g := range v.givenTo {
			for _, k := range kinds {
				given = given || g == k
			}
		}
		val, present := got[v.name]
		switch {
		case !given && present:
			t.Errorf("%s: %s=%q present; the doc gives it to %v only", what, v.name, val, v.givenTo)
		case !given:
		case !present:
			t.Errorf("%s: %s missing; the doc gives it to %v", what, v.name, v.givenTo)
		case !varFormats[v.format].MatchString(val):
			t.Errorf("%s: %s=%q is not a %s", what, v.name, val, v.format)
		case want[v.name] != "" && val != want[v.name]:
			t.Errorf("%s: %s=%q, want %q", what, v.name, val, want[v.name])
		}
		if v.format == "timestamp" && present {
			if _, err := time.Parse(time.RFC3339Nano, val); err != nil {
				t.Errorf("%s: %s=%q: %v", what, v.name, val, err)
			}
		}
	}
	for k, v := range got {
		if pv, ok := parentEnv[k]; strings.HasPrefix(k, "COORDD_") && !documented[k] && (!ok || pv != v) {
			t.Errorf("%s: %s=%q is set by coordd but not in the table of docs/spec.md", what, k, v)
		}
	}
	return got
}

func TestChildVariablesMatchSpecDoc(t *testing.T) {
	for _, typ := range childVarBackends {
		t.Run(typ, func(t *testing.T) { childVariables(t, typ) })
	}
}

func childVariables(t *testing.T, typ string) {
	vars := docVars(t)
	c := newCLI(t)
	p := writeSpec(t, clusterBackend(t, typ)+`semaphores:
  s: {limit: 1, max_hold: 1h}
  k: {limit: 1, max_hold: 1h, keyed: true}
queues:
  q: {visibility_timeout: 30s}
rate_limits:
  r: {rate: 10/s}
  rk: {rate: 10/s, keyed: true}
cron:
  plain: {schedule: "@every 1s", command: env}
  guarded: {schedule: "@every 1s", command: env, semaphore: s}
`)
	if code, _, errs := c.run("", false, "apply", "-f", p, "--auto-approve"); code != 0 {
		t.Fatalf("apply: %s", errs)
	}
	for _, v := range vars {
		t.Setenv(v.name, inherited)
	}

	code, out, errs := c.run("", false, "cron", "run", "plain", "-f", p)
	if code != 0 {
		t.Fatalf("cron run plain: %d %s", code, errs)
	}
	got := checkVars(t, "cron run plain", vars, out, []string{"cron"}, map[string]string{"COORDD_TASK": "plain", "COORDD_ATTEMPT": "1"}, nil)
	if got["COORDD_FENCING_TOKEN"] != got["COORDD_TASK_FENCING_TOKEN"] {
		t.Errorf("cron run plain: COORDD_FENCING_TOKEN %s, want the task's %s", got["COORDD_FENCING_TOKEN"], got["COORDD_TASK_FENCING_TOKEN"])
	}
	code, out, errs = c.run("", false, "cron", "run", "guarded", "-f", p)
	if code != 0 {
		t.Fatalf("cron run guarded: %d %s", code, errs)
	}
	checkVars(t, "cron run guarded", vars, out, []string{"cron", "cron with semaphore"}, map[string]string{"COORDD_TASK": "guarded", "COORDD_SEMAPHORE": "s", "COORDD_SLOT": "0"}, nil)

	code, out, errs = c.run("", false, "sem", "run", "s", "-f", p, "--", "env")
	if code != 0 {
		t.Fatalf("sem run: %d %s", code, errs)
	}
	checkVars(t, "sem run", vars, out, []string{"sem run"}, map[string]string{"COORDD_SEMAPHORE": "s", "COORDD_SLOT": "0"}, nil)

	code, out, errs = c.run("", false, "sem", "run", "k", "--key", "user 7/é", "-f", p, "--", "env")
	if code != 0 {
		t.Fatalf("sem run --key: %d %s", code, errs)
	}
	checkVars(t, "sem run --key", vars, out, []string{"sem run", "sem run with key"},
		map[string]string{"COORDD_SEMAPHORE": "k", "COORDD_SEMAPHORE_KEY": "user 7/é", "COORDD_SLOT": "0"}, nil)

	code, out, errs = c.run("", false, "rate", "run", "r", "-f", p, "--", "env")
	if code != 0 {
		t.Fatalf("rate run: %d %s", code, errs)
	}
	checkVars(t, "rate run", vars, out, []string{"rate run"}, map[string]string{"COORDD_RATE_LIMIT": "r"}, nil)
	code, out, errs = c.run("", false, "rate", "run", "rk", "--key", "partner 7/é", "-f", p, "--", "env")
	if code != 0 {
		t.Fatalf("rate run --key: %d %s", code, errs)
	}
	checkVars(t, "rate run --key", vars, out, []string{"rate run", "rate run with key"}, map[string]string{"COORDD_RATE_LIMIT": "rk", "COORDD_RATE_LIMIT_KEY": "partner 7/é"}, nil)

	code, id, errs := c.run("", false, "queue", "push", "q", "-f", p, "x")
	if code != 0 {
		t.Fatalf("queue push: %s", errs)
	}
	code, out, errs = c.run("", false, "queue", "work", "q", "-f", p, "--drain", "--", "env")
	if code != 0 {
		t.Fatalf("queue work: %d %s", code, errs)
	}
	checkVars(t, "queue work", vars, out, []string{"queue work"}, map[string]string{"COORDD_QUEUE": "q", "COORDD_JOB_ID": strings.TrimSpace(id), "COORDD_ATTEMPT": "1"}, nil)

	// The daemon's scheduled runs: their output is stored in the history.
	d := coorddCmd(t, c.dataDir, "run", "-f", p, "--host-id", "h1", "--shutdown-grace", "5s")
	logs := &proctest.SyncBuffer{}
	d.Stdout, d.Stderr = logs, logs
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- d.Wait() }()
	defer func() {
		_ = d.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = d.Process.Kill()
			<-exited
		}
	}()
	for _, task := range []string{"plain", "guarded"} {
		kinds, want := []string{"cron"}, map[string]string{"COORDD_TASK": task, "COORDD_ATTEMPT": "1"}
		if task == "guarded" {
			kinds, want["COORDD_SEMAPHORE"] = append(kinds, "cron with semaphore"), "s"
		}
		r := waitScheduled(t, p, task, logs)
		want["COORDD_RUN_ID"] = r.RunID
		want["COORDD_SCHEDULED_AT"] = r.ScheduledAt.UTC().Format("2006-01-02T15:04:05") + ".000000Z"
		want["COORDD_TASK_FENCING_TOKEN"] = strconv.FormatInt(r.Fencing, 10)
		checkVars(t, "scheduled "+task, vars, string(r.Output), kinds, want, d.Env)
	}
}

// waitScheduled waits for the first succeeded scheduled (not manual) run
// of task and returns it with its stored output.
func waitScheduled(t *testing.T, specPath, task string, logs *proctest.SyncBuffer) backends.Run {
	t.Helper()
	ctx := context.Background()
	s, ok := loadSpec(context.Background(), &cliEnv{stderr: os.Stderr}, specPath, false)
	if !ok {
		t.Fatal("load spec")
	}
	b, err := open.Open(ctx, s.Backends["db"], backends.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		runs, err := b.Crons().History(ctx, task, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range runs {
			if !r.Manual && r.Status == backends.RunSucceeded {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no scheduled run of %s succeeded within 60s; daemon output:\n%s", task, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestFencingAcrossCronAndSemRun: a cron task that holds semaphore s and
// `sem run s` clients take turns (limit 1); the numbers their commands see
// as COORDD_FENCING_TOKEN, in the order they started, only grow, so a
// resource that refuses a number lower than the highest it saw refuses no
// legitimate holder. Both the daemon's runs and `cron run` are covered.
func TestFencingAcrossCronAndSemRun(t *testing.T) {
	for _, typ := range childVarBackends {
		t.Run(typ, func(t *testing.T) { fencingAcross(t, typ) })
	}
}

func fencingAcross(t *testing.T, typ string) {
	c := newCLI(t)
	log := filepath.Join(t.TempDir(), "holders.log")
	p := writeSpec(t, clusterBackend(t, typ)+fmt.Sprintf(`semaphores:
  s: {limit: 1, lease: 10s, max_hold: 1h}
cron:
  guarded:
    schedule: "@every 1s"
    semaphore: s
    command: 'echo "cron $COORDD_FENCING_TOKEN" >> %[1]s; sleep 0.3'
`, log))
	if code, _, errs := c.run("", false, "apply", "-f", p, "--auto-approve"); code != 0 {
		t.Fatalf("apply: %s", errs)
	}
	semRun := func() {
		t.Helper()
		if code, _, errs := c.run("", false, "sem", "run", "s", "-f", p, "--wait", "1m", "--",
			"sh", "-c", `echo "sem $COORDD_FENCING_TOKEN" >> `+log+`; sleep 0.3`); code != 0 {
			t.Fatalf("sem run: %d %s", code, errs)
		}
	}
	type hold struct {
		kind    string
		fencing int64
	}
	read := func() []hold {
		b, err := os.ReadFile(log)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		var hs []hold
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if l == "" {
				continue
			}
			kind, num, _ := strings.Cut(l, " ")
			f, err := strconv.ParseInt(num, 10, 64)
			if err != nil {
				t.Fatalf("bad line %q", l)
			}
			hs = append(hs, hold{kind, f})
		}
		return hs
	}
	// Both turns, cron then sem and sem then cron, several times.
	interleaved := func(hs []hold) bool {
		cs, sc := 0, 0
		for i := 1; i < len(hs); i++ {
			switch {
			case hs[i-1].kind == "cron" && hs[i].kind == "sem":
				cs++
			case hs[i-1].kind == "sem" && hs[i].kind == "cron":
				sc++
			}
		}
		return cs >= 2 && sc >= 2
	}

	d := coorddCmd(t, c.dataDir, "run", "-f", p, "--host-id", "h1", "--shutdown-grace", "5s")
	logs := &proctest.SyncBuffer{}
	d.Stdout, d.Stderr = logs, logs
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(90 * time.Second)
	for !interleaved(read()) {
		if time.Now().After(deadline) {
			_ = d.Process.Kill()
			_ = d.Wait()
			t.Fatalf("the daemon's runs and sem run did not take turns within 90s: %v\n%s", read(), logs.String())
		}
		semRun()
	}
	_ = d.Process.Signal(syscall.SIGTERM)
	if err := d.Wait(); err != nil {
		t.Fatalf("daemon: %v\n%s", err, logs.String())
	}
	// A manual run between two sem runs.
	semRun()
	if code, _, errs := c.run("", false, "cron", "run", "guarded", "-f", p); code != 0 {
		t.Fatalf("cron run: %d %s", code, errs)
	}
	semRun()

	hs := read()
	for i := 1; i < len(hs); i++ {
		if hs[i].fencing <= hs[i-1].fencing {
			t.Errorf("start %d (%s) got fencing %d after %d (%s): %v", i, hs[i].kind, hs[i].fencing, hs[i-1].fencing, hs[i-1].kind, hs)
			break
		}
	}
	t.Logf("%d holds: %v", len(hs), hs)
}
