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
	"github.com/coordd/coordd/internal/testenv"
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
	// pushEvery keeps the pushes (2/s) well below what the workers drain
	// (2 workers x 3 handlers of 1.75 s on average: 3.4/s), so a long run
	// ends with a short backlog.
	pushEvery         = 500 * time.Millisecond
	workerConcurrency = "3"
)

// Config is one run of the harness against one backend.
type Config struct {
	// Backend is sqlite, mysql, redis or memcached. memcached holds the
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
	// Failover adds RedisFailover to the faults on redis. It is off until
	// coordd detects a failover that may have lost writes: a promoted
	// replica that missed writes repeats fencing numbers without it.
	Failover bool
}

// Result is what a run saw and what it concluded.
type Result struct {
	Backend, Scenario string
	Seed              uint64
	Faults            []Fault
	Cron              CronReport
	SemEntries        int
	MaxHolders        int
	Limit             int
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
	pushed    []string
	ambiguous map[string]bool
}

// Run builds the cluster for cfg.Backend, injects faults for cfg.Duration,
// heals everything, waits for the work to settle, and checks the evidence.
func Run(t testing.TB, cfg Config) Result {
	t.Helper()
	w := &world{t: t, cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, stream(cfg.Backend))), env: proctest.NewEnv(t), dir: t.TempDir(), ambiguous: map[string]bool{}}
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

	// Every scheduled time up to faultEnd must start; wait until the
	// scheduler is past it, and until every pushed job is done.
	// A wait that times out is not fatal: the verdict then names what is
	// missing (a miss, a lost job).
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
			if e.Kind == "start" && e.Attempt == 1 && e.ScheduledAt.After(faultEnd.Add(2*cronStep)) {
				return true
			}
		}
		return false
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
	r := w.verdict(faultEnd)
	if !settled {
		r.Violations = append(r.Violations, "the cluster did not settle after the faults")
	}
	return r
}

// stream gives each backend its own sequence of draws from one seed.
func stream(backend string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(backend))
	return h.Sum64()
}

func (w *world) path(name string) string { return filepath.Join(w.dir, name) }

// sleepSnippet sleeps 0.5-3 s, drawn from /dev/urandom.
const sleepSnippet = `ms=$((500 + $(od -An -N2 -tu2 /dev/urandom) % 2501))
sleep $((ms / 1000)).$(printf %03d $((ms % 1000)))
`

// writeScripts writes the commands coordd runs. They, not coordd, write
// the evidence.
func (w *world) writeScripts() {
	for _, d := range []string{"holders", "fence"} {
		if err := os.Mkdir(w.path(d), 0o755); err != nil {
			w.t.Fatal(err)
		}
	}
	cron := fmt.Sprintf(`line="$COORDD_TASK $COORDD_SCHEDULED_AT $COORDD_ATTEMPT $COORDD_TEST_HOST $COORDD_FENCING_TOKEN"
echo "start $line $(date +%%s.%%N)" >> %[1]s
%[2]secho "end $line $(date +%%s.%%N)" >> %[1]s
`, w.path("cron.log"), sleepSnippet)
	// The witness: under flock, the holder adds its pid file and counts the
	// pid files of holders still alive (a holder killed with its sem run
	// leaves a file behind that no longer counts). The count is written
	// before the holder does anything else.
	//
	// The witness is also the resource the fencing token protects: it
	// keeps the highest token seen per slot, and records each holder's
	// token against it when the holder starts and when it ends.
	hold := fmt.Sprintf(`me=$$
flock %[1]s sh -c 'touch "$1/$2"; n=0
for f in "$1"/*; do
  s=$(cut -d" " -f3 "/proc/${f##*/}/stat" 2>/dev/null)
  if [ -n "$s" ] && [ "$s" != Z ]; then n=$((n+1)); else rm -f "$f"; fi
done
echo $n >> "$3"
h=$(cat "$4/$5" 2>/dev/null || echo 0)
echo "start $5 $6 $h $2" >> "$7"
if [ "$6" -gt "$h" ]; then echo "$6" > "$4/$5"; fi' _ %[2]s $me %[3]s %[6]s "$COORDD_SLOT" "$COORDD_FENCING_TOKEN" %[7]s
echo "in $COORDD_CHAOS_CLIENT $(date +%%s.%%N)" >> %[4]s
%[5]secho "out $COORDD_CHAOS_CLIENT $(date +%%s.%%N)" >> %[4]s
flock %[1]s sh -c 'rm -f "$1/$2"; echo "end $4 $5 $(cat "$3/$4") $2" >> "$6"' _ %[2]s $me %[6]s "$COORDD_SLOT" "$COORDD_FENCING_TOKEN" %[7]s
`, w.path("witness.lock"), w.path("holders"), w.path("peaks"), w.path("sem.log"), sleepSnippet, w.path("fence"), w.path("fencing"))
	handle := fmt.Sprintf(`read -r p
line="$p $COORDD_JOB_ID $COORDD_ATTEMPT $COORDD_CHAOS_WORKER"
echo "start $line $(date +%%s.%%N)" >> %[1]s
%[2]secho "done $line $(date +%%s.%%N)" >> %[1]s
`, w.path("queue.log"), sleepSnippet)
	for name, body := range map[string]string{"cron.sh": cron, "hold.sh": hold, "handle.sh": handle} {
		if err := os.WriteFile(w.path(name), []byte(body), 0o755); err != nil {
			w.t.Fatal(err)
		}
	}
}

