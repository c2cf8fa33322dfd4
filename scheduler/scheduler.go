package scheduler

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/leadership"
	"github.com/coordd/coordd/ratelimit"
	"github.com/coordd/coordd/semaphore"
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
	// RateLimit resolves a task's rate limit to a client. Nil: tasks
	// with a rate limit fail to start.
	RateLimit func(name string) (*ratelimit.Client, error)
	// Queue resolves the queue of a task that pushes a job to the store
	// that holds it. Nil: such tasks fail.
	Queue func(name string) (backends.Queues, error)
	Log   hclog.Logger
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
	// After lists the cron tasks of backend bn that run after other tasks
	// (the local spec's; their after lists are read from the applied
	// definitions), and Notices is the cluster's record in which their
	// triggers are kept. Nil: no task is triggered by another (coordd
	// cron run).
	After   func(bn string) []string
	Notices backends.Notices
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
	// replace holds, by owner token, how to stop a run this scheduler
	// supervises for overlap replace (see cronRun.replaced), under mu.
	replace map[string]func(reason string)

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
	// afterSeen caches, per afterDeclared id, when the leader first saw a
	// task's after list. Only Run's goroutine uses it.
	afterSeen map[string]time.Time
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
		own: map[string]bool{}, replace: map[string]func(string){}, waitingFor: map[string]string{},
		afterSeen: map[string]time.Time{}}
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
	delete(s.replace, owner)
}

// onReplace registers how to stop owner's run for overlap replace.
func (s *Scheduler) onReplace(owner string, stop func(reason string)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.own[owner]; ok {
		s.replace[owner] = stop
	}
}

// replaceRuns asks each of runs (this scheduler's, their commands not
// ended) to stop for overlap replace; a run it no longer supervises is
// left alone.
func (s *Scheduler) replaceRuns(runs []backends.Occurrence, reason string) {
	s.mu.Lock()
	var stops []func(string)
	for _, o := range runs {
		if stop := s.replace[o.Owner]; stop != nil {
			stops = append(stops, stop)
		}
	}
	s.mu.Unlock()
	for _, stop := range stops {
		stop(reason)
	}
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
