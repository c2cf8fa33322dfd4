package main

// MariaDB restarting under load (docs/operations.md): a private mariadbd
// is killed with kill -9 while a daemon runs an `@every 1s` task, `sem run`
// holders hold slots and a `queue work` worker is fed with pushes; it comes
// back on the same port and data dir a few seconds later. Never the shared
// server: testenv.StartMariaDB gives the test its own.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/open"
	"github.com/coordd/coordd/internal/proctest"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/queue"
	"github.com/coordd/coordd/semaphore"
)

// How long mariadbd stays down.
const restartOutage = 3 * time.Second

// holderLease is the lease-mode holder's lease, longer than the outage so
// that the slot outlives it. sem run renews every lease/3 (10s) and, without
// a renewal, would stop the command lease - margin - grace (18s) after the
// last one. The test kills mariadbd 2s before the first renewal is due, so
// that renewal fails and is retried until the server is back.
const holderLease = 30 * time.Second

// holderStop is how long after its last renewal a lease-mode holder's
// command is stopped when no further renewal succeeds (see child.Spec).
var holderStop = holderLease - semaphore.Margin(holderLease) - min(holderLease/3, 10*time.Second)

// restartHolder is one `sem run` holder across the restart.
type restartHolder struct {
	sem  string // semaphore name
	decl string // its flow map in the spec
	// slotDies: the restart destroys the slot itself. A session-mode slot
	// is a GET_LOCK held by the holder's connection, which dies with the
	// server: sem run must stop the command and exit 122, and after the
	// restart the slot is free. Otherwise (lease mode) the slot is a row
	// that outlives the outage: the command runs on, renewals resume, and
	// sem run exits with the command's own code.
	slotDies bool
}

var restartHolders = []restartHolder{
	{sem: "leased", decl: fmt.Sprintf("{limit: 1, lease: %s}", holderLease)},
	// The lease of a session-mode holder is how often it pings its
	// connection (lease/3): 3s, so that it learns of the loss while the
	// server is still down.
	{sem: "session", decl: "{limit: 1, mode: session, lease: 3s}", slotDies: true},
}

// holderExit is the holders' commands' own exit code.
const holderExit = 7

