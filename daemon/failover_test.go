package daemon_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/proctest"
	"github.com/coordd/coordd/internal/testenv"
)

// TestThreeDaemonsEveryOccurrenceOnce runs three daemons sharing one store
// and an `@every 1s` task with the task defaults but catch_up: all (so
// overlap forbid, the 30 s run lease and the 30 s retry_backoff), whose
// command runs for 0.8 s of its 1 s period. It freezes (SIGSTOP) the
// daemon running a command for three leader leases, so that another
// daemon leads while the frozen one still holds its run and believes it
// leads, wakes it, and then kills the leader with kill -9 while its
// command runs. From the commands' own log and the task's history it
// checks that no attempt started twice; that fencing numbers grew strictly
// in the order the commands started (so never repeated); that every
// scheduled time from the first to 5 s after the dead run's lease ran out
// started, none skipped: the times due while the frozen or dead run might
// still be live waited for it (a time skipped for overlap must follow a
// command that, on a loaded machine, ran longer than the period); that the
// dead run was recorded lost and ran again; and that another daemon took
// over.
func TestThreeDaemonsEveryOccurrenceOnce(t *testing.T) {
	// The backends run at once: each waits out a run lease and its
	// catch-up, mostly asleep.
	t.Run("sqlite", func(t *testing.T) { t.Parallel(); threeDaemons(t, "cluster: {leader_lease: 2s}") })
	t.Run("mysql", func(t *testing.T) {
		t.Parallel()
		dsn := testenv.MySQLDSN(t)
		threeDaemons(t, fmt.Sprintf(`backends:
  db: {type: mysql, dsn: %q, table_prefix: "t3_"}
cluster: {backend: db, leader_lease: 2s}`, dsn))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		dsn := testenv.PostgresDSN(t)
		threeDaemons(t, fmt.Sprintf(`backends:
  db: {type: postgres, dsn: %q, schema: coordd, table_prefix: "t3_"}
cluster: {backend: db, leader_lease: 2s}`, dsn))
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		url, prefix := testenv.RedisURL(t)
		threeDaemons(t, fmt.Sprintf(`backends:
  cache: {type: redis, url: %q, key_prefix: %q}
cluster: {backend: cache, leader_lease: 2s}`, url, prefix))
	})
}

// runLine is one line of the commands' log: a start, with the run's
// fencing number, or an end; at is when it was written.
type runLine struct {
	start       bool
	scheduledAt time.Time
	attempt     int
	host        string
	fencing     int64 // start
	at          time.Time
}

func (l runLine) key() string {
	return fmt.Sprintf("%s#%d", l.scheduledAt.Format(time.RFC3339Nano), l.attempt)
}

// runLogCommand logs the start of each run with its fencing number, sleeps
// 0.8 s and logs its end, each line with the time.
func runLogCommand(path string) string {
	return fmt.Sprintf(`echo "start $COORDD_SCHEDULED_AT $COORDD_ATTEMPT $COORDD_TEST_HOST $(date +%%s.%%N) $COORDD_FENCING_TOKEN" >> %[1]s; sleep 0.8; echo "end $COORDD_SCHEDULED_AT $COORDD_ATTEMPT $COORDD_TEST_HOST $(date +%%s.%%N)" >> %[1]s`, path)
}

func readRunLog(t *testing.T, path string) []runLine {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []runLine
	for _, s := range strings.Split(string(b), "\n") {
		if s == "" {
			continue
		}
		f := strings.Fields(s)
		if !(len(f) == 6 && f[0] == "start" || len(f) == 5 && f[0] == "end") {
			t.Fatalf("bad log line %q", s)
		}
		l := runLine{start: f[0] == "start", host: f[3]}
		var err1, err2, err3, err4 error
		l.scheduledAt, err1 = time.Parse(time.RFC3339Nano, f[1])
		l.attempt, err2 = strconv.Atoi(f[2])
		var sec float64
		sec, err3 = strconv.ParseFloat(f[4], 64)
		l.at = time.Unix(0, int64(sec*1e9))
		if l.start {
			l.fencing, err4 = strconv.ParseInt(f[5], 10, 64)
		}
		if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
			t.Fatalf("bad log line %q", s)
		}
		out = append(out, l)
	}
	return out
}