// writeSpec starts the backend's private server and writes the spec.
func (w *world) writeSpec() {
	var header, semBackend string
	switch w.cfg.Backend {
	case "sqlite":
		// The implicit embedded store in the shared data dir. It has no
		// server to restart: its outage is a stall, another process
		// holding the write lock.
		w.srv = &testenv.SQLiteStall{Path: filepath.Join(w.env.DataDir, "coordd.db")}
	case "mysql":
		m := testenv.StartMariaDB(w.t)
		w.srv = m
		dsn := strings.Replace(m.CreateDatabase(w.t), m.Addr(), w.startNetwork(m.Addr()), 1)
		header = fmt.Sprintf("backends:\n  db: {type: mysql, dsn: %q}\ncluster: {backend: db, leader_lease: %s}\n", dsn, leaderLease)
	case "redis":
		r := testenv.StartRedis(w.t, redisArgs...)
		w.srv = r
		if w.cfg.Failover {
			// The failover is this run's outage: a restart would bring
			// a promoted replica back as a replica.
			w.startStaleReplica(r)
			w.srv = nil
		}
		addr := fmt.Sprintf("127.0.0.1:%d", r.Port)
		header = fmt.Sprintf("backends:\n  cache: {type: redis, url: \"redis://%s/0\", key_prefix: \"chaos:\"}\ncluster: {backend: cache, leader_lease: %s}\n", w.startNetwork(addr), leaderLease)
	case "redis-sentinel":
		// No proxy: the Sentinels hand out the servers' own addresses. A
		// clean failover stands in for the backend restart.
		header = fmt.Sprintf("backends:\n  cache: {type: redis, %s, key_prefix: \"chaos:\"}\ncluster: {backend: cache, leader_lease: %s}\n", w.startSentinels(), leaderLease)
	case "memcached":
		// memcached keeps nothing across a restart: the restart is a data
		// loss that the loss marker must turn into a hold.
		m := testenv.StartMemcached(w.t)
		w.srv = m
		header = fmt.Sprintf("backends:\n  local: {type: sqlite}\n  mc: {type: memcached, servers: [%q], key_prefix: \"chaos:\"}\ncluster: {backend: local, leader_lease: %s}\n", w.startNetwork(m.Addr()), leaderLease)
		semBackend = ", backend: mc"
	default:
		w.t.Fatalf("chaos: unknown backend %q", w.cfg.Backend)
	}
	if w.cfg.Backend == "sqlite" {
		header = fmt.Sprintf("cluster: {leader_lease: %s}\n", leaderLease)
	}
	body := fmt.Sprintf(`semaphores:
  pool: {limit: %d, lease: 3s%s}
cron:
  tick:
    schedule: "@every %s"
    catch_up: all
    overlap: allow
    max_attempts: 3
    retry_backoff: 0s
    on_host_loss: retry
    run_lease: %s
    command: [/bin/sh, %q]
queues:
  jobs: {partitions: 4, visibility_timeout: %s, max_attempts: 100, retry_backoff: 0s}
`, semLimit, semBackend, cronStep, runLease, w.path("cron.sh"), visibilityTimeout)
	w.spec = w.path("coordd.yaml")
	if err := os.WriteFile(w.spec, []byte(header+body), 0o644); err != nil {
		w.t.Fatal(err)
	}
}

