package scheduler

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/internal/child"
	"github.com/coordd/coordd/leadership"
	"github.com/coordd/coordd/semaphore"
	"github.com/coordd/coordd/spec"
	"github.com/hashicorp/go-hclog"
)

// Config configures a Scheduler.
type Config struct {
	Host string
	// Elector: occurrences are claimed only while it leads.
	Elector *leadership.Elector
	// Backends returns the backends that may hold cron tasks; it is called
	// on every pass, so it may change on reload.
	Backends func() map[string]backends.Backend
	// Semaphore resolves a task's semaphore to a client and its applied
	// config. Nil: tasks with a semaphore fail to start.
	Semaphore func(name string) (*semaphore.Client, backends.SemaphoreConfig, error)
	Log       hclog.Logger
	// Stdout receives the children's output lines, prefixed with
	// "[task run_id] "; default os.Stderr.
	Stdout io.Writer
	// Poll is the longest the loop sleeps while leading when nothing is
	// due sooner: it bounds how late a task applied behind this host's back
	// (coordd apply from elsewhere) is noticed. Default DefaultPoll. The
	// loop otherwise sleeps until the earliest next_exec; Wake and
	// leadership changes wake it at once.
	Poll time.Duration
	// Sweep is how often, at most, the loop looks for occurrences whose
	// run lease expired (their host died) and for retries that are due,
	// when nothing else asks for it: it also does so when leadership is
	// gained, when Wake is called (a run finished, the spec changed) and
	// when a retry's backoff ends. Default DefaultSweep.
	Sweep time.Duration
	// Observer, if not nil, is told when a run starts and finishes (the
	// daemon's metrics).
	Observer Observer
	// ChildEnvUnset, if not nil, names the variables the commands must not
	// inherit (spec.Spec.ChildEnvUnset: the backends' secrets). It is
	// called at each start, so that it follows reloads.
	ChildEnvUnset func() []string
}

// Observer is told about runs as they start and finish.
type Observer interface {
	// CronStarted: the command of attempt of the occurrence scheduled at
	// scheduledAt started at startedAt.
	CronStarted(task string, scheduledAt time.Time, attempt int, startedAt time.Time)
	// CronFinished: a run ended with status (backends.Run*, or
	// "not-recorded").
	CronFinished(task, status string)
}

// Defaults of Config.Poll and Config.Sweep: an idle leader then reads the
// backend three times per 20 s (due tasks, expired occurrences, pending
// retries).
const (
	DefaultPoll  = 20 * time.Second
	DefaultSweep = 20 * time.Second
)

// Tunables of the loop.
const (
	// batch bounds the rows read per pass.
	batch = 100
	// noneLate: with catch_up none, the latest due time is skipped too when
	// it is more than this late.
	noneLate = time.Minute
	// maxEnumerate bounds how many missed times are counted after a long
	// downtime; beyond it the oldest are skipped as a block.
	maxEnumerate = 100000
	// defaultRunLease applies to definitions applied before run_lease
	// existed.
	defaultRunLease = 30 * time.Second
	// finishTimeout bounds the recording of a result.
	finishTimeout = 10 * time.Second
	// offsetEvery is how often a backend's clock offset is measured again
	// (one Now) when no pass needed Now meanwhile.
	offsetEvery = 10 * time.Minute
	// busyPoll bounds the sleep after a pass that handled due tasks: their
	// next_exec moved after nextAt was read.
	busyPoll = time.Second
)

// Scheduler claims due cron occurrences while its elector leads and runs
// them.
type Scheduler struct {
	cfg   Config
	log   hclog.Logger
	wake  chan struct{}
	outMu sync.Mutex

	// runCtx is the parent of every running occurrence. It is not derived
	// from Run's context: stopping the loop never stops a child, only
	// Shutdown's deadline does.
	runCtx     context.Context
	cancelRuns context.CancelFunc
	runs       sync.WaitGroup

	mu      sync.Mutex
	closing bool
	// batch holds each backend's coalescers (batch.go), under mu.
	batch map[backends.Crons]*cronBatchers
	// starting counts runs claimed whose command has not started yet:
	// while there are any, results wait to be recorded (batch.go).
	starting atomic.Int64

	// own holds, by owner token, the runs this scheduler supervises
	// (claimed, or being claimed, and not yet recorded), under mu; true
	// once the run's command ended (its result is being recorded). Those
	// whose command has not ended are the only runs it knows to be
	// running (see overlapDecision).
	own map[string]bool

	// offsets holds, per backend name, its clock minus this host's and
	// when that was measured; only Run's goroutine uses it.
	offsets map[string]clockOffset
	// reapAt (monotonic; zero: none) is when the run lease of a run that
	// holds back a due task (overlap) expires: if its host died, the run
	// must be reaped then, not at the next Sweep. Only Run's goroutine
	// uses it.
	reapAt time.Time
	// waitingFor holds, per task, the run ID of the run of another
	// process its due times last waited for (logged once per run). Only
	// Run's goroutine uses it.
	waitingFor map[string]string
}