// inFlight waits for a run whose command started and has not ended, and
// returns its start line.
func inFlight(t *testing.T, path string) runLine {
	t.Helper()
	var got runLine
	proctest.Eventually(t, 30*time.Second, "a command in flight", func() bool {
		lines := readRunLog(t, path)
		ended := map[string]bool{}
		for _, l := range lines {
			if !l.start {
				ended[l.key()] = true
			}
		}
		for i := len(lines) - 1; i >= 0; i-- {
			if l := lines[i]; l.start && !ended[l.key()] {
				got = l
				return true
			}
		}
		return false
	})
	return got
}

// latestStart is the latest scheduled time started so far.
func latestStart(t *testing.T, path string) time.Time {
	var last time.Time
	for _, l := range readRunLog(t, path) {
		if l.start && l.scheduledAt.After(last) {
			last = l.scheduledAt
		}
	}
	return last
}

// cronRun is one row of `cron history --json`.
type cronRun struct {
	ScheduledAt time.Time `json:"scheduled_at"`
	Attempt     int       `json:"attempt"`
	Status      string    `json:"status"`
	Error       string    `json:"error"`
	StartedAt   time.Time `json:"started_at"`
}

func cronHistory(t *testing.T, env *proctest.Env, specPath, task string) []cronRun {
	t.Helper()
	out, code := env.Run(t, "cron", "history", task, "-f", specPath, "--json", "--limit", "0")
	if code != 0 {
		t.Fatalf("cron history: %d\n%s", code, out)
	}
	var runs []cronRun
	if err := json.Unmarshal([]byte(out), &runs); err != nil {
		t.Fatalf("cron history: %v\n%s", err, out)
	}
	return runs
}

// overlapSkipped lists the times a skip record for overlap covers: its
// own, and with "skipped N" the N-1 seconds after it.
func overlapSkipped(r cronRun) []time.Time {
	const reason = "overlap: previous run still running"
	if !strings.HasPrefix(r.Error, reason) {
		return nil
	}
	n := 1
	if rest, ok := strings.CutPrefix(r.Error, reason+": skipped "); ok {
		n, _ = strconv.Atoi(rest)
	}
	var out []time.Time
	for i := range n {
		out = append(out, r.ScheduledAt.Add(time.Duration(i)*time.Second))
	}
	return out
}