// start starts m's next incarnation; envVar, when set, names the
// variable that tells the commands it runs the incarnation's tag.
func (w *world) start(m *member, envVar string, args ...string) {
	old := 0
	if m.proc != nil {
		old = m.proc.Cmd.Process.Pid
	}
	m.gen++
	m.tag = fmt.Sprintf("%s-%d", m.id, m.gen)
	env := []string{"COORDD_TEST_HOST=" + m.id}
	if envVar != "" {
		env = append(env, envVar+"="+m.tag)
	}
	m.proc = w.env.StartWith(w.t, m.tag, env, args...)
	w.net.started(m, old)
	m.started = time.Now()
	m.killed, m.respawn = false, time.Time{}
}

func (w *world) startDaemon(m *member) {
	w.start(m, "", "run", "-f", w.spec, "--host-id", m.id,
		"--resync", "2s", "--shutdown-grace", "5s", "--log-level", "info")
}

func (w *world) startWorker(m *member) {
	w.start(m, "COORDD_CHAOS_WORKER",
		"queue", "work", "jobs", "-f", w.spec, "--concurrency", workerConcurrency, "--host-id", m.id, "--", "/bin/sh", w.path("handle.sh"))
}

func (w *world) startClient(m *member) {
	w.start(m, "COORDD_CHAOS_CLIENT",
		"sem", "run", "pool", "-f", w.spec, "--host-id", m.id, "--", "/bin/sh", w.path("hold.sh"))
}

// tend keeps the cluster going: it respawns what the harness killed once
// its downtime is over, continues stopped daemons, starts the next sem run
// of each client, and respawns daemons and workers that exited on their
// own.
func (w *world) tend() {
	now := time.Now()
	w.healNet(now, false)
	for _, m := range w.daemons {
		if m.stopped > 0 && !now.Before(m.contAt) {
			m.proc.Signal(syscall.SIGCONT)
			w.faults[m.stopped-1].End = time.Now()
			m.stopped = 0
		}
		if w.exited(m, now) {
			w.startDaemon(m)
		}
	}
	for _, m := range w.workers {
		if w.exited(m, now) {
			w.startWorker(m)
		}
	}
	for _, m := range w.clients {
		select {
		case <-m.proc.Done():
		default:
			continue
		}
		if m.respawn.IsZero() {
			// A sem run that failed (its backend restarting) is retried
			// after a pause, not in a tight loop.
			m.respawn = now
			if m.proc.ExitCode() != 0 && !m.killed {
				m.respawn = now.Add(300 * time.Millisecond)
			}
		}
		if w.clientsOn && !now.Before(m.respawn) {
			w.startClient(m)
		}
	}
}