// TestMySQLRestartUnderLoad kills the private mariadbd with kill -9 under
// load, waits restartOutage and starts it again, then checks:
//   - the daemon keeps running, takes the leader lease again and cron
//     resumes: no scheduled time starts twice, and with catch_up: all the
//     seconds missed during the outage run after it (a time whose claim or
//     run was cut by the kill may instead be recorded lost);
//   - a lease-mode holder's command runs through the outage, past the
//     point where a lease not renewed after the restart would have stopped
//     it, and sem run exits with the command's code; the slot stayed held;
//   - (session mode) the holder stops its command and exits
//     122 while the server is still down, and the slot is free after the
//     restart;
//   - the worker stays up, and every job pushed before, during (retried
//     until accepted) and after the outage is acked; a job runs twice only
//     when the worker reported its ack or lease failed.
func TestMySQLRestartUnderLoad(t *testing.T) {
	m := testenv.StartMariaDB(t)
	dsn := m.CreateDatabase(t)
	dir := t.TempDir()
	cronLog, ackLog := filepath.Join(dir, "cron.log"), filepath.Join(dir, "acked.log")

	var sems strings.Builder
	holders := restartHolders
	for _, h := range holders {
		fmt.Fprintf(&sems, "  %s: %s\n", h.sem, h.decl)
	}
	specPath := filepath.Join(dir, "coordd.yaml")
	writeFileT(t, specPath, fmt.Sprintf(`backends:
  db: {type: mysql, dsn: %q, table_prefix: "rs_"}
cluster: {backend: db, leader_lease: 2s}
semaphores:
%scron:
  tick:
    schedule: "@every 1s"
    catch_up: all
    run_lease: 3s
    command: %q
queues:
  q: {partitions: 2, visibility_timeout: 5s, max_attempts: 10, retry_backoff: 0s}
`, dsn, sems.String(), proctest.LogCommand(cronLog)))

	env := proctest.NewEnv(t)
	if out, code := env.Run(t, "apply", "-f", specPath, "--auto-approve"); code != 0 {
		t.Fatalf("apply: %d\n%s", code, out)
	}
	daemon := env.StartWith(t, "daemon", []string{"COORDD_TEST_HOST=h1"},
		"run", "-f", specPath, "--host-id", "h1", "--shutdown-grace", "5s")
	worker := env.Start(t, "worker", "queue", "work", "q", "-f", specPath, "--host-id", "h1", "--concurrency", "2",
		"--", "sh", "-c", `read -r p; echo "$p $COORDD_JOB_ID" >> `+ackLog)
	pusher := startPusher(t, specPath)

	type held struct {
		restartHolder
		p                *proctest.Proc
		pidFile, release string
		child            int
		expires          time.Time // the slot's expiry as first seen
		// heldSince is when the command was seen started: the slot was
		// taken, and the lease last granted, no later than this.
		heldSince time.Time
	}
	hs := make([]*held, len(holders))
	for i, h := range holders {
		x := &held{restartHolder: h, pidFile: filepath.Join(dir, h.sem+".pid"), release: filepath.Join(dir, h.sem+".release")}
		script := fmt.Sprintf(`echo $$ > %s; while [ ! -e %s ]; do sleep 0.1; done; exit %d`, x.pidFile, x.release, holderExit)
		x.p = env.Start(t, "holder-"+h.sem, "sem", "run", h.sem, "-f", specPath, "--host-id", "h1", "--no-wait", "--", "sh", "-c", script)
		hs[i] = x
	}
	for _, x := range hs {
		x.child, _ = strconv.Atoi(waitFile(t, x.pidFile, 20*time.Second))
		x.heldSince = time.Now()
		if !x.slotDies {
			x.expires = slotExpiry(t, env, specPath, x.sem)
		}
	}

	// Under load: cron fires, jobs flow.
	proctest.Eventually(t, 30*time.Second, "cron and queue at work", func() bool {
		return len(proctest.ReadLog(t, cronLog)) >= 3 && countLines(ackLog) >= 20
	})
	// Kill 2s before the lease-mode holders' first renewal: it fails, is
	// retried, and must succeed once the server is back, well before the
	// holder would stop its command (holderStop after it took the slot).
	for _, x := range hs {
		if !x.slotDies {
			time.Sleep(time.Until(x.heldSince.Add(holderLease/3 - 2*time.Second)))
			break
		}
	}
	m.Kill()
	killedAt := time.Now()
	pushedBefore := pusher.accepted()
	time.Sleep(restartOutage)
	for _, p := range []*proctest.Proc{daemon, worker} {
		if !p.Running() {
			t.Fatalf("%s died while MariaDB was down:\n%s", p.Name, p.Output())
		}
	}
	for _, x := range hs {
		if x.slotDies {
			// The slot went with the connection: the holder's next ping
			// finds it gone, the command is stopped and sem run exits 122,
			// before the server is back (otherwise the restarted server
			// would hand the free slot to another holder while the
			// command still runs).
			if code := x.p.Wait(t, 10*time.Second); code != 122 {
				t.Errorf("%s holder: exit %d after its session died, want 122\n%s", x.sem, code, x.p.Output())
			}
			if alive(x.child) {
				t.Errorf("%s holder's command %d outlived its lost slot", x.sem, x.child)
			}
		}
	}
	m.Start(t)
	restartedAt := time.Now()
	t.Logf("mariadbd down for %s (kill -9, %s, start with crash recovery); %d jobs pushed before",
		restartedAt.Sub(killedAt).Round(time.Millisecond), restartOutage, pushedBefore)

	// The holders.
	for _, x := range hs {
		if x.slotDies {
			// The restarted server has the slot free.
			if out, code := env.Run(t, "sem", "run", x.sem, "-f", specPath, "--no-wait", "--", "true"); code != 0 {
				t.Errorf("%s: the slot is not free after the restart: exit %d\n%s", x.sem, code, out)
			}
			continue
		}
		if !alive(x.child) || !x.p.Running() {
			t.Fatalf("%s holder's command did not survive the outage:\n%s", x.sem, x.p.Output())
		}
		if out, code := env.Run(t, "sem", "run", x.sem, "-f", specPath, "--no-wait", "--", "true"); code != 75 {
			t.Errorf("%s: --no-wait after the restart: exit %d, want 75 (the slot is still held)\n%s", x.sem, code, out)
		}
	}

	// Cron resumes: a few occurrences scheduled after the restart.
	proctest.Eventually(t, 30*time.Second, "cron occurrences after the restart", func() bool {
		n := 0
		for _, l := range proctest.ReadLog(t, cronLog) {
			if ts, err := time.Parse(time.RFC3339Nano, l.ScheduledAt); err == nil && ts.After(restartedAt) {
				n++
			}
		}
		return n >= 3
	})

	// The lease-mode holders end their commands once no renewal from before
	// the kill could still cover them: only renewals after the restart keep
	// a command alive that long.
	for _, x := range hs {
		if x.slotDies {
			continue
		}
		time.Sleep(time.Until(x.heldSince.Add(holderStop + 2*time.Second)))
		if !alive(x.child) {
			t.Fatalf("%s holder's command was stopped: its renewals did not resume\n%s", x.sem, x.p.Output())
		}
		if exp := slotExpiry(t, env, specPath, x.sem); !exp.After(x.expires) {
			t.Errorf("%s: the slot's expiry did not move (%s): not renewed", x.sem, exp)
		}
		writeFileT(t, x.release, "")
		if code := x.p.Wait(t, 20*time.Second); code != holderExit {
			t.Errorf("%s holder: exit %d, want the command's %d\n%s", x.sem, code, holderExit, x.p.Output())
		}
		if strings.Contains(x.p.Output(), "slot lost") {
			t.Errorf("%s holder reported a lost slot:\n%s", x.sem, x.p.Output())
		}
	}

	// Jobs pushed after the restart too, then every accepted one acked.
	proctest.Eventually(t, 20*time.Second, "pushes after the restart", func() bool { return pusher.accepted() >= pushedBefore+50 })
	pushed, ambiguous := pusher.stop(t)
	proctest.Eventually(t, 60*time.Second, "every pushed job acked", func() bool {
		acked := ackedPayloads(t, ackLog)
		for pl := range pushed {
			if acked[pl] == 0 {
				return false
			}
		}
		return true
	})

	for _, p := range []*proctest.Proc{daemon, worker} {
		if !p.Running() {
			t.Fatalf("%s died after the restart:\n%s", p.Name, p.Output())
		}
		p.Signal(syscall.SIGTERM)
	}
	for _, p := range []*proctest.Proc{daemon, worker} {
		if code := p.Wait(t, 30*time.Second); code != 0 {
			t.Errorf("%s: exit %d after SIGTERM", p.Name, code)
		}
	}

	checkRestartCron(t, env, specPath, cronLog, killedAt, restartedAt)
	checkRestartQueue(t, ackLog, worker.Output(), pushed, ambiguous)
}

