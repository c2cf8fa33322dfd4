package scheduler

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/internal/child"
	"github.com/coordd/coordd/internal/retry"
	"github.com/coordd/coordd/internal/tailbuf"
	"github.com/coordd/coordd/semaphore"
	"github.com/hashicorp/go-hclog"
)

const (
	exitNotAcquired  = child.ExitNotAcquired
	exitCoorddFailed = child.ExitCoorddFailed
	// statusNotRecorded marks a result that could not be recorded.
	statusNotRecorded = "not-recorded"
)

// runLease keeps one occurrence's run lease alive.
type runLease struct {
	// ext renews the lease (ExtendOccurrences, coalesced with the other
	// runs' renewals).
	ext   func(ctx context.Context, occ backends.Occurrence, lease time.Duration) (time.Time, error)
	occ   backends.Occurrence
	lease time.Duration

	mu       sync.Mutex
	lastSent time.Time // send time of the last successful claim/extend (monotonic)
	proc     *child.Process
	lost     chan struct{}
	lostOnce sync.Once
}

func (l *runLease) margin() time.Duration { return semaphore.Margin(l.lease) }

// trusted reports whether the lease is still inside its trust window.
func (l *runLease) trusted() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return time.Now().Before(l.lastSent.Add(l.lease - l.margin()))
}

func (l *runLease) setProc(p *child.Process) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.proc = p
	return l.lastSent
}

// isLost reports whether an extend found the occurrence taken away.
func (l *runLease) isLost() bool {
	select {
	case <-l.lost:
		return true
	default:
		return false
	}
}

// trustLeft is how long the lease stays inside its trust window.
func (l *runLease) trustLeft() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return time.Until(l.lastSent.Add(l.lease - l.margin()))
}

// extend renews the lease once, bounded by d. On success the child, if
// started, moves its deadline with it.
func (l *runLease) extend(ctx context.Context, d time.Duration) error {
	sent := time.Now()
	ectx, cancel := context.WithTimeout(ctx, d)
	_, err := l.ext(ectx, l.occ, l.lease)
	cancel()
	switch {
	case err == nil:
		l.mu.Lock()
		l.lastSent = sent
		p := l.proc
		l.mu.Unlock()
		if p != nil {
			p.Renewed(sent)
		}
	case errors.Is(err, backends.ErrLost):
		l.lostOnce.Do(func() { close(l.lost) })
	}
	return err
}

// keep extends the lease every lease/3 until ctx ends or the lease is lost.
func (l *runLease) keep(ctx context.Context) {
	every := l.lease / 3
	retry := max(l.lease/10, 50*time.Millisecond)
	wait := every
	for {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		err := l.extend(ctx, every)
		switch {
		case err == nil:
			wait = every
		case errors.Is(err, backends.ErrLost), ctx.Err() != nil:
			return
		default:
			wait = retry // the child's own deadline stops it if this goes on
		}
	}
}

// execute runs a claimed occurrence to the end and records the result. It
// returns the result and the exit code for `cron run`.
//
// started, if not nil, is called once when the command started or the run
// ended without starting it.
func (s *Scheduler) execute(ctx context.Context, cb *cronBackend, t *task, occ backends.Occurrence, sent time.Time, stdout, stderr io.Writer, started func()) (backends.RunResult, int) {
	r := s.newCronRun(ctx, cb, t, occ, sent, started)
	defer r.stopRenewals()
	if t.def.Push != nil {
		res := r.pushJob()
		if stdout != nil {
			_, _ = stdout.Write(res.Output)
		}
		return r.record(res)
	}
	if res, ok := r.acquireSlot(); !ok {
		return r.record(res)
	}
	if res, ok := r.takePermit(); !ok {
		return r.record(res)
	}
	if res, ok := r.renewBeforeStart(); !ok {
		return r.record(res)
	}
	spec, out := r.childSpec(stdout, stderr)
	p, err := r.startChild(spec)
	if err != nil {
		code := child.ExitCode(child.Result{StartErr: err})
		return r.record(backends.RunResult{Status: backends.RunFailed, ExitCode: code, Error: err.Error()})
	}
	stopped := r.supervise(p, spec.Grace)
	return r.record(r.classify(p.Wait(), stopped, out))
}