// exited reports whether m should be started again: killed by the harness
// and its downtime over, or exited on its own (counted, with its output).
func (w *world) exited(m *member, now time.Time) bool {
	select {
	case <-m.proc.Done():
	default:
		return false
	}
	if m.killed {
		return !now.Before(m.respawn)
	}
	w.respawns++
	w.t.Logf("%s exited by itself with %d; starting it again. Last output:\n%s", m.tag, m.proc.ExitCode(), tail(m.proc.Output(), 15))
	return true
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

type planned struct {
	at    time.Duration
	kind  FaultKind
	floor bool // placed to meet a floor
}

// schedule draws the faults from the seed: one every 1.5-3.5 s, of a kind
// drawn by weight, then raised to the floors.
func (w *world) schedule() []planned {
	weights := []struct {
		k FaultKind
		w int
	}{{DaemonKill, 30}, {DaemonStop, 10}, {ClientKill, 20}, {WorkerKill, 20}}
	outage := BackendRestart
	switch {
	case w.sentinels != nil:
		outage = SentinelFailover
	case w.stale != nil:
		outage = RedisFailover
	}
	weights = append(weights, struct {
		k FaultKind
		w int
	}{outage, 12})
	if w.net != nil {
		for _, k := range NetKinds {
			weights = append(weights, struct {
				k FaultKind
				w int
			}{k, 8})
		}
	}
	total := 0
	for _, x := range weights {
		total += x.w
	}
	var plan []planned
	for at := time.Duration(0); ; {
		at += 1500*time.Millisecond + time.Duration(w.rng.Int64N(int64(2*time.Second)))
		if at >= w.cfg.Duration-time.Second {
			break
		}
		n := w.rng.IntN(total)
		for _, x := range weights {
			if n < x.w {
				plan = append(plan, planned{at: at, kind: x.k})
				break
			}
			n -= x.w
		}
	}
	// raise keeps floor faults of kind k: it marks existing ones as kept
	// and turns drawn faults that nothing keeps into more.
	raise := func(k FaultKind, floor int) {
		have := 0
		for i := range plan {
			if plan[i].kind == k && have < floor {
				plan[i].floor = true
				have++
			}
		}
		for ; have < floor; have++ {
			var idx []int
			for i, p := range plan {
				if !p.floor {
					idx = append(idx, i)
				}
			}
			if len(idx) == 0 {
				w.t.Fatalf("chaos: %s is too short for the fault floors", w.cfg.Duration)
			}
			i := idx[w.rng.IntN(len(idx))]
			plan[i].kind, plan[i].floor = k, true
		}
	}
	// Every kind at least once, then the floors.
	for _, k := range []FaultKind{DaemonStop, ClientKill, WorkerKill} {
		raise(k, 1)
	}
	if w.net != nil {
		for _, k := range NetKinds {
			raise(k, 1)
		}
	}
	raise(outage, max(1, w.cfg.MinBackendRestarts))
	raise(DaemonKill, w.cfg.MinDaemonKills)
	return plan
}

// inject applies one fault; false means no target is eligible now and the
// fault should be tried again shortly.
func (w *world) inject(k FaultKind) bool {
	f := Fault{Kind: k, At: time.Now()}
	open := w.inFlight()
	switch k {
	case DaemonKill:
		m := w.pickDaemon(false)
		if m == nil {
			return false
		}
		f.Target, f.MidOp = m.id, open.CronHosts[m.id] > 0
		m.proc.Kill9()
		m.killed, m.respawn = true, time.Now().Add(500*time.Millisecond+time.Duration(w.rng.Int64N(int64(2500*time.Millisecond))))
		if m.stopped > 0 { // killed while stopped: the stop ends here
			w.faults[m.stopped-1].End = time.Now()
			m.stopped = 0
		}
	case DaemonStop:
		m := w.pickDaemon(true)
		if m == nil {
			return false
		}
		f.Target, f.MidOp = m.id, open.CronHosts[m.id] > 0
		m.proc.Signal(syscall.SIGSTOP)
		// Longer than the leader lease and the run lease together, so
		// that the host is certainly lost while it sleeps.
		m.stopped = len(w.faults) + 1
		m.contAt = time.Now().Add(leaderLease + runLease + time.Second + time.Duration(w.rng.Int64N(int64(3*time.Second))))
		f.End = m.contAt
	case ClientKill:
		m := w.pickBusy(w.clients, func(m *member) bool { return open.SemClients[m.tag] })
		if m == nil {
			return false
		}
		f.Target, f.MidOp = m.tag, open.SemClients[m.tag]
		m.proc.Kill9()
		m.killed = true
	case WorkerKill:
		m := w.pickBusy(w.workers, func(m *member) bool { return open.Workers[m.tag] > 0 })
		if m == nil {
			return false
		}
		f.Target, f.MidOp = m.tag, open.Workers[m.tag] > 0
		m.proc.Kill9()
		m.killed, m.respawn = true, time.Now().Add(500*time.Millisecond+time.Duration(w.rng.Int64N(int64(1500*time.Millisecond))))
	case BackendRestart:
		f.Target, f.MidOp = w.cfg.Backend, open.Any()
		w.srv.Kill()
		time.Sleep(500*time.Millisecond + time.Duration(w.rng.Int64N(int64(1500*time.Millisecond))))
		w.srv.Start(w.t)
	case NetBlackhole, NetLatency, NetSlow, NetReset, NetOneWay:
		if !w.injectNet(&f, open) {
			return false
		}
	case SentinelFailover:
		f.Target, f.MidOp = w.cfg.Backend, open.Any()
		w.sentinels.failover(w.t)
	case RedisFailover:
		f.Target, f.MidOp = w.cfg.Backend, open.Any()
		w.stale.run(w)
	}
	if f.End.IsZero() {
		f.End = time.Now()
	}
	w.faults = append(w.faults, f)
	w.t.Logf("fault %-15s %-8s mid-operation=%-5v %s - %s %s", f.Kind, f.Target, f.MidOp, f.At.Format("15:04:05.000"), f.End.Format("15:04:05.000"), f.Detail)
	return true
}

// pickDaemon picks a running daemon, the leader half of the time. For a
// stop it must not be stopped already, and no other daemon may be stopped.
func (w *world) pickDaemon(forStop bool) *member {
	var up []*member
	for _, m := range w.daemons {
		if !m.proc.Running() {
			continue
		}
		if forStop && m.stopped > 0 {
			return nil
		}
		up = append(up, m)
	}
	if len(up) == 0 {
		return nil
	}
	if w.rng.IntN(2) == 0 {
		if l := w.leader(); l != "" {
			for _, m := range up {
				if m.id == l && (!forStop || m.stopped == 0) {
					return m
				}
			}
		}
	}
	return up[w.rng.IntN(len(up))]
}

// pickBusy picks a running member, preferring one that is in the middle of
// its work.
func (w *world) pickBusy(ms []*member, busy func(*member) bool) *member {
	var up, b []*member
	for _, m := range ms {
		if m.proc.Running() {
			up = append(up, m)
			if busy(m) {
				b = append(b, m)
			}
		}
	}
	if len(b) > 0 && w.rng.IntN(4) != 0 {
		return b[w.rng.IntN(len(b))]
	}
	if len(up) == 0 {
		return nil
	}
	return up[w.rng.IntN(len(up))]
}

// inFlight reads what is in flight now, counting only starts made by the
// current incarnation of each daemon (an earlier one's killed command
// never wrote its end).
func (w *world) inFlight() InFlight {
	cron, _ := ReadCron(w.path("cron.log"))
	sem, _ := ReadSem(w.path("sem.log"))
	jobs, _ := ReadJobs(w.path("queue.log"))
	since := map[string]time.Time{}
	for _, m := range w.daemons {
		since[m.id] = m.started
	}
	live := cron[:0]
	for _, e := range cron {
		if !e.At.Before(since[e.Host]) {
			live = append(live, e)
		}
	}
	return OpenOps(live, sem, jobs)
}

// heal ends every fault: stopped daemons continue, killed ones start, the
// backend runs.
func (w *world) heal() {
	w.healNet(time.Now(), true)
	if w.srv != nil && !w.srv.Running() {
		w.srv.Start(w.t)
	}
	for _, m := range w.daemons {
		m.contAt, m.respawn = time.Time{}, time.Time{}
	}
	for _, m := range w.workers {
		m.respawn = time.Time{}
	}
	w.tend()
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

// pusher pushes job j00001, j00002, ... every pushEvery. A push that fails
// is retried with the same payload; such a payload is ambiguous (the failed
// push may have enqueued it), which explains a second delivery.
func (w *world) pusher() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for n := 1; ; n++ {
			p := fmt.Sprintf("j%05d", n)
			for {
				if ctx.Err() != nil {
					return
				}
				_, err := w.coordd(15*time.Second, "queue", "push", "jobs", "-f", w.spec, p)
				w.pushMu.Lock()
				if err == nil {
					w.pushed = append(w.pushed, p)
				} else {
					w.ambiguous[p] = true
				}
				w.pushMu.Unlock()
				if err == nil {
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(pushEvery):
			}
		}
	}()
	return func() { cancel(); <-done }
}

// queueSettled reports whether every pushed payload is done and the queue
// holds nothing.
func (w *world) queueSettled() bool {
	jobs, err := ReadJobs(w.path("queue.log"))
	if err != nil {
		return false
	}
	done := map[string]bool{}
	for _, e := range jobs {
		if e.Kind == "done" {
			done[e.Payload] = true
		}
	}
	w.pushMu.Lock()
	for _, p := range w.pushed {
		if !done[p] {
			w.pushMu.Unlock()
			return false
		}
	}
	w.pushMu.Unlock()
	out, err := w.coordd(10*time.Second, "queue", "stats", "jobs", "-f", w.spec, "--json")
	if err != nil {
		return false
	}
	var st []struct {
		Ready    int `json:"ready"`
		InFlight int `json:"in_flight"`
		Delayed  int `json:"delayed"`
	}
	if json.Unmarshal(out, &st) != nil || len(st) != 1 {
		return false
	}
	return st[0].Ready == 0 && st[0].InFlight == 0 && st[0].Delayed == 0
}

// verdict reads the evidence and lists every violation.
func (w *world) verdict(faultEnd time.Time) Result {
	t := w.t
	r := Result{Backend: w.cfg.Backend, Scenario: "cron+sem+queue", Seed: w.cfg.Seed, Faults: w.faults, Limit: semLimit, Respawns: w.respawns}
	switch {
	case w.cfg.Backend == "memcached":
		r.Scenario = "sem on memcached; cron+queue on sqlite"
	case w.sentinels != nil:
		r.Scenario = "cron+sem+queue; primary, replica, 3 sentinels"
	}
	cron, err := ReadCron(w.path("cron.log"))
	if err != nil {
		t.Fatal(err)
	}
	r.Cron = CheckCron(cron, "tick", cronStep, faultEnd, w.faults, runLease, 20*time.Second)
	if r.SemEntries, r.MaxHolders, err = ReadPeaks(w.path("peaks")); err != nil {
		t.Fatal(err)
	}
	fence, err := ReadFencing(w.path("fencing"))
	if err != nil {
		t.Fatal(err)
	}
	var fenceProblems []string
	r.StaleFencing, fenceProblems = CheckFencing(fence)
	jobs, err := ReadJobs(w.path("queue.log"))
	if err != nil {
		t.Fatal(err)
	}
	w.pushMu.Lock()
	r.Queue = CheckQueue(jobs, w.pushed, w.ambiguous, w.faults, visibilityTimeout)
	w.pushMu.Unlock()

	v := append(append(append([]string{}, r.Cron.Problems...), r.Queue.Problems...), fenceProblems...)
	if r.MaxHolders > r.Limit {
		v = append(v, fmt.Sprintf("semaphore pool had %d holders alive at once (limit %d)", r.MaxHolders, r.Limit))
	}
	if r.SemEntries == 0 {
		v = append(v, "no semaphore holder ever ran")
	}
	if r.Queue.Pushed == 0 {
		v = append(v, "no job was pushed")
	}
	if _, mid := r.Count(""); mid == 0 {
		v = append(v, "no fault hit an operation in flight")
	}
	if n, _ := r.Count(DaemonKill); n < w.cfg.MinDaemonKills {
		v = append(v, fmt.Sprintf("%d daemon kills, below the floor of %d", n, w.cfg.MinDaemonKills))
	}
	if n, _ := r.Count(BackendRestart); n < w.cfg.MinBackendRestarts && w.srv != nil {
		v = append(v, fmt.Sprintf("%d backend restarts, below the floor of %d", n, w.cfg.MinBackendRestarts))
	}
	if n, _ := r.Count(SentinelFailover); w.sentinels != nil && n < max(1, w.cfg.MinBackendRestarts) {
		v = append(v, fmt.Sprintf("%d sentinel failovers, below the floor of %d", n, max(1, w.cfg.MinBackendRestarts)))
	}
	if n, _ := r.Count(RedisFailover); w.stale != nil && n == 0 {
		v = append(v, "no redis-failover fault was injected")
	}
	if w.net != nil {
		for _, k := range NetKinds {
			if n, _ := r.Count(k); n == 0 {
				v = append(v, fmt.Sprintf("no %s fault was injected", k))
			}
		}
	}
	r.Violations = v
	return r
}