// checkRestartCron checks the task's own log against its history: no
// scheduled time started twice, and every second from the first start to
// the last either started or is recorded lost or skipped in the history
// (a claim or run cut by the kill); at most two are recorded instead of
// started, so the seconds of the outage were caught up (catch_up: all).
func checkRestartCron(t *testing.T, env *proctest.Env, specPath, cronLog string, killedAt, restartedAt time.Time) {
	t.Helper()
	started := map[time.Time]int{}
	var first, last time.Time
	for _, l := range proctest.ReadLog(t, cronLog) {
		ts, err := time.Parse(time.RFC3339Nano, l.ScheduledAt)
		if err != nil {
			t.Fatalf("bad scheduled_at %q: %v", l.ScheduledAt, err)
		}
		ts = ts.UTC()
		if started[ts]++; started[ts] == 2 {
			t.Errorf("scheduled time %s started twice (attempt %d)", l.ScheduledAt, l.Attempt)
		}
		if first.IsZero() || ts.Before(first) {
			first = ts
		}
		if ts.After(last) {
			last = ts
		}
	}
	out, code := env.Run(t, "cron", "history", "tick", "-f", specPath, "--limit", "0", "--json")
	if code != 0 {
		t.Fatalf("cron history: %d\n%s", code, out)
	}
	var runs []backends.Run
	if err := json.Unmarshal([]byte(out), &runs); err != nil {
		t.Fatalf("cron history --json: %v\n%s", err, out)
	}
	recorded := map[time.Time]string{}
	for _, r := range runs {
		if r.Status == backends.RunLost || r.Status == backends.RunSkipped {
			recorded[r.ScheduledAt.UTC()] = r.Status + ": " + r.Error
		}
	}
	var notStarted []string
	outage, caughtUp := 0, 0
	for ts := first; !ts.After(last); ts = ts.Add(time.Second) {
		inOutage := !ts.Before(killedAt.Add(-time.Second)) && ts.Before(restartedAt)
		if inOutage {
			outage++
		}
		switch {
		case started[ts] > 0:
			if inOutage {
				caughtUp++
			}
		case recorded[ts] != "":
			notStarted = append(notStarted, ts.Format(time.RFC3339)+" ("+recorded[ts]+")")
		default:
			t.Errorf("scheduled time %s neither started nor recorded", ts.Format(time.RFC3339))
		}
	}
	if len(notStarted) > 2 {
		t.Errorf("%d scheduled times were not started: %v", len(notStarted), notStarted)
	}
	t.Logf("cron: %d times from %s to %s; %d of %d around the outage caught up; recorded instead of started: %v",
		len(started), first.Format(time.RFC3339), last.Format(time.RFC3339), caughtUp, outage, notStarted)
}