// cronRun is one claimed occurrence on its way from the claim to its
// recorded result. Its phases, in order: acquireSlot (the task's
// semaphore, if any), renewBeforeStart, childSpec and startChild,
// supervise, classify and record. Every path ends in record, which also
// ends the renewals of the run lease and of the slot.
type cronRun struct {
	s       *Scheduler
	ctx     context.Context
	cb      *cronBackend
	t       *task
	occ     backends.Occurrence
	log     hclog.Logger
	started func() // nil, or called once by markStarted
	once    sync.Once

	// The run lease, renewed in the background until stopKeep.
	rl       *runLease
	stopKeep context.CancelFunc

	// The semaphore slot, once taken, and the end of its renewals.
	slot     *semaphore.Lease
	stopSlot func()
	// The command's time limit: the task's timeout, or the semaphore's
	// max_hold when that is shorter, so that a hung command cannot keep
	// the slot renewed forever (the bound `sem run` holders have too).
	// timedOut is the error recorded when the limit stops it.
	timeout  time.Duration
	timedOut string

	// replaced is closed when overlap replace stops the run (for the
	// next scheduled time); replacedWhy is the error then recorded.
	replaced    chan struct{}
	replaceOnce sync.Once
	replacedWhy string
}

// newCronRun starts renewing the run lease of occ, claimed at sent.
func (s *Scheduler) newCronRun(ctx context.Context, cb *cronBackend, t *task, occ backends.Occurrence, sent time.Time, started func()) *cronRun {
	def := t.def
	r := &cronRun{
		s: s, ctx: ctx, cb: cb, t: t, occ: occ, started: started,
		log:      s.log.With("task", t.name, "scheduled_at", occ.ScheduledAt.UTC().Format(time.RFC3339Nano), "attempt", occ.Attempt, "run_id", occ.RunID),
		stopSlot: func() {},
		timeout:  def.Timeout,
		timedOut: fmt.Sprintf("timed out after %s", def.Timeout),
		replaced: make(chan struct{}),
	}
	s.onReplace(occ.Owner, func(why string) {
		r.replaceOnce.Do(func() {
			r.replacedWhy = why
			close(r.replaced)
		})
	})
	ext := func(ctx context.Context, occ backends.Occurrence, lease time.Duration) (time.Time, error) {
		return s.extendOccurrence(ctx, cb, occ, lease)
	}
	r.rl = &runLease{ext: ext, occ: occ, lease: def.RunLease, lastSent: sent, lost: make(chan struct{})}
	kctx, stopKeep := context.WithCancel(context.WithoutCancel(ctx))
	r.stopKeep = stopKeep
	go r.rl.keep(kctx)
	return r
}

// isReplaced reports whether overlap replace stopped the run.
func (r *cronRun) isReplaced() bool {
	select {
	case <-r.replaced:
		return true
	default:
		return false
	}
}

// replacedResult is the result of a run that overlap replace stopped.
func (r *cronRun) replacedResult(code int) backends.RunResult {
	return backends.RunResult{Status: backends.RunReplaced, ExitCode: code, Error: r.replacedWhy}
}

// markStarted calls started, once.
func (r *cronRun) markStarted() {
	if r.started != nil {
		r.once.Do(r.started)
	}
}

// stopRenewals ends the renewals of the slot and of the run lease (record
// has done so already on every path; this is the backstop).
func (r *cronRun) stopRenewals() {
	r.stopSlot()
	r.stopKeep()
}

// acquireSlot takes the task's semaphore slot, if it names a semaphore,
// before the command starts, while the run lease is renewed. A wait is cut
// short when the run lease is lost. It reports false with the result to
// record when no slot was taken.
func (r *cronRun) acquireSlot() (backends.RunResult, bool) {
	def := r.t.def
	if def.Semaphore == "" {
		return backends.RunResult{}, true
	}
	if r.s.cfg.Semaphore == nil {
		return backends.RunResult{Status: backends.RunFailed, ExitCode: exitCoorddFailed, Error: "no semaphore resolver"}, false
	}
	cl, cfg, err := r.s.cfg.Semaphore(def.Semaphore)
	if err != nil {
		return backends.RunResult{Status: backends.RunFailed, ExitCode: exitCoorddFailed, Error: fmt.Sprintf("semaphore %q: %v", def.Semaphore, err)}, false
	}
	actx, cancel := context.WithCancel(r.ctx)
	go func() {
		select {
		case <-r.rl.lost:
			cancel()
		case <-r.replaced:
			cancel()
		case <-actx.Done():
		}
	}()
	acquired, err := cl.Acquire(actx, def.Semaphore, semaphore.AcquireOptions{Lease: cfg.Lease})
	cancel()
	if err == nil && r.isReplaced() {
		releaseSlot(context.WithoutCancel(r.ctx), r.log, acquired)
		return r.replacedResult(exitNotAcquired), false
	}
	if err != nil && r.isReplaced() {
		return r.replacedResult(exitNotAcquired), false
	}
	if err != nil {
		select {
		case <-r.rl.lost:
			return backends.RunResult{Status: backends.RunLost, ExitCode: child.ExitLeaseLost, Error: "run lease lost while waiting for the semaphore"}, false
		default:
		}
		return backends.RunResult{Status: backends.RunFailed, ExitCode: exitNotAcquired, Error: fmt.Sprintf("semaphore %q: %v", def.Semaphore, err)}, false
	}
	r.slot = acquired
	if cfg.MaxHold > 0 && (r.timeout == 0 || cfg.MaxHold < r.timeout) {
		r.timeout, r.timedOut = cfg.MaxHold, fmt.Sprintf("held semaphore %q longer than its max_hold %s", def.Semaphore, cfg.MaxHold)
	}
	sctx, cancelSlot := context.WithCancel(context.WithoutCancel(r.ctx))
	r.stopSlot = cancelSlot
	go r.slot.KeepAlive(sctx, nil)
	return backends.RunResult{}, true
}