// reapMargin is how long after a blocking run's lease expiry (backend
// time, estimated here) the loop sweeps for it.
const reapMargin = 50 * time.Millisecond

// reapWhenExpired asks for a sweep when the earliest of running's leases
// expires; now is backend time.
func (s *Scheduler) reapWhenExpired(running []backends.Occurrence, now time.Time) {
	for _, o := range running {
		at := time.Now().Add(o.ExpiresAt.Sub(now) + reapMargin)
		if s.reapAt.IsZero() || at.Before(s.reapAt) {
			s.reapAt = at
		}
	}
}

// clockOffset is a backend clock's offset from this host's.
type clockOffset struct {
	d  time.Duration
	at time.Time
}

// New returns a scheduler; Run starts its loop.
func New(cfg Config) *Scheduler {
	if cfg.Log == nil {
		cfg.Log = hclog.NewNullLogger()
	}
	if cfg.Stdout == nil {
		cfg.Stdout = os.Stderr
	}
	if cfg.Backends == nil {
		cfg.Backends = func() map[string]backends.Backend { return nil }
	}
	if cfg.Poll <= 0 {
		cfg.Poll = DefaultPoll
	}
	if cfg.Sweep <= 0 {
		cfg.Sweep = DefaultSweep
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Scheduler{cfg: cfg, log: cfg.Log, wake: make(chan struct{}, 1), runCtx: ctx, cancelRuns: cancel,
		offsets: map[string]clockOffset{}, batch: map[backends.Crons]*cronBatchers{},
		own: map[string]bool{}, waitingFor: map[string]string{}}
}

// supervise marks owner's run as this scheduler's own, before its claim is
// sent; ended marks its command ended; release forgets it once the run is
// recorded (or its claim failed).
func (s *Scheduler) supervise(owner string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.own[owner] = false
}

func (s *Scheduler) ended(owner string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.own[owner]; ok {
		s.own[owner] = true
	}
}

func (s *Scheduler) release(owner string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.own, owner)
}

// classify returns a run of running that this scheduler does not
// supervise (ok true), if there is one; otherwise the runs whose command
// has not ended yet (starting, waiting for the semaphore, or running).
func (s *Scheduler) classify(running []backends.Occurrence) (foreign backends.Occurrence, ok bool, commands []backends.Occurrence) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range running {
		done, mine := s.own[o.Owner]
		switch {
		case !mine:
			return o, true, nil
		case !done:
			commands = append(commands, o)
		}
	}
	return backends.Occurrence{}, false, commands
}

// Wake makes the loop re-read the backends at once (the spec changed, a run
// finished).
func (s *Scheduler) Wake() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *Scheduler) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// leading reports whether claims are allowed now.
func (s *Scheduler) leading() bool {
	if s.isClosing() || s.cfg.Elector == nil {
		return false
	}
	_, ok := s.cfg.Elector.Leading()
	return ok
}

// Run claims and starts due occurrences while the elector leads, until ctx
// ends or Shutdown is called. Running occurrences are not stopped when it
// returns: call Shutdown.
//
// While leading, each pass reads the due tasks (one query on a networked
// backend) and sleeps until the earliest next_exec, at most Poll (at most
// busyPoll after claiming, since next_exec moved); every Sweep, and whenever
// something may have changed (leadership gained, Wake, a retry's backoff
// ending, the lease of a run that holds back a due task expiring), the pass
// first reaps expired occurrences and claims due retries. An idle leader
// thus sends about one query per Poll and two per Sweep.
func (s *Scheduler) Run(ctx context.Context) error {
	var leadCh <-chan bool
	if s.cfg.Elector != nil {
		leadCh = s.cfg.Elector.Subscribe()
	}
	var sweepAt time.Time // zero: sweep on the next pass
	// backlog: the last pass left due tasks unclaimed (a burst larger
	// than a page). The next page is claimed at once, and a sweep that
	// a finished run asked for waits until the backlog is claimed (or a
	// whole Sweep passed since the last one): starting the due runs
	// comes first.
	var backlog bool
	var swept time.Time
	for {
		if s.isClosing() || ctx.Err() != nil {
			return nil
		}
		sleep := s.cfg.Poll
		if s.leading() {
			sweep := !time.Now().Before(sweepAt) && (!backlog || time.Since(swept) >= s.cfg.Sweep)
			if sweep {
				sweepAt, s.reapAt, swept = time.Now().Add(s.cfg.Sweep), time.Time{}, time.Now()
			}
			for _, bn := range s.sortedBackends() {
				d, retryIn := s.pass(ctx, bn, s.cfg.Backends()[bn], sweep)
				sleep = min(sleep, d)
				if at := time.Now().Add(retryIn); sweep && at.Before(sweepAt) {
					sweepAt = at
				}
			}
			if !s.reapAt.IsZero() && s.reapAt.Before(sweepAt) {
				sweepAt = s.reapAt
			}
			backlog = sleep <= 0
			sleep = min(sleep, time.Until(sweepAt))
		} else {
			backlog = false
		}
		if backlog {
			select {
			case <-ctx.Done():
				return nil
			case <-s.wake:
				sweepAt = time.Time{}
			default:
			}
			continue
		}
		sleep = max(sleep, 5*time.Millisecond)
		t := time.NewTimer(sleep)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-s.wake:
			sweepAt = time.Time{}
		case <-leadCh:
			sweepAt = time.Time{}
		case <-t.C:
		}
		t.Stop()
	}
}