// checkRestartQueue checks the worker's log: every accepted push acked at
// least once; a job id twice only when the worker reported that job's ack,
// retry or lease failing; a payload under two ids only when its push was
// retried after an error that may have hidden a success.
func checkRestartQueue(t *testing.T, ackLog, workerOut string, pushed, ambiguous map[string]bool) {
	t.Helper()
	raw, err := os.ReadFile(ackLog)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string][]string{} // payload -> job ids, one per run
	runs := map[string]int{}     // job id -> runs
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			t.Fatalf("malformed evidence line %q", line)
		}
		ids[f[0]] = append(ids[f[0]], f[1])
		runs[f[1]]++
	}
	reported := func(id string) bool {
		return strings.Contains(workerOut, "job "+id+" ") || strings.Contains(workerOut, "job "+id+":")
	}
	twiceReported, twoJobs := 0, 0
	for id, n := range runs {
		switch {
		case n > 1 && reported(id):
			twiceReported++
		case n > 1:
			t.Errorf("job %s ran %d times, and the worker reported no failure for it", id, n)
		}
	}
	for pl, jobIDs := range ids {
		if !pushed[pl] && !ambiguous[pl] {
			t.Errorf("payload %q ran but was never pushed", pl)
		}
		if u := slices.Compact(slices.Sorted(slices.Values(jobIDs))); len(u) > 1 {
			if !ambiguous[pl] {
				t.Errorf("payload %q ran as jobs %v, but its push was not retried", pl, u)
			}
			twoJobs++
		}
	}
	t.Logf("queue: %d jobs accepted (%d pushes retried after an error), %d runs; ran twice after a reported failure: %d; pushed twice by a retried push: %d",
		len(pushed), len(ambiguous), strings.Count(string(raw), "\n"), twiceReported, twoJobs)
}

// ackedPayloads counts runs per payload in the worker's log.
func ackedPayloads(t *testing.T, ackLog string) map[string]int {
	t.Helper()
	b, err := os.ReadFile(ackLog)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			out[f[0]]++
		}
	}
	return out
}

// slotExpiry is the expiry of the single holder of semaphore name.
func slotExpiry(t *testing.T, env *proctest.Env, specPath, name string) time.Time {
	t.Helper()
	out, code := env.Run(t, "sem", "status", name, "-f", specPath, "--json")
	var st []semStatusJSON
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || len(st) != 1 || len(st[0].Holders) != 1 {
		t.Fatalf("sem status %s: exit %d\n%s", name, code, out)
	}
	return st[0].Holders[0].ExpiresAt
}

func writeFileT(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// pusher pushes a job every 20 ms through the Go API until stopped. A push
// that fails (MariaDB is down) is retried with the same payload every
// 100 ms; such a payload is ambiguous, since an error after the commit can
// hide a job that was in fact enqueued.
type pusher struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu        sync.Mutex
	pushed    map[string]bool
	ambiguous map[string]bool
	errs      int
	lastErr   error
}

func startPusher(t *testing.T, specPath string) *pusher {
	t.Helper()
	s, ok := loadSpec(context.Background(), &cliEnv{stderr: os.Stderr}, specPath, false)
	if !ok {
		t.Fatal("load spec")
	}
	ctx, cancel := context.WithCancel(context.Background())
	b, err := open.Open(ctx, s.Backends[s.Queues["q"].Backend], backends.Options{})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	cl, err := queue.New(b)
	if err != nil {
		cancel()
		b.Close()
		t.Fatal(err)
	}
	p := &pusher{cancel: cancel, done: make(chan struct{}), pushed: map[string]bool{}, ambiguous: map[string]bool{}}
	go func() {
		defer close(p.done)
		defer b.Close()
		for i := 0; ; i++ {
			pl := fmt.Sprintf("p-%d", i)
			for {
				pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
				_, err := cl.Push(pctx, "q", []byte(pl+"\n"), queue.PushOptions{})
				pcancel()
				p.mu.Lock()
				if err == nil {
					p.pushed[pl] = true
				} else if ctx.Err() == nil {
					p.ambiguous[pl] = true
					p.errs++
					p.lastErr = err
				}
				p.mu.Unlock()
				if err == nil {
					break
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-p.done })
	return p
}

// accepted is how many pushes succeeded so far.
func (p *pusher) accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pushed)
}

// stop stops pushing and returns the accepted and the ambiguous payloads.
func (p *pusher) stop(t *testing.T) (pushed, ambiguous map[string]bool) {
	t.Helper()
	p.cancel()
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.errs > 0 {
		t.Logf("pusher: %d failed pushes while MariaDB was down, the last: %v", p.errs, p.lastErr)
	}
	// A payload that finally succeeded is not ambiguous about being
	// pushed, only about being pushed twice; keep it in both sets.
	keys := make([]string, 0, len(p.ambiguous))
	for k := range p.ambiguous {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) > 0 {
		t.Logf("pusher: retried payloads %v", keys)
	}
	return p.pushed, p.ambiguous
}