// PushOnceKey is the once key of the push of a task's occurrence
// scheduled at at: every attempt of the time shares it, so a retry after
// a crash between the push and its record pushes nothing.
func PushOnceKey(task string, at time.Time) string {
	return fmt.Sprintf("cron/%s/%d", task, at.UnixMicro())
}

// pushJob runs a task that pushes a job instead of a command: one push
// once (Queues.PushOnce) per scheduled time, whatever the attempt.
func (r *cronRun) pushJob() backends.RunResult {
	p := r.t.def.Push
	r.log.Info("starting")
	if o := r.s.cfg.Observer; o != nil {
		o.CronStarted(r.t.name, r.occ.ScheduledAt, r.occ.Attempt, time.Now())
	}
	r.markStarted()
	fail := func(format string, args ...any) backends.RunResult {
		return backends.RunResult{Status: backends.RunFailed, ExitCode: 1, Error: fmt.Sprintf(format, args...)}
	}
	if r.s.cfg.Queue == nil {
		return fail("no queue resolver")
	}
	q, err := r.s.cfg.Queue(p.Queue)
	if err != nil {
		return fail("queue %q: %v", p.Queue, err)
	}
	at := r.occ.ScheduledAt
	req := backends.PushRequest{Payload: []byte(p.Expand(p.Payload, r.t.name, at)), Key: p.Expand(p.Key, r.t.name, at)}
	pctx, cancel := context.WithTimeout(r.ctx, finishTimeout)
	defer cancel()
	j, pushed, err := q.PushOnce(pctx, p.Queue, PushOnceKey(r.t.name, at), req)
	if err != nil {
		return fail("%v", err)
	}
	out := fmt.Sprintf("pushed job %d to queue %s\n", j.ID, p.Queue)
	if !pushed {
		out = fmt.Sprintf("job %d of queue %s stands for this time (pushed by an earlier attempt, or the pending job of its key)\n", j.ID, p.Queue)
	}
	return backends.RunResult{Status: backends.RunSucceeded, Output: []byte(out)}
}

// takePermit waits for a permit of the task's rate limit, if it names one,
// after the slot (so that the command starts right after its permit, and
// runs released by one semaphore at once do not start at once), while the
// run lease and the slot are renewed. A wait is cut short when the run
// lease is lost. It reports false with the result to record when no
// permit was taken.
func (r *cronRun) takePermit() (backends.RunResult, bool) {
	def := r.t.def
	if def.RateLimit == "" {
		return backends.RunResult{}, true
	}
	if r.s.cfg.RateLimit == nil {
		return backends.RunResult{Status: backends.RunFailed, ExitCode: exitCoorddFailed, Error: "no rate limit resolver"}, false
	}
	cl, err := r.s.cfg.RateLimit(def.RateLimit)
	if err != nil {
		return backends.RunResult{Status: backends.RunFailed, ExitCode: exitCoorddFailed, Error: fmt.Sprintf("rate limit %q: %v", def.RateLimit, err)}, false
	}
	wctx, cancel := context.WithCancel(r.ctx)
	go func() {
		select {
		case <-r.rl.lost:
			cancel()
		case <-r.replaced:
			cancel()
		case <-wctx.Done():
		}
	}()
	_, err = cl.Wait(wctx, def.RateLimit, "", 0)
	cancel()
	if r.isReplaced() {
		return r.replacedResult(exitNotAcquired), false
	}
	if err != nil {
		select {
		case <-r.rl.lost:
			return backends.RunResult{Status: backends.RunLost, ExitCode: child.ExitLeaseLost, Error: "run lease lost while waiting for a permit"}, false
		default:
		}
		return backends.RunResult{Status: backends.RunFailed, ExitCode: exitNotAcquired, Error: fmt.Sprintf("rate limit %q: %v", def.RateLimit, err)}, false
	}
	return backends.RunResult{}, true
}