// threeDaemons is TestThreeDaemonsEveryOccurrenceOnce on the backend that
// header declares.
func threeDaemons(t *testing.T, header string) {
	env := proctest.NewEnv(t)
	dir := t.TempDir()
	logPath := filepath.Join(dir, "runs.log")
	specPath := filepath.Join(dir, "coordd.yaml")
	// history_limit keeps every run of the test (default 100).
	writeFile(t, specPath, header+fmt.Sprintf(`
cron:
  tick:
    schedule: "@every 1s"
    catch_up: all
    history_limit: 1000
    command: %q
`, runLogCommand(logPath)))
	const leaderLease, runLease = 2 * time.Second, 30 * time.Second

	procs := map[string]*proctest.Proc{}
	for _, h := range []string{"h1", "h2", "h3"} {
		procs[h] = env.StartWith(t, h, []string{"COORDD_TEST_HOST=" + h}, "run", "-f", specPath, "--host-id", h, "--log-level", "debug", "--shutdown-grace", "5s")
	}
	proctest.Eventually(t, 30*time.Second, "three runs", func() bool { return len(readRunLog(t, logPath)) >= 6 })
	// caughtUp waits until the scheduled time until has started: every
	// time before it has been decided by then.
	caughtUp := func(until time.Time, what string) {
		t.Helper()
		proctest.Eventually(t, 4*time.Minute, what, func() bool { return !latestStart(t, logPath).Before(until) })
	}

	// A daemon frozen mid-run, for longer than the leader lease: another
	// daemon leads meanwhile, and the run stays live (its lease is 30 s).
	frozen := inFlight(t, logPath)
	procs[frozen.host].Signal(syscall.SIGSTOP)
	frozenAt := time.Now()
	time.Sleep(3 * leaderLease) // the fault's length, not an assertion
	st := status(t, env, specPath)
	procs[frozen.host].Signal(syscall.SIGCONT)
	if st.Leader == nil || hostOf(st.Leader.Holder) == frozen.host {
		t.Fatalf("no other daemon took over from the frozen %s: %+v", frozen.host, st.Leader)
	}
	t.Logf("%s frozen for %s running %s; %s led meanwhile", frozen.host, time.Since(frozenAt).Round(100*time.Millisecond),
		frozen.scheduledAt.Format(time.RFC3339), hostOf(st.Leader.Holder))
	caughtUp(frozen.scheduledAt.Add(time.Since(frozenAt)+2*time.Second), "the times due during the freeze")

	// The leader killed mid-run: its run is live until its lease runs out.
	dead := inFlight(t, logPath)
	procs[dead.host].Kill9()
	killedAt := time.Now()
	until := dead.scheduledAt.Add(runLease + 5*time.Second)
	caughtUp(until, "the times due until after the dead run's lease")
	t.Logf("%s killed running %s; times until %s started %s later", dead.host, dead.scheduledAt.Format(time.RFC3339),
		until.Format(time.RFC3339), time.Since(killedAt).Round(100*time.Millisecond))
	// The lost run runs again (on_host_loss retry) after retry_backoff:
	// the fencing order below includes it.
	proctest.Eventually(t, 2*time.Minute, "the dead host's run started again", func() bool {
		for _, l := range readRunLog(t, logPath) {
			if l.start && l.scheduledAt.Equal(dead.scheduledAt) && l.attempt == 2 {
				return true
			}
		}
		return false
	})
	for h, p := range procs {
		if h != dead.host {
			p.Signal(syscall.SIGTERM)
		}
	}
	for h, p := range procs {
		if h != dead.host {
			if code := p.Wait(t, 30*time.Second); code != 0 {
				t.Errorf("%s exited %d", h, code)
			}
		}
	}

	lines := readRunLog(t, logPath)
	started := map[string]int{}
	scheduled := map[time.Time]bool{}
	hosts := map[string]int{}
	var first time.Time
	var fencing int64
	for _, l := range lines {
		if !l.start {
			continue
		}
		if started[l.key()]++; started[l.key()] == 2 {
			t.Errorf("attempt started twice: %s attempt %d", l.scheduledAt.Format(time.RFC3339Nano), l.attempt)
		}
		if l.fencing <= fencing {
			t.Errorf("fencing %d after %d (%s attempt %d on %s): not strictly growing", l.fencing, fencing,
				l.scheduledAt.Format(time.RFC3339Nano), l.attempt, l.host)
		}
		fencing = max(fencing, l.fencing)
		scheduled[l.scheduledAt] = true
		hosts[l.host]++
		if first.IsZero() || l.scheduledAt.Before(first) {
			first = l.scheduledAt
		}
	}
	// A time may be skipped for overlap only because of a command of an
	// earlier time that ran for at least the time between the two (it
	// would have overlapped it had it started on time): the scheduler
	// counts from the run's claim (its started_at) to the command's end,
	// which the command's end line precedes by a moment.
	runs := cronHistory(t, env, specPath, "tick")
	claimed := map[string]time.Time{}
	for _, r := range runs {
		if r.Status != "skipped" && r.Status != "lost" {
			claimed[runLine{scheduledAt: r.ScheduledAt, attempt: r.Attempt}.key()] = r.StartedAt
		}
	}
	ranLong := func(at time.Time) bool {
		const notice = 100 * time.Millisecond
		for _, l := range lines {
			c, ok := claimed[l.key()]
			if ok && !l.start && l.scheduledAt.Before(at) && l.at.Sub(c) >= at.Sub(l.scheduledAt)-notice {
				return true
			}
		}
		return false
	}
	overlapped := map[time.Time]bool{}
	skipped := map[string]int{}
	var lost bool
	for _, r := range runs {
		lost = lost || r.ScheduledAt.Equal(dead.scheduledAt) && r.Attempt == 1 && r.Status == "lost"
		if r.Status != "skipped" {
			continue
		}
		times := overlapSkipped(r)
		if len(times) == 0 {
			skipped[r.Error]++
		}
		for _, at := range times {
			if ranLong(at) {
				overlapped[at] = true
			} else {
				skipped["overlap, with no command running that long"]++
			}
		}
	}
	if len(skipped) > 0 {
		t.Errorf("times recorded skipped, by reason: %v", skipped)
	}
	var missing []string
	for at := first; !at.After(until); at = at.Add(time.Second) {
		if !scheduled[at] && !overlapped[at] {
			missing = append(missing, at.Format(time.RFC3339))
		}
	}
	if len(missing) > 0 {
		t.Errorf("%d scheduled times never started: %v", len(missing), missing)
	}
	if !lost {
		t.Errorf("the dead host's run of %s is not recorded lost", dead.scheduledAt.Format(time.RFC3339))
	}
	if len(hosts) < 2 {
		t.Errorf("one host ran everything (%v): the leader's death was not taken over", hosts)
	}
	t.Logf("%d runs of %d scheduled times, by host %v; %d skipped for overlap behind a command longer than its period",
		len(started), len(scheduled), hosts, len(overlapped))
}
