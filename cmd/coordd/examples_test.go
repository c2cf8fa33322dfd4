package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	yaml "go.yaml.in/yaml/v3"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/sqlite"
	"github.com/coordd/coordd/internal/proctest"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/metrics"
)

// The examples/ tree must not rot: every spec in it validates, every
// example's run.sh runs as written against the embedded store and, for its
// backend variants (a subdirectory named mysql, postgres, redis or memcached), against
// the real servers of internal/testenv; the quickstart's README commands
// work; the alert rules name only metrics coordd registers; and every
// coordd flag quoted in the operator docs and the examples exists.

// examplesRoot is the repository's examples/ directory.
func examplesRoot(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "..", "examples"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// exampleSpecDirs returns every directory under examples/ that holds a
// spec (a coordd.yaml). It fails on any other *.yaml/*.yml outside
// examples/prometheus, so that a spec under another name cannot escape
// these tests.
func exampleSpecDirs(t *testing.T) []string {
	t.Helper()
	root := examplesRoot(t)
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		switch {
		case d.Name() == "coordd.yaml":
			dirs = append(dirs, filepath.Dir(p))
		case strings.HasPrefix(rel, "prometheus"+string(filepath.Separator)):
		case strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml"):
			t.Errorf("examples/%s: a spec file must be named coordd.yaml (one spec per directory)", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(dirs)
	if len(dirs) < 6 {
		t.Fatalf("found only %d example specs under %s: %v", len(dirs), root, dirs)
	}
	return dirs
}

func TestExamplesValidate(t *testing.T) {
	for _, dir := range exampleSpecDirs(t) {
		rel, _ := filepath.Rel(examplesRoot(t), dir)
		t.Run(rel, func(t *testing.T) {
			c := newCLI(t)
			// Every ${VAR} in the examples has a default, so they validate
			// with and without --skip-env.
			for _, extra := range [][]string{nil, {"--skip-env"}} {
				args := append([]string{"validate", "-f", dir}, extra...)
				if code, out, errs := c.run("", false, args...); code != 0 {
					t.Errorf("coordd %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errs)
				}
			}
		})
	}
}

// variantEnv returns the environment that points a backend variant of an
// example (its subdirectory name) at the test servers.
func variantEnv(t *testing.T, variant string) []string {
	t.Helper()
	switch variant {
	case "":
		return nil
	case "mysql":
		return []string{"COORDD_MYSQL_DSN=" + testenv.MySQLDSN(t)}
	case "postgres":
		return []string{"COORDD_POSTGRES_DSN=" + testenv.PostgresDSN(t)}
	case "redis":
		url, prefix := testenv.RedisURL(t)
		return []string{"COORDD_REDIS_URL=" + url, "COORDD_REDIS_PREFIX=" + prefix}
	case "memcached":
		addr, prefix := testenv.MemcachedAddr(t)
		return []string{"COORDD_MEMCACHED=" + addr, "COORDD_MEMCACHED_PREFIX=" + prefix}
	}
	t.Fatalf("no test environment for the example variant %q: add it to variantEnv", variant)
	return nil
}

// scriptEnv is the environment of an example script: the test's coordd
// first on PATH, a data dir of its own, no spec path from the caller.
func scriptEnv(t *testing.T, extra []string) []string {
	t.Helper()
	bin := proctest.Binary(t)
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PATH=") || strings.HasPrefix(kv, "COORDD_SPEC=") || strings.HasPrefix(kv, "COORDD_DATA_DIR=") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"), "COORDD_DATA_DIR="+t.TempDir())
	return append(env, extra...)
}

// TestExamplesRun runs every examples/*/run.sh, and run.sh VARIANT for each
// backend variant subdirectory, and expects exit 0 and a last line "OK".
// The scripts check what they demonstrate themselves (a second copy exits
// 75, the pool never exceeds its limit, the dead set holds the bad job, …).
func TestExamplesRun(t *testing.T) {
	root := examplesRoot(t)
	scripts, err := filepath.Glob(filepath.Join(root, "*", "run.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if len(scripts) < 5 {
		t.Fatalf("found only %d examples/*/run.sh", len(scripts))
	}
	proctest.Binary(t) // build once, before the parallel subtests
	for _, script := range scripts {
		dir := filepath.Dir(script)
		variants := []string{""}
		subs, _ := filepath.Glob(filepath.Join(dir, "*", "coordd.yaml"))
		for _, s := range subs {
			variants = append(variants, filepath.Base(filepath.Dir(s)))
		}
		for _, v := range variants {
			name := filepath.Base(dir)
			if v != "" {
				name += "/" + v
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				env := scriptEnv(t, variantEnv(t, v))
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
				defer cancel()
				args := []string{script}
				if v != "" {
					args = append(args, v)
				}
				cmd := exec.CommandContext(ctx, "bash", args...)
				cmd.Env = env
				cmd.Dir = t.TempDir() // the scripts must not depend on the caller's directory
				cmd.WaitDelay = 10 * time.Second
				out, err := cmd.CombinedOutput()
				lines := strings.Split(strings.TrimSpace(string(out)), "\n")
				if err != nil || lines[len(lines)-1] != "OK" {
					t.Fatalf("bash %s: %v\n%s", strings.Join(args, " "), err, out)
				}
			})
		}
	}
	// Every spec directory is either an example with a run.sh or one of its
	// variants, or the quickstart (TestExamplesQuickstart).
	for _, d := range exampleSpecDirs(t) {
		rel, _ := filepath.Rel(root, d)
		top := strings.Split(rel, string(filepath.Separator))[0]
		if _, err := os.Stat(filepath.Join(root, top, "run.sh")); err != nil && top != "quickstart" {
			t.Errorf("examples/%s has a spec but no run.sh that this test runs", rel)
		}
	}
}

// TestExamplesQuickstart runs the commands of README.md's quick start
// against examples/quickstart on the embedded store.
func TestExamplesQuickstart(t *testing.T) {
	t.Parallel()
	spec := filepath.Join(examplesRoot(t), "quickstart")
	env := proctest.NewEnv(t)
	run := func(want int, args ...string) string {
		t.Helper()
		out, code := env.Run(t, args...)
		if code != want {
			t.Fatalf("coordd %s: exit %d, want %d\n%s", strings.Join(args, " "), code, want, out)
		}
		return out
	}
	run(0, "apply", "-f", spec, "--auto-approve")
	if out := run(0, "sem", "run", "image-import", "-f", spec, "--", "sh", "-c", `echo "slot $COORDD_SLOT, fencing token $COORDD_FENCING_TOKEN"`); !strings.Contains(out, "slot 0, fencing token ") {
		t.Errorf("sem run: %s", out)
	}
	id := strings.TrimSpace(run(0, "queue", "push", "thumbnails", "-f", spec, `{"image": 42}`))
	if out := run(0, "queue", "work", "thumbnails", "-f", spec, "--drain", "--", "sh", "-c", `cat; echo " <- job $COORDD_JOB_ID"`); !strings.Contains(out, `{"image": 42} <- job `+id) {
		t.Errorf("queue work: %s", out)
	}
	if out := run(0, "cron", "run", "heartbeat", "-f", spec); !strings.Contains(out, "alive: run ") {
		t.Errorf("cron run: %s", out)
	}
	if out := run(0, "cron", "history", "heartbeat", "-f", spec); !strings.Contains(out, "succeeded") {
		t.Errorf("cron history: %s", out)
	}
	if out := run(0, "status", "-f", spec); !strings.Contains(out, "queue.thumbnails") {
		t.Errorf("status: %s", out)
	}
	if out := run(0, "plan", "-f", spec, "--detailed-exitcode"); !strings.Contains(out, "No changes.") {
		t.Errorf("plan: %s", out)
	}
}

// registeredMetrics returns the names of the metric families coordd
// serves, from a metrics.Metrics over a real SQLite store that holds a
// semaphore and a queue, after one event of each kind.
func registeredMetrics(t *testing.T) map[string]bool {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, "local", filepath.Join(t.TempDir(), "coordd.db"), backends.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := st.PutSemaphore(ctx, backends.SemaphoreConfig{Name: "s", Limit: 1, Lease: time.Minute, Mode: "lease", MaxWaiting: -1}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutQueue(ctx, backends.QueueConfig{Name: "q", Partitions: 1, VisibilityTimeout: time.Minute, MaxAttempts: 1}); err != nil {
		t.Fatal(err)
	}
	// A cron task with a successful run, for the cron gauges.
	if err := st.PutCron(ctx, "t", []byte(`{"schedule":"@hourly","command":{"argv":["true"]}}`), time.Now().Add(time.Hour), true); err != nil {
		t.Fatal(err)
	}
	occ, err := st.ClaimOccurrence(ctx, backends.ClaimRequest{Task: "t", Attempt: 1, Owner: "o", Host: "h", Lease: time.Minute, Manual: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := backends.FinishOne(ctx, st, occ, backends.RunResult{Status: backends.RunSucceeded}); err != nil {
		t.Fatal(err)
	}
	reg := st.Cluster()
	m := metrics.New(metricsSource{objs: []metrics.Objects{{Backend: "local", B: st, Semaphores: []string{"s"}, Queues: []string{"q"}, Crons: []string{"t"}}}, reg: reg})
	m.CronStarted("t", time.Now(), 1, time.Now())
	m.CronFinished("t", "failed")
	m.Reconciled("apply", errors.New("refused"))
	m.RoundTrip("local", "renew_leader", time.Millisecond)
	m.HookDelivered("cron.t", "cron.failed", false)
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range fams {
		names[f.GetName()] = true
	}
	return names
}

// metricsSource is a daemon's state for registeredMetrics: leading, a good
// reload, the applied spec loaded, a host registry.
type metricsSource struct {
	objs []metrics.Objects
	reg  backends.Cluster
}

func (metricsSource) Leading() (int64, bool)        { return 1, true }
func (metricsSource) LastReload() (bool, time.Time) { return true, time.Now() }
func (metricsSource) Health() error                 { return nil }
func (metricsSource) Ready(context.Context) error   { return nil }
func (s metricsSource) Objects() []metrics.Objects  { return s.objs }
func (metricsSource) SpecHashes() (local, applied string, known bool) {
	return "0123456789abcdef", "0123456789abcdef", true
}
func (s metricsSource) HostRegistry() (string, backends.Cluster) { return "local", s.reg }

var metricName = regexp.MustCompile(`\bcoordd_[a-z0-9_]+`)

// TestExamplesAlertRules: every coordd_ metric an alert expression uses is
// one coordd registers (a histogram's _bucket, _count and _sum included),
// and with promtool on PATH the rules pass `promtool check rules` and
// their unit tests.
func TestExamplesAlertRules(t *testing.T) {
	dir := filepath.Join(examplesRoot(t), "prometheus")
	b, err := os.ReadFile(filepath.Join(dir, "coordd-alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	known := registeredMetrics(t)
	alerts := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts[r.Alert] = true
			if r.Alert == "" || strings.TrimSpace(r.Expr) == "" {
				t.Errorf("group %s: a rule without alert or expr: %+v", g.Name, r)
			}
			for _, name := range metricName.FindAllString(r.Expr, -1) {
				base := name
				for _, suffix := range []string{"_bucket", "_count", "_sum"} {
					if s, ok := strings.CutSuffix(name, suffix); ok && known[s] {
						base = s
					}
				}
				if !known[base] {
					t.Errorf("alert %s uses %s, which coordd does not register", r.Alert, name)
				}
			}
		}
	}
	// What docs/operations.md says to alert on.
	for _, a := range []string{"CoorddNoLeader", "CoorddReloadFailed", "CoorddCronLate", "CoorddCronRunsFailed", "CoorddCronOverdue", "CoorddHookFailed",
		"CoorddSemaphoreStuck", "CoorddQueueBacklogOld", "CoorddQueueDeadJobs", "CoorddBackendUnreadable",
		"CoorddSpecNotApplied", "CoorddHostsDisagree"} {
		if !alerts[a] {
			t.Errorf("no alert %s", a)
		}
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool is not installed; checked the metric names only")
		return
	}
	for _, args := range [][]string{{"check", "rules", "coordd-alerts.yml"}, {"test", "rules", "coordd-alerts.test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestExamplesSystemdUnit checks the unit against the real flags and the
// shutdown timing: systemd must not SIGKILL coordd before its grace period
// and the commands' kill_grace are over, and must send SIGTERM to coordd
// alone.
func TestExamplesSystemdUnit(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(examplesRoot(t), "systemd", "coordd.service"))
	if err != nil {
		t.Fatal(err)
	}
	unit := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			unit[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	for k, want := range map[string]string{"User": "coordd", "StateDirectory": "coordd", "KillMode": "mixed",
		"ExecReload": "/bin/kill -HUP $MAINPID", "Restart": "always", "NoNewPrivileges": "yes"} {
		if unit[k] != want {
			t.Errorf("%s=%q, want %q", k, unit[k], want)
		}
	}
	argv := strings.Fields(unit["ExecStart"])
	if len(argv) < 2 || argv[1] != "run" || !slices.Contains(argv, "--listen") || !strings.HasPrefix(argv[slices.Index(argv, "--listen")+1], "127.0.0.1:") {
		t.Fatalf("ExecStart=%s: want coordd run ... --listen 127.0.0.1:PORT", unit["ExecStart"])
	}
	grace := 30 * time.Second
	if i := slices.Index(argv, "--shutdown-grace"); i > 0 {
		if grace, err = time.ParseDuration(argv[i+1]); err != nil {
			t.Fatal(err)
		}
	}
	stop, err := time.ParseDuration(unit["TimeoutStopSec"])
	if err != nil {
		t.Fatalf("TimeoutStopSec=%q: %v", unit["TimeoutStopSec"], err)
	}
	if killGrace := 10 * time.Second; stop <= grace+killGrace {
		t.Errorf("TimeoutStopSec=%s leaves no time after --shutdown-grace %s and kill_grace %s", stop, grace, killGrace)
	}
}

// coorddLine finds a coordd command in a line of documentation, up to the
// end of its code span or shell command.
var coorddLine = regexp.MustCompile("coordd (validate|plan|apply|run|status|cron|queue|sem|version)\\b([^`|;&)\"]*)")

// flagToken is a flag in a command line.
var flagToken = regexp.MustCompile(`^--?([a-z][a-z-]*)(=.*)?$`)

// TestExamplesDocsFlags: every flag written after `coordd CMD [SUB]` in the
// operator docs and the examples is a flag of that command.
func TestExamplesDocsFlags(t *testing.T) {
	c := newCLI(t)
	helpFlags := map[string]map[string]bool{}
	flagsOf := func(cmd []string) map[string]bool {
		key := strings.Join(cmd, " ")
		if f, ok := helpFlags[key]; ok {
			return f
		}
		_, help, _ := c.run("", false, append(slices.Clone(cmd), "--help")...)
		f := map[string]bool{"h": true, "help": true}
		for _, line := range strings.Split(help, "\n") {
			// "  -f, --file PATH  ..." or "  --json  ..."
			if m := regexp.MustCompile(`^\s+(?:-([a-z]), )?--?([a-z][a-z-]*)`).FindStringSubmatch(line); m != nil {
				f[m[1]], f[m[2]] = true, true
			}
		}
		helpFlags[key] = f
		return f
	}
	subs := map[string][]string{"sem": {"run", "status"}, "cron": {"run", "list", "history"}, "queue": {"push", "work", "stats", "dead"}}
	files := []string{filepath.Join("..", "..", "README.md"), filepath.Join("..", "..", "docs", "operations.md"), filepath.Join("..", "..", "docs", "benchmarks.md")}
	_ = filepath.WalkDir(examplesRoot(t), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.HasSuffix(p, ".yml") {
			files = append(files, p)
		}
		return err
	})
	checked := 0
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for n, line := range strings.Split(string(b), "\n") {
			for _, m := range coorddLine.FindAllStringSubmatch(line, -1) {
				cmd := []string{m[1]}
				words := strings.Fields(m[2])
				if i := slices.Index(words, "--"); i >= 0 {
					words = words[:i]
				}
				if len(words) > 0 && slices.Contains(subs[m[1]], words[0]) {
					cmd = append(cmd, words[0])
				}
				if len(cmd) == 1 && subs[m[1]] != nil {
					continue // `coordd sem` on its own, or prose
				}
				known := flagsOf(cmd)
				for _, w := range words {
					w = strings.Trim(w, "[]")
					if f := flagToken.FindStringSubmatch(w); f != nil {
						checked++
						if !known[f[1]] {
							t.Errorf("%s:%d: coordd %s has no flag %s", file, n+1, strings.Join(cmd, " "), w)
						}
					}
				}
			}
		}
	}
	if checked < 50 {
		t.Errorf("checked only %d flags; is the pattern still right?", checked)
	}
	t.Log("flags checked: " + strconv.Itoa(checked))
}