// renewBeforeStart makes sure the command starts with a trusted run lease.
// A claim (or a semaphore wait) that hung in a stalled backend leaves the
// command little of its lease: the supervisor would stop it at once.
// Renew first, so that it starts with a fresh lease. It reports false with
// the result to record when the lease is lost or no longer trusted.
func (r *cronRun) renewBeforeStart() (backends.RunResult, bool) {
	if left := r.rl.trustLeft(); left < r.t.def.RunLease/2 && left > 0 {
		if err := r.rl.extend(r.ctx, left); err != nil {
			r.log.Debug("renewing the run lease before the start failed", "error", err)
		}
	}
	if !r.rl.trusted() || r.rl.isLost() {
		return backends.RunResult{Status: backends.RunLost, ExitCode: child.ExitLeaseLost, Error: "run lease lost before the start"}, false
	}
	return backends.RunResult{}, true
}

// childSpec builds the command's child.Spec, with its output copied to
// stdout and stderr and the end of it kept in out for the record.
func (r *cronRun) childSpec(stdout, stderr io.Writer) (child.Spec, *tailbuf.Buffer) {
	def := r.t.def
	out := tailbuf.New(maxOutput)
	spec := child.Spec{
		Dir:    def.Workdir,
		Env:    env(r.t, r.occ, r.slot),
		Stdout: io.MultiWriter(stdout, out),
		Stderr: io.MultiWriter(stderr, out),
		Lease:  def.RunLease, Margin: r.rl.margin(), Grace: min(def.RunLease/3, 10*time.Second),
		Timeout: r.timeout, KillGrace: max(def.KillGrace, time.Millisecond),
		// Set by coordd's main; empty (no guard) in other programs. One
		// guard process starts every command: a shim per command would
		// cost a process start per run, which a burst of runs cannot
		// afford (the shim is for a command too large for the guard).
		Guard: child.DefaultShim, Shim: child.DefaultShim,
	}
	if stdout == stderr {
		// One writer, hence one pipe (a scheduled run's lines all go to
		// the daemon's log): the lines keep their order, and a run costs
		// one pipe and one copy less.
		spec.Stderr = spec.Stdout
	}
	if f := r.s.cfg.ChildEnvUnset; f != nil {
		spec.Unset = f()
	}
	if len(def.Command.Argv) > 0 {
		spec.Argv = def.Command.Argv
	} else {
		spec.Shell = def.Command.Shell
	}
	return spec, out
}

// startChild starts the command, under the run lease's lock so that every
// renewal from now on reaches the child.
func (r *cronRun) startChild(spec child.Spec) (*child.Process, error) {
	rl := r.rl
	// AcquiredAt is the send time of the last renewal; renewals from now on
	// reach the child.
	rl.mu.Lock()
	defer rl.mu.Unlock()
	spec.AcquiredAt = rl.lastSent
	r.log.Info("starting")
	if o := r.s.cfg.Observer; o != nil {
		o.CronStarted(r.t.name, r.occ.ScheduledAt, r.occ.Attempt, time.Now())
	}
	p, err := child.Start(r.ctx, spec)
	r.markStarted()
	if err == nil {
		rl.proc = p
		// A renewal between reading lastSent and setting proc.
		p.Renewed(rl.lastSent)
	}
	return p, err
}

// supervise waits for the command to end. When the run lease or the
// semaphore slot is lost meanwhile, it stops the command: SIGTERM, then
// SIGKILL after grace. It reports whether it stopped the command.
func (r *cronRun) supervise(p *child.Process, grace time.Duration) bool {
	stopped := false
	var slotLost <-chan struct{}
	if r.slot != nil {
		slotLost = r.slot.Lost()
	}
	runLost := r.rl.lost
	stop := func(why string, grace time.Duration) {
		if stopped {
			return
		}
		stopped = true
		r.log.Warn("stopping the command", "reason", why)
		_ = p.Signal(syscall.SIGTERM)
		go func() {
			select {
			case <-p.Done():
			case <-time.After(grace):
				_ = p.Signal(syscall.SIGKILL)
			}
		}()
	}
	replaced := r.replaced
	for {
		select {
		case <-replaced:
			replaced = nil
			// The task's kill_grace, as a timeout's stop: the run's
			// lease is still good.
			stop(r.replacedWhy, max(r.t.def.KillGrace, time.Millisecond))
		case <-runLost:
			runLost = nil
			stop("run lease lost", grace)
		case <-slotLost:
			slotLost = nil
			stop("semaphore slot lost", grace)
		case <-p.Done():
			return stopped
		}
	}
}