func (s *Scheduler) sortedBackends() []string {
	m := s.cfg.Backends()
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// cronBackend is the two cron views of one backend.
type cronBackend struct {
	backends.Backend
	backends.Crons
	backends.CronAdmin
}

func asCron(b backends.Backend) (*cronBackend, error) {
	c, ok := b.(backends.Crons)
	a, ok2 := b.(backends.CronAdmin)
	if !ok || !ok2 {
		return nil, fmt.Errorf("backend %q (%s) cannot hold cron tasks: %w", b.Name(), b.Type(), backends.ErrUnsupported)
	}
	return &cronBackend{Backend: b, Crons: c, CronAdmin: a}, nil
}

// task is a parsed applied definition.
type task struct {
	name  string
	def   spec.CronTask
	sched spec.Schedule
}

func parseTask(name string, raw json.RawMessage) (*task, error) {
	t := &task{name: name}
	if err := json.Unmarshal(raw, &t.def); err != nil {
		return nil, fmt.Errorf("cron %q: applied definition: %w", name, err)
	}
	t.def.Name = name
	if t.def.RunLease <= 0 {
		t.def.RunLease = defaultRunLease
	}
	if t.def.MaxAttempts < 1 {
		t.def.MaxAttempts = 1
	}
	sched, err := spec.ParseSchedule(t.def.Schedule, t.def.Timezone)
	if err != nil {
		return nil, fmt.Errorf("cron %q: applied schedule: %w", name, err)
	}
	t.sched = sched
	return t, nil
}

// retryable reports whether r, the latest attempt of its scheduled time,
// which ended failed, timed out or lost, gets another attempt.
//
// A failed or timed-out attempt is retried while r.Attempt < max_attempts.
// A lost one (its host vanished or stopped renewing: nothing says the
// command failed) is retried under on_host_loss retry while r.Attempt <=
// max_attempts: a host loss earns one attempt beyond max_attempts, so that
// the default max_attempts 1 survives a kill -9, and a command that kills
// its host every time still runs at most max_attempts+1 times per
// scheduled time. The bound needs only r's attempt number, not a count of
// earlier losses that history_limit might have trimmed.
func (t *task) retryable(r backends.Run) bool {
	if r.Status == backends.RunLost {
		return t.def.OnHostLoss != spec.HostLossFail && r.Attempt <= t.def.MaxAttempts
	}
	return r.Attempt < t.def.MaxAttempts
}

// pass does one round on backend bn: with sweep, reap and retries first;
// then the due tasks. It returns how long the loop may sleep as far as b is
// concerned and, with sweep, how long until the next pending retry is due.
func (s *Scheduler) pass(ctx context.Context, bn string, b backends.Backend, sweep bool) (sleep, retryIn time.Duration) {
	sleep, retryIn = s.cfg.Poll, s.cfg.Sweep
	cb, err := asCron(b)
	if err != nil {
		return sleep, retryIn
	}
	if sweep {
		s.reap(ctx, cb)
		retryIn = s.retries(ctx, cb)
	}
	due, nextAt, err := cb.DueTasks(ctx, batch)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("reading due cron tasks failed", "backend", b.Name(), "error", err)
		}
		return sleep, retryIn
	}
	var now time.Time
	if len(due) > 0 {
		if now, err = s.now(ctx, bn, cb); err != nil {
			return sleep, retryIn
		}
	}
	// Tasks with one on-time due time, the burst case, are claimed
	// together in one call; catch-up goes one task at a time.
	var items []claimItem
	// wake: how soon a task that waits for a run of its own must be
	// looked at again (overlapDecision); zero: no such task.
	var wake time.Duration
	dueOne := func(d backends.DueTask) {
		if w := s.due(ctx, cb, d, now); w > 0 && (wake == 0 || w < wake) {
			wake = w
		}
	}
	for _, d := range due {
		if !s.leading() {
			return sleep, retryIn
		}
		t, err := parseTask(d.Name, d.Def)
		if err != nil {
			s.log.Error("cannot schedule task", "task", d.Name, "error", err)
			continue
		}
		next := t.sched.Next(d.NextExec)
		// A task whose times wait for a run of another process takes the
		// one-task path, which reads the live runs before any claim: while
		// it waits, a pass costs it one read, not a refused claim.
		_, waiting := s.waitingFor[d.Name]
		if !waiting && (next.IsZero() || next.After(now)) && (t.def.CatchUp != spec.CatchUpNone || now.Sub(d.NextExec) <= noneLate) {
			items = append(items, claimItem{t: t, due: d, req: backends.ClaimRequest{
				Task: t.name, ScheduledAt: d.NextExec, Next: next, Attempt: 1, Lease: t.def.RunLease,
				Exclusive: t.def.Overlap != spec.OverlapAllow,
			}})
			continue
		}
		dueOne(d)
	}
	for _, it := range s.claimAndStartMany(ctx, cb, items) {
		// A run of the task is live (overlap forbid): the one-task path
		// reads it and decides whether the time waits or is skipped.
		if !s.leading() {
			return sleep, retryIn
		}
		dueOne(it.due)
	}
	switch {
	case len(due) == batch:
		return 0, retryIn
	case len(due) > 0:
		// next_exec moved (or a task waits for a running one): look again
		// soon, as nextAt was read before the claims.
		sleep = busyPoll
	}
	if wake > 0 {
		sleep = min(sleep, wake)
	}
	if !nextAt.IsZero() {
		if now, err = s.estimateNow(ctx, bn, cb); err == nil {
			sleep = min(sleep, nextAt.Sub(now))
		}
	}
	return sleep, retryIn
}

