package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/proctest"
)

// The cluster the harness builds. Leases are short so that a lost host is
// noticed within seconds and a run of a minute holds many failovers.
const (
	daemons      = 3
	semClients   = 3
	queueWorkers = 2
	semLimit     = 2

	leaderLease = 2 * time.Second
	runLease    = 3 * time.Second
	// visibilityTimeout is the queue's lease.
	visibilityTimeout = 3 * time.Second
	cronStep          = 2 * time.Second
	// defaultsTask is the second cron task: every field at its default
	// (overlap forbid, max_attempts 1, retry_backoff 30s, on_host_loss
	// retry, run_lease 30s) but its schedule and catch_up all. A run lost
	// with its host makes the times after it wait up to defaultsLostWithin:
	// the run lease, the leader's sweep (20 s) and the retry backoff.
	defaultsTask       = "defaults"
	defaultsRunLease   = 30 * time.Second
	defaultsLostWithin = defaultsRunLease + 20*time.Second + 30*time.Second + 10*time.Second
	// pushEvery keeps the pushes (2/s) well below what the workers drain
	// (2 workers x 3 handlers of 1.75 s on average: 3.4/s), so a long run
	// ends with a short backlog.
	pushEvery         = 500 * time.Millisecond
	workerConcurrency = "3"
)

// Config is one run of the harness against one backend.
type Config struct {
	// Backend is sqlite, mysql, postgres, redis, memcached,
	// redis-sentinel or redis-stale-failover (redis with a replica, and
	// RedisFailover in place of the restart). memcached holds the
	// semaphore only; cron and the queue stay on an embedded store. The
	// embedded store has no server: its "restart" is a stall (below).
	Backend string
	// Duration is how long faults are injected.
	Duration time.Duration
	Seed     uint64
	// MinDaemonKills and MinBackendRestarts are floors the fault schedule
	// is raised to. Every other kind the backend allows (each network
	// fault on a networked backend) happens at least once.
	MinDaemonKills, MinBackendRestarts int
}

// Result is what a run saw and what it concluded.
type Result struct {
	Backend, Scenario string
	Seed              uint64
	Faults            []Fault
	// Cron is the overlap allow task's verdict (tick); Defaults the verdict
	// on the task with the defaults.
	Cron, Defaults CronReport
	SemEntries     int
	MaxHolders     int
	Limit          int
	// StaleFencing counts semaphore holders the protected resource would
	// have refused (CheckFencing).
	StaleFencing int
	Queue        QueueReport
	// Respawns counts daemons and workers that exited on their own (for
	// instance a daemon that could not reach its backend at start) and were
	// started again, as systemd would.
	Respawns   int
	Violations []string
}

// Count returns how many faults of kind k were injected and how many of
// those hit mid-operation.
func (r Result) Count(k FaultKind) (n, mid int) {
	for _, f := range r.Faults {
		if f.Kind == k || k == "" {
			n++
			if f.MidOp {
				mid++
			}
		}
	}
	return n, mid
}

// server is a private backend server that the harness can kill and start.
type server interface {
	Kill()
	Start(t testing.TB)
	Running() bool
}

// member is one process slot (a daemon, a sem run client, a queue worker)
// that the harness keeps filled: each incarnation is a new generation.
type member struct {
	id      string
	gen     int
	tag     string // id-gen, the incarnation's name in the evidence
	proc    *proctest.Proc
	started time.Time
	killed  bool      // by the harness; respawn at respawnAt
	respawn time.Time // zero: not waiting
	stopped int       // index+1 of the daemon-stop fault in progress
	contAt  time.Time
}

type world struct {
	t    testing.TB
	cfg  Config
	rng  *rand.Rand
	env  *proctest.Env
	dir  string
	spec string
	srv  server   // the backend's server, or the embedded store's stall
	net  *network // the proxy in front of a networked backend's server
	// sentinels is the redis-sentinel backend's servers; stale the
	// RedisFailover nemesis's replica.
	sentinels *sentinels
	stale     *staleFailover

	daemons, clients, workers []*member
	faults                    []Fault
	respawns                  int
	clientsOn                 bool

	pushMu    sync.Mutex
	pushed    []Pushed
	ambiguous map[string]bool
}