// classify turns the command's end into the result to record; stopped
// says whether supervise stopped it for a lost lease or slot.
func (r *cronRun) classify(res child.Result, stopped bool, out *tailbuf.Buffer) backends.RunResult {
	rr := backends.RunResult{ExitCode: child.ExitCode(res), Output: out.Bytes()}
	switch {
	case r.isReplaced() && stopped:
		rr.Status, rr.Error = backends.RunReplaced, r.replacedWhy
	case stopped || res.LeaseLost:
		rr.Status, rr.Error, rr.ExitCode = backends.RunLost, "lease lost: the command was stopped", child.ExitLeaseLost
	case res.TimedOut:
		rr.Status, rr.Error = backends.RunTimedOut, r.timedOut
	case res.Canceled:
		rr.Status, rr.Error = backends.RunLost, "stopped: coordd shut down or was interrupted"
	case rr.ExitCode == 0:
		rr.Status = backends.RunSucceeded
	default:
		rr.Status = backends.RunFailed
		if res.Signaled {
			rr.Error = fmt.Sprintf("killed by signal %v", res.Signal)
		} else {
			rr.Error = fmt.Sprintf("exit status %d", rr.ExitCode)
		}
	}
	return rr
}

// record ends the run: it frees the slot, records res and stops renewing
// the run lease. It returns the result as recorded (statusNotRecorded when
// recording failed) and res's exit code, the exit code for `cron run`.
func (r *cronRun) record(res backends.RunResult) (backends.RunResult, int) {
	ctx := context.WithoutCancel(r.ctx)
	code := res.ExitCode
	r.markStarted()
	// The command ended (or never started): the run no longer
	// overlaps anything, though it stays live until recorded.
	r.s.ended(r.occ.Owner)
	// The slot goes first, so that the next holder need not wait for
	// the record; the run lease is renewed meanwhile, and until the
	// result is recorded (the record may wait for a burst's starts).
	if r.slot != nil {
		r.stopSlot()
		releaseSlot(ctx, r.log, r.slot)
	}
	// A result that is not recorded leaves the run "running" until its
	// lease expires (renewals stop below) and then counts it as a lost
	// host: retry a blip.
	err := retry.Final(ctx, retry.Budget, func(ctx context.Context) error {
		fctx, cancel := context.WithTimeout(ctx, finishTimeout)
		defer cancel()
		return r.s.finishOccurrence(fctx, r.cb, r.occ, res)
	}, func(err error, next time.Duration) {
		if next > 0 {
			r.log.Warn("recording the result failed; retrying", "status", res.Status, "retry_in", next, "error", err)
		}
	})
	r.stopKeep()
	if err != nil {
		r.log.Warn("recording the result failed", "status", res.Status, "error", err)
		if !errors.Is(err, backends.ErrLost) {
			res.Status, res.Error = statusNotRecorded, err.Error()
		}
	}
	// A run that did not succeed is what an operator looks for: WARN.
	level := hclog.Warn
	if res.Status == backends.RunSucceeded {
		level = hclog.Info
	}
	r.log.Log(level, "finished", "status", res.Status, "exit_code", res.ExitCode, "error", res.Error)
	if o := r.s.cfg.Observer; o != nil {
		o.CronFinished(r.t.name, res.Status)
	}
	return res, code
}

// releaseSlot frees a run's semaphore slot, retrying a failure for
// retry.Budget: a slot left taken by a blip stays taken for a whole lease.
func releaseSlot(ctx context.Context, log hclog.Logger, slot *semaphore.Lease) {
	err := retry.Final(ctx, retry.Budget, func(ctx context.Context) error {
		rctx, cancel := context.WithTimeout(ctx, finishTimeout)
		defer cancel()
		return slot.Release(rctx)
	}, func(err error, next time.Duration) {
		if next > 0 {
			log.Warn("releasing the semaphore slot failed; retrying", "semaphore", slot.Name, "retry_in", next, "error", err)
		}
	})
	switch {
	case err == nil:
	case errors.Is(err, backends.ErrLost):
		log.Warn("releasing the semaphore slot: it was already lost", "semaphore", slot.Name, "error", err)
	default:
		log.Error("releasing the semaphore slot failed; it stays taken until its lease expires", "semaphore", slot.Name, "error", err)
	}
}