// now reads backend bn's clock (one query) and records its offset from
// this host's.
func (s *Scheduler) now(ctx context.Context, bn string, cb *cronBackend) (time.Time, error) {
	sent := time.Now()
	now, err := cb.Now(ctx)
	if err != nil {
		return time.Time{}, err
	}
	recv := time.Now()
	s.offsets[bn] = clockOffset{d: now.Sub(sent.Add(recv.Sub(sent) / 2)), at: recv}
	return now, nil
}

// estimateNow is backend bn's clock as this host's plus the recorded
// offset, measured again (one query) when older than offsetEvery. It only
// decides how long the loop sleeps: whether a task is due is always the
// backend's decision (DueTasks), so an error in the estimate wakes the loop
// early or late, never runs a task early.
func (s *Scheduler) estimateNow(ctx context.Context, bn string, cb *cronBackend) (time.Time, error) {
	if o, ok := s.offsets[bn]; ok && time.Since(o.at) < offsetEvery {
		return time.Now().Add(o.d), nil
	}
	return s.now(ctx, bn, cb)
}

// reap marks occurrences whose run lease expired as lost; on_host_loss is
// then applied by retries.
func (s *Scheduler) reap(ctx context.Context, cb *cronBackend) {
	exp, err := cb.ExpiredOccurrences(ctx, batch)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("reading expired occurrences failed", "backend", cb.Name(), "error", err)
		}
		return
	}
	for _, o := range exp {
		if err := cb.ReapOccurrence(ctx, o); err != nil {
			if !errors.Is(err, backends.ErrConflict) && ctx.Err() == nil {
				s.log.Warn("reaping failed", "task", o.Task, "error", err)
			}
			continue
		}
		s.log.Warn("occurrence lost: its host stopped renewing the run lease", "task", o.Task,
			"scheduled_at", o.ScheduledAt, "attempt", o.Attempt, "host", o.Host, "run_id", o.RunID)
	}
}