// Run builds the cluster for cfg.Backend, injects faults for cfg.Duration,
// heals everything, waits for the work to settle, and checks the evidence.
func Run(t testing.TB, cfg Config) Result {
	t.Helper()
	w := &world{t: t, cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, stream(cfg.Backend))), env: proctest.NewEnv(t), dir: t.TempDir(), ambiguous: map[string]bool{}}
	t.Cleanup(w.keepEvidence) // before t.TempDir's own cleanup removes it
	w.writeScripts()
	w.writeSpec()

	for i := range daemons {
		w.daemons = append(w.daemons, &member{id: fmt.Sprintf("h%d", i+1)})
	}
	for i := range semClients {
		w.clients = append(w.clients, &member{id: fmt.Sprintf("c%d", i+1)})
	}
	for i := range queueWorkers {
		w.workers = append(w.workers, &member{id: fmt.Sprintf("w%d", i+1)})
	}
	for _, m := range w.daemons {
		w.startDaemon(m)
	}
	proctest.Eventually(t, 60*time.Second, "the spec applied by a leader", func() bool {
		var st struct {
			Applied *struct{} `json:"applied"`
		}
		return w.statusJSON(&st) == nil && st.Applied != nil
	})
	for _, m := range w.workers {
		w.startWorker(m)
	}
	w.clientsOn = true
	for _, m := range w.clients {
		w.startClient(m)
	}
	stopPush := w.pusher()
	time.Sleep(2 * time.Second) // let every kind of work get going

	plan := w.schedule()
	begin := time.Now()
	faultEnd := begin.Add(cfg.Duration)
	next := 0
	for time.Now().Before(faultEnd) {
		w.tend()
		if next < len(plan) && time.Since(begin) >= plan[next].at && w.inject(plan[next].kind) {
			next++
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A slow backend restart may have delayed the tail of the plan: the
	// faults that make the floors still happen.
	for ; next < len(plan); next++ {
		for try := 0; plan[next].floor && try < 100; try++ {
			w.tend()
			if w.inject(plan[next].kind) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	w.heal()
	stopPush()
	w.clientsOn = false
	t.Logf("%s: faults over after %s; settling", cfg.Backend, time.Since(begin).Round(time.Second))

	settled := w.settle(faultEnd)
	r := w.verdict(faultEnd)
	if !settled {
		r.Violations = append(r.Violations, "the cluster did not settle after the faults")
	}
	return r
}

// settle waits for the work to settle once the faults are over (the
// scheduler past faultEnd, every time of the task with the defaults
// started, every pushed job done), then stops the clients, daemons and
// workers. It reports false when a wait timed out: the verdict then names
// what is missing (a miss, a lost job).
func (w *world) settle(faultEnd time.Time) bool {
	t := w.t
	settled := true
	waitFor := func(d time.Duration, what string, cond func() bool) {
		deadline := time.Now().Add(d)
		for !cond() {
			if time.Now().After(deadline) {
				t.Errorf("%s: not reached within %s", what, d)
				settled = false
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitFor(2*time.Minute, "the scheduler past the end of the faults", func() bool {
		w.tend()
		ev, _ := ReadCron(w.path("cron.log"))
		for _, e := range ev {
			if e.Kind == "start" && e.Task == "tick" && e.Attempt == 1 && e.ScheduledAt.After(faultEnd.Add(2*cronStep)) {
				return true
			}
		}
		return false
	})
	waitFor(defaultsLostWithin+time.Minute, "every time of the task with the defaults started", func() bool {
		w.tend()
		ev, _ := ReadCron(w.path("cron.log"))
		past := false
		for _, e := range ev {
			past = past || (e.Kind == "start" && e.Task == defaultsTask && e.ScheduledAt.After(faultEnd.Add(2*cronStep)))
		}
		return past && CheckCron(ev, defaultsCheck(faultEnd), w.faults).Misses == 0
	})
	waitFor(3*time.Minute, "every pushed job done and the queue empty", func() bool {
		w.tend()
		return w.queueSettled()
	})
	for _, m := range w.clients {
		if m.proc != nil {
			<-m.proc.Done()
		}
	}
	for _, m := range append(append([]*member{}, w.daemons...), w.workers...) {
		m.proc.Signal(syscall.SIGTERM)
	}
	for _, m := range append(append([]*member{}, w.daemons...), w.workers...) {
		select {
		case <-m.proc.Done():
		case <-time.After(30 * time.Second):
			t.Errorf("%s did not stop within 30s of SIGTERM", m.tag)
			m.proc.Kill9()
		}
	}
	return settled
}

// stream gives each backend its own sequence of draws from one seed.
func stream(backend string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(backend))
	return h.Sum64()
}

func (w *world) path(name string) string { return filepath.Join(w.dir, name) }

// keepEvidence copies the evidence of a failed run out of its temp dir,
// which the test removes, so that a violation can be read line by line.
func (w *world) keepEvidence() {
	if !w.t.Failed() {
		return
	}
	keep, err := os.MkdirTemp("", "coordd-chaos-"+w.cfg.Backend+"-")
	if err != nil {
		w.t.Logf("chaos: keeping the evidence: %v", err)
		return
	}
	for _, name := range []string{"cron.log", "sem.log", "queue.log", "peaks", "fencing", "coordd.yaml"} {
		b, err := os.ReadFile(w.path(name))
		if err == nil {
			err = os.WriteFile(filepath.Join(keep, name), b, 0o644)
		}
		if err != nil && !os.IsNotExist(err) {
			w.t.Logf("chaos: keeping %s: %v", name, err)
		}
	}
	var faults strings.Builder
	for _, f := range w.faults {
		fmt.Fprintf(&faults, "%s %s mid-operation=%v %s %s %s\n", f.Kind, f.Target, f.MidOp, f.At.Format("15:04:05.000"), f.End.Format("15:04:05.000"), f.Detail)
	}
	_ = os.WriteFile(filepath.Join(keep, "faults"), []byte(faults.String()), 0o644)
	w.t.Logf("chaos: the evidence of this failed run is kept in %s", keep)
}

// leader is the host id of the current leader, or "" when it cannot be
// read quickly (a backend restart in progress).
func (w *world) leader() string {
	var st struct {
		Leader *struct {
			Holder string `json:"holder"`
		} `json:"leader"`
	}
	if w.statusJSON(&st) != nil || st.Leader == nil {
		return ""
	}
	h, _, _ := strings.Cut(st.Leader.Holder, "/")
	return h
}

func (w *world) coordd(timeout time.Duration, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := w.env.Command(args...)
	c := exec.CommandContext(ctx, cmd.Path, cmd.Args[1:]...)
	c.Env = cmd.Env
	return c.Output()
}

func (w *world) statusJSON(v any) error {
	out, err := w.coordd(3*time.Second, "status", "-f", w.spec, "--json")
	if err != nil {
		return err
	}
	return json.Unmarshal(out, v)
}