// retries claims the next attempt of failed runs whose backoff elapsed. It
// returns how long until the next pending retry is due (Sweep when none
// is).
func (s *Scheduler) retries(ctx context.Context, cb *cronBackend) time.Duration {
	sleep := s.cfg.Sweep
	pend, err := cb.PendingRetries(ctx, batch)
	if err != nil || len(pend) == 0 {
		if err != nil && ctx.Err() == nil {
			s.log.Warn("reading pending retries failed", "backend", cb.Name(), "error", err)
		}
		return sleep
	}
	var names []string
	for _, r := range pend {
		names = append(names, r.Task)
	}
	states, err := cb.ObserveCrons(ctx, names)
	if err != nil {
		return sleep
	}
	now, err := cb.Now(ctx)
	if err != nil {
		return sleep
	}
	var items []claimItem
	for _, r := range pend {
		st := states[r.Task]
		if st == nil || r.Manual {
			continue // deleted task; manual runs are retried by whoever ran them
		}
		if st.IsPaused() {
			continue // retried once resumed, if its backoff allows (the claim refuses it meanwhile)
		}
		t, err := parseTask(r.Task, st.Def)
		if err != nil || !t.retryable(r) {
			continue
		}
		if at := r.FinishedAt.Add(t.def.RetryBackoff); at.After(now) {
			sleep = min(sleep, at.Sub(now))
			continue
		}
		// With overlap forbid a retry waits for the running one: its
		// claim is refused (ErrHeld) and the next sweep tries again.
		items = append(items, claimItem{t: t, req: backends.ClaimRequest{
			Task: r.Task, ScheduledAt: r.ScheduledAt, Attempt: r.Attempt + 1, Lease: t.def.RunLease,
			Exclusive: t.def.Overlap != spec.OverlapAllow,
		}})
	}
	if !s.leading() {
		return sleep
	}
	s.claimAndStartMany(ctx, cb, items)
	return sleep
}

// overlapReason is the reason recorded for a time skipped under overlap
// forbid.
const overlapReason = "overlap: previous run still running"

// due handles one due task: overlap, catch-up, claim. It returns how soon
// the task must be looked at again when a time waits for a run this
// scheduler supervises (zero: no particular time).
func (s *Scheduler) due(ctx context.Context, cb *cronBackend, d backends.DueTask, now time.Time) time.Duration {
	t, err := parseTask(d.Name, d.Def)
	if err != nil {
		s.log.Error("cannot schedule task", "task", d.Name, "error", err)
		return 0
	}
	dt := s.dueTimesOf(ctx, cb, t, d.NextExec, now)
	forbid := t.def.Overlap != spec.OverlapAllow
	if forbid {
		if wake, decided := dt.overlap(now); decided {
			return wake
		}
	}
	delete(s.waitingFor, t.name)
	first, ok := dt.catchUp(now)
	if !ok {
		return 0
	}
	dt.claimFrom(first, forbid)
	return 0
}

// dueTimes is one due task's due times, as due decides them: overlap
// (skip or wait), catch-up (skip the missed ones its policy drops), then
// claim the rest in order.
type dueTimes struct {
	s   *Scheduler
	ctx context.Context
	cb  *cronBackend
	t   *task
	// times are t1 = next_exec < t2 < ... <= now (at most maxEnumerate).
	times []time.Time
}

// dueTimesOf enumerates the due times of t from nextExec up to now.
func (s *Scheduler) dueTimesOf(ctx context.Context, cb *cronBackend, t *task, nextExec, now time.Time) *dueTimes {
	times := []time.Time{nextExec}
	for len(times) < maxEnumerate {
		n := t.sched.Next(times[len(times)-1])
		if n.IsZero() || n.After(now) {
			break
		}
		times = append(times, n)
	}
	return &dueTimes{s: s, ctx: ctx, cb: cb, t: t, times: times}
}

// next is next_exec after claiming times[i].
func (dt *dueTimes) next(i int) time.Time {
	if i+1 < len(dt.times) {
		return dt.times[i+1]
	}
	return dt.t.sched.Next(dt.times[i])
}

// skip records one skip for times[i], moving next_exec to times[j] (or
// after the last). It reports whether the skip was recorded.
func (dt *dueTimes) skip(i, j int, reason string) bool {
	s, t := dt.s, dt.t
	nx := dt.next(j - 1)
	_, err := dt.cb.ClaimOccurrence(dt.ctx, backends.ClaimRequest{
		Task: t.name, ScheduledAt: dt.times[i], Next: nx, Attempt: 1,
		Owner: newOwner(), Host: s.cfg.Host, Skip: reason,
	})
	if err != nil {
		if !refused(err) && dt.ctx.Err() == nil {
			s.log.Warn("recording a skipped occurrence failed", "task", t.name, "error", err)
		}
		return false
	}
	s.log.Info("skipped", "task", t.name, "scheduled_at", dt.times[i], "reason", reason)
	return true
}

// overlap decides, under overlap forbid, the times of a task with live
// runs: wait, or skip what the running command overlaps. decided is false
// when no run is live (the times go on to catch-up); otherwise wake is
// how soon to look again (zero: no particular time).
func (dt *dueTimes) overlap(now time.Time) (wake time.Duration, decided bool) {
	s, t, times := dt.s, dt.t, dt.times
	running, err := dt.cb.Running(dt.ctx, t.name)
	if err != nil {
		if dt.ctx.Err() == nil {
			s.log.Warn("reading the running occurrences failed", "task", t.name, "error", err)
		}
		return 0, true
	}
	if len(running) == 0 {
		return 0, false
	}
	s.reapWhenExpired(running, now)
	o, ok, commands := s.classify(running)
	if ok {
		// Its host may have died or frozen: nothing is known to
		// run, so nothing is skipped. The times wait (next_exec
		// stays) until the run ends or its lease runs out and it
		// is reaped; then catch_up decides.
		if s.waitingFor[t.name] != o.RunID {
			s.waitingFor[t.name] = o.RunID
			s.log.Info("due times wait for a run of another process, which may have died", "task", t.name,
				"next_exec", times[0], "run_host", o.Host, "run_id", o.RunID, "run_scheduled_at", o.ScheduledAt,
				"lease_expires_at", o.ExpiresAt)
		}
		return 0, true
	}
	// Only a command that still runs can overlap; a run whose
	// command ended is being recorded: the times wait for it (its
	// end wakes the loop).
	n, wake := overlapDecision(commands, times, now)
	if n > 0 {
		reason := overlapReason
		if n > 1 {
			reason = fmt.Sprintf("%s: skipped %d", overlapReason, n)
		}
		if !dt.skip(0, n, reason) {
			return 0, true
		}
	}
	return wake, true
}

// catchUp skips the missed times the task's catch_up policy drops and
// returns the index of the first time to claim. It reports false when
// nothing is to be claimed: a skip failed, or under catch_up none the
// last time is more than noneLate late (and skipped).
func (dt *dueTimes) catchUp(now time.Time) (first int, ok bool) {
	t, times := dt.t, dt.times
	k := len(times)
	switch t.def.CatchUp {
	case spec.CatchUpAll:
		if limit := max(t.def.CatchUpLimit, 1); k > limit {
			if !dt.skip(0, k-limit, fmt.Sprintf("catch_up_limit: skipped %d", k-limit)) {
				return 0, false
			}
			first = k - limit
		}
	case spec.CatchUpNone:
		if k > 1 {
			if !dt.skip(0, k-1, fmt.Sprintf("catch_up none: skipped %d missed", k-1)) {
				return 0, false
			}
			first = k - 1
		}
		if now.Sub(times[k-1]) > noneLate {
			dt.skip(k-1, k, fmt.Sprintf("catch_up none: more than %s late", noneLate))
			return 0, false
		}
	default: // once
		if k > 1 {
			if !dt.skip(0, k-1, fmt.Sprintf("catch_up once: skipped %d missed", k-1)) {
				return 0, false
			}
			first = k - 1
		}
	}
	return first, true
}

// claimFrom claims and starts times[first:] in order while this scheduler
// leads; with forbid only the first, since the next one waits for it.
func (dt *dueTimes) claimFrom(first int, forbid bool) {
	t := dt.t
	for i := first; i < len(dt.times); i++ {
		if !dt.s.leading() {
			return
		}
		// With forbid the claim itself checks that no run is live: one
		// started since Running was read (a manual run) refuses it, and
		// the next pass decides again.
		ok := dt.s.claimAndStart(dt.ctx, dt.cb, t, backends.ClaimRequest{
			Task: t.name, ScheduledAt: dt.times[i], Next: dt.next(i), Attempt: 1, Lease: t.def.RunLease, Exclusive: forbid,
		})
		if !ok || forbid {
			return // with forbid, the next one waits for this one
		}
	}
}

// overlapDecision decides, under overlap forbid, the due times of a task
// whose live runs are all this scheduler's own; running are those whose
// command has not ended (it supervises them, so they are known to run;
// none: every time waits). It returns how many of the earliest times are
// skipped, and how soon the first of the others must be decided again
// (zero: none left); now is backend time.
//
// A time t is skipped when a run r has been running for at least
// t - r.ScheduledAt: r would have overlapped t even had it started at its
// own scheduled time, as a command longer than the period does. A later
// time waits for r and runs when r ends, as catch_up says: r started late
// (a catch-up run, a retry after a host loss), and the lateness is not
// the command's. A manual run is scheduled at its start, so it skips every
// time that falls due while it runs.
func overlapDecision(running []backends.Occurrence, times []time.Time, now time.Time) (skipped int, wake time.Duration) {
	overlaps := func(at time.Time) bool {
		for _, r := range running {
			if now.Sub(r.StartedAt) >= at.Sub(r.ScheduledAt) {
				return true
			}
		}
		return false
	}
	for skipped < len(times) && overlaps(times[skipped]) {
		skipped++
	}
	if skipped == len(times) {
		return skipped, 0
	}
	at := times[skipped]
	for _, r := range running {
		w := at.Sub(r.ScheduledAt) - now.Sub(r.StartedAt) + reapMargin
		if wake == 0 || w < wake {
			wake = w
		}
	}
	return skipped, wake
}

// claimAndStart claims req and starts the occurrence in its own goroutine.
func (s *Scheduler) claimAndStart(ctx context.Context, cb *cronBackend, t *task, req backends.ClaimRequest) bool {
	if !s.addRuns(1) {
		return false
	}
	req.Owner, req.Host = newOwner(), s.cfg.Host
	s.supervise(req.Owner)
	sent := time.Now()
	occ, err := cb.ClaimOccurrence(ctx, req)
	if err != nil {
		s.release(req.Owner)
		s.runs.Done()
		s.claimFailed(ctx, t, req, err)
		return false
	}
	s.start(cb, t, occ, sent)
	return true
}

// claimItem is one claim of a batch: its task and request, and the due
// task it claims (zero for a retry).
type claimItem struct {
	t   *task
	req backends.ClaimRequest
	due backends.DueTask
}

// claimAndStartMany claims items in one ClaimOccurrences call and starts
// each occurrence claimed in its own goroutine, without waiting for any
// other store write. It returns the items whose claim found a live run of
// their task (ErrHeld).
func (s *Scheduler) claimAndStartMany(ctx context.Context, cb *cronBackend, items []claimItem) []claimItem {
	if len(items) == 0 || !s.addRuns(len(items)) {
		return nil
	}
	reqs := make([]backends.ClaimRequest, len(items))
	for i, it := range items {
		reqs[i] = it.req
		reqs[i].Owner, reqs[i].Host = newOwner(), s.cfg.Host
		s.supervise(reqs[i].Owner)
	}
	sent := time.Now()
	res, err := cb.ClaimOccurrences(ctx, reqs)
	if err != nil {
		// A claim made anyway is not this scheduler's to supervise: it is
		// reaped when its lease runs out.
		for _, r := range reqs {
			s.release(r.Owner)
		}
		s.runs.Add(-len(items))
		if ctx.Err() == nil {
			s.log.Warn("claim failed", "claims", len(items), "error", err)
		}
		return nil
	}
	s.log.Debug("claimed due occurrences", "backend", cb.Name(), "claims", len(items), "took", time.Since(sent))
	var held []claimItem
	for i, r := range res {
		if r.Err != nil {
			s.release(reqs[i].Owner)
			s.runs.Done()
			if errors.Is(r.Err, backends.ErrHeld) {
				held = append(held, items[i])
			} else {
				s.claimFailed(ctx, items[i].t, reqs[i], r.Err)
			}
			continue
		}
		s.start(cb, items[i].t, r.Occurrence, sent)
	}
	return held
}

// addRuns counts n runs about to be claimed, unless Shutdown began.
func (s *Scheduler) addRuns(n int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.runs.Add(n) // under mu, so that Shutdown's Wait never races an Add
	return true
}

// refused reports whether a claim was refused in the ordinary course:
// another host (or pass) claimed first, or the task was paused after it
// was read.
func refused(err error) bool {
	return errors.Is(err, backends.ErrConflict) || errors.Is(err, backends.ErrPaused)
}

// claimFailed logs a claim that failed for another reason than another
// host (or pass) having claimed it first, the task being paused (the
// backend refuses those in the claim; DueTasks no longer lists it) or,
// with overlap forbid, a run of the task being live (the next pass
// decides again).
func (s *Scheduler) claimFailed(ctx context.Context, t *task, req backends.ClaimRequest, err error) {
	if errors.Is(err, backends.ErrPaused) {
		s.log.Debug("not claimed: the task is paused", "task", t.name, "scheduled_at", req.ScheduledAt, "attempt", req.Attempt)
		return
	}
	if errors.Is(err, backends.ErrHeld) {
		s.log.Debug("not claimed: a run of the task is live", "task", t.name, "scheduled_at", req.ScheduledAt, "attempt", req.Attempt)
		return
	}
	if !errors.Is(err, backends.ErrConflict) && ctx.Err() == nil {
		s.log.Warn("claim failed", "task", t.name, "scheduled_at", req.ScheduledAt, "attempt", req.Attempt, "error", err)
	}
}

// start runs a claimed occurrence in its own goroutine; sent is when its
// claim was sent (its run lease started no earlier). addRuns counted it.
func (s *Scheduler) start(cb *cronBackend, t *task, occ backends.Occurrence, sent time.Time) {
	s.starting.Add(1)
	go func() {
		defer s.runs.Done()
		defer s.Wake()
		defer s.release(occ.Owner)
		pw := &prefixer{mu: &s.outMu, w: s.cfg.Stdout, prefix: []byte("[" + t.name + " " + occ.RunID + "] ")}
		s.execute(s.runCtx, cb, t, occ, sent, pw, pw, func() { s.starting.Add(-1) })
		pw.Close()
	}()
}

// Shutdown stops claiming and waits for running occurrences until ctx
// ends; then it stops them (TERM, then KILL after kill_grace) and waits for
// them to be recorded.
func (s *Scheduler) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	s.Wake()
	done := make(chan struct{})
	go func() { s.runs.Wait(); close(done) }()
	select {
	case <-done:
		s.cancelRuns()
		return nil
	case <-ctx.Done():
	}
	s.log.Warn("shutdown grace over: stopping running commands")
	s.cancelRuns()
	<-done
	return fmt.Errorf("running commands stopped at shutdown: %w", ctx.Err())
}

func newOwner() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// RunManual runs task now in the caller (`coordd cron run`): the run is
// recorded as manual; overlap and the semaphore apply. It returns the exit
// code: the child's, 75 when overlap forbids it (recorded as skipped),
// 122 when the run lease was lost, 126/127 when the command cannot start.
func (s *Scheduler) RunManual(ctx context.Context, b backends.Backend, name string, stdout, stderr io.Writer) (int, error) {
	cb, err := asCron(b)
	if err != nil {
		return exitCoorddFailed, err
	}
	states, err := cb.ObserveCrons(ctx, []string{name})
	if err != nil {
		return exitCoorddFailed, err
	}
	st := states[name]
	if st == nil {
		return exitCoorddFailed, notAppliedError{task: name, backend: b.Name()}
	}
	t, err := parseTask(name, st.Def)
	if err != nil {
		return exitCoorddFailed, err
	}
	// With overlap forbid the claim is refused while any run of the task
	// is live, checked in the claim itself: an operator's run does not
	// wait (exit 75), whether that run is known to run or not.
	req := backends.ClaimRequest{Task: name, Attempt: 1, Owner: newOwner(), Host: s.cfg.Host, Lease: t.def.RunLease, Manual: true,
		Exclusive: t.def.Overlap != spec.OverlapAllow}
	s.supervise(req.Owner)
	defer s.release(req.Owner)
	sent := time.Now()
	occ, err := cb.ClaimOccurrence(ctx, req)
	if errors.Is(err, backends.ErrHeld) {
		req.Skip, req.Exclusive = overlapReason, false
		if _, err := cb.ClaimOccurrence(ctx, req); err != nil {
			return exitCoorddFailed, err
		}
		return exitNotAcquired, nil
	}
	if err != nil {
		return exitCoorddFailed, err
	}
	res, code := s.execute(ctx, cb, t, occ, sent, stdout, stderr, nil)
	if res.Status == statusNotRecorded {
		return exitCoorddFailed, errors.New(res.Error)
	}
	return code, nil
}

// notAppliedError is RunManual's error for a task the backend does not
// hold. It matches backends.ErrNotFound without appending its text: "not
// applied" says it already, once.
type notAppliedError struct{ task, backend string }

func (e notAppliedError) Error() string {
	return fmt.Sprintf("cron task %q is not applied on backend %q; run coordd apply", e.task, e.backend)
}

func (e notAppliedError) Unwrap() error { return backends.ErrNotFound }

// scheduledAtLayout is the format of COORDD_SCHEDULED_AT: RFC 3339 in UTC
// with exactly six fractional digits. Every backend keeps scheduled times
// to the microsecond, so the value is exact and has one width everywhere
// (a manual run's time comes from the backend's clock: milliseconds on
// SQLite, microseconds on MySQL and Redis).
const scheduledAtLayout = "2006-01-02T15:04:05.000000Z07:00"

// env is the child's environment for occ. With a semaphore, slot is the
// slot it holds: COORDD_FENCING_TOKEN is then the slot's number, the one a
// resource guarded by the semaphore compares with those of `sem run`
// holders, and the task's own number is COORDD_TASK_FENCING_TOKEN.
func env(t *task, occ backends.Occurrence, slot *semaphore.Lease) []string {
	keys := make([]string, 0, len(t.def.Env))
	for k := range t.def.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]string, 0, len(keys)+8)
	for _, k := range keys {
		out = append(out, k+"="+t.def.Env[k])
	}
	taskFencing := strconv.FormatInt(occ.Fencing, 10)
	out = append(out,
		child.VarTask+"="+t.name,
		child.VarScheduledAt+"="+occ.ScheduledAt.UTC().Format(scheduledAtLayout),
		child.VarAttempt+"="+strconv.Itoa(occ.Attempt),
		child.VarRunID+"="+occ.RunID,
		child.VarTaskFencingToken+"="+taskFencing,
	)
	if slot == nil {
		return append(out, child.VarFencingToken+"="+taskFencing)
	}
	return append(out,
		child.VarSemaphore+"="+t.def.Semaphore,
		child.VarSlot+"="+strconv.Itoa(slot.Slot),
		child.VarFencingToken+"="+strconv.FormatInt(slot.Fencing, 10),
	)
}
