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
	// ext renews the lease (ExtendOccurrence, coalesced with the other
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
	def := t.def
	var startedOnce sync.Once
	markStarted := func() {
		if started != nil {
			startedOnce.Do(started)
		}
	}
	log := s.log.With("task", t.name, "scheduled_at", occ.ScheduledAt.UTC().Format(time.RFC3339Nano), "attempt", occ.Attempt, "run_id", occ.RunID)
	ext := func(ctx context.Context, occ backends.Occurrence, lease time.Duration) (time.Time, error) {
		return s.extendOccurrence(ctx, cb, occ, lease)
	}
	rl := &runLease{ext: ext, occ: occ, lease: def.RunLease, lastSent: sent, lost: make(chan struct{})}
	kctx, stopKeep := context.WithCancel(context.WithoutCancel(ctx))
	defer stopKeep()
	go rl.keep(kctx)

	// The semaphore slot, once taken, and the end of its renewals.
	var slot *semaphore.Lease
	stopSlot := func() {}
	// The command's time limit: the task's timeout, or the semaphore's
	// max_hold when that is shorter, so that a hung command cannot keep
	// the slot renewed forever (the bound `sem run` holders have too).
	timeout, timedOut := def.Timeout, fmt.Sprintf("timed out after %s", def.Timeout)

	finish := func(res backends.RunResult, code int) (backends.RunResult, int) {
		markStarted()
		// The command ended (or never started): the run no longer
		// overlaps anything, though it stays live until recorded.
		s.ended(occ.Owner)
		// The slot goes first, so that the next holder need not wait for
		// the record; the run lease is renewed meanwhile, and until the
		// result is recorded (the record may wait for a burst's starts).
		if slot != nil {
			stopSlot()
			releaseSlot(context.WithoutCancel(ctx), log, slot)
		}
		// A result that is not recorded leaves the run "running" until its
		// lease expires (renewals stop below) and then counts it as a lost
		// host: retry a blip.
		err := retry.Final(context.WithoutCancel(ctx), retry.Budget, func(ctx context.Context) error {
			fctx, cancel := context.WithTimeout(ctx, finishTimeout)
			defer cancel()
			return s.finishOccurrence(fctx, cb, occ, res)
		}, func(err error, next time.Duration) {
			if next > 0 {
				log.Warn("recording the result failed; retrying", "status", res.Status, "retry_in", next, "error", err)
			}
		})
		stopKeep()
		if err != nil {
			log.Warn("recording the result failed", "status", res.Status, "error", err)
			if !errors.Is(err, backends.ErrLost) {
				res.Status, res.Error = statusNotRecorded, err.Error()
			}
		}
		log.Info("finished", "status", res.Status, "exit_code", res.ExitCode, "error", res.Error)
		if o := s.cfg.Observer; o != nil {
			o.CronFinished(t.name, res.Status)
		}
		return res, code
	}

	// The semaphore slot is taken before the command starts, while the run
	// lease is renewed.
	if def.Semaphore != "" {
		if s.cfg.Semaphore == nil {
			return finish(backends.RunResult{Status: backends.RunFailed, ExitCode: exitCoorddFailed, Error: "no semaphore resolver"}, exitCoorddFailed)
		}
		cl, cfg, err := s.cfg.Semaphore(def.Semaphore)
		if err != nil {
			return finish(backends.RunResult{Status: backends.RunFailed, ExitCode: exitCoorddFailed, Error: fmt.Sprintf("semaphore %q: %v", def.Semaphore, err)}, exitCoorddFailed)
		}
		actx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-rl.lost:
				cancel()
			case <-actx.Done():
			}
		}()
		acquired, err := cl.Acquire(actx, def.Semaphore, semaphore.AcquireOptions{Lease: cfg.Lease})
		cancel()
		if err != nil {
			select {
			case <-rl.lost:
				return finish(backends.RunResult{Status: backends.RunLost, ExitCode: child.ExitLeaseLost, Error: "run lease lost while waiting for the semaphore"}, child.ExitLeaseLost)
			default:
			}
			return finish(backends.RunResult{Status: backends.RunFailed, ExitCode: exitNotAcquired, Error: fmt.Sprintf("semaphore %q: %v", def.Semaphore, err)}, exitNotAcquired)
		}
		slot = acquired
		if cfg.MaxHold > 0 && (timeout == 0 || cfg.MaxHold < timeout) {
			timeout, timedOut = cfg.MaxHold, fmt.Sprintf("held semaphore %q longer than its max_hold %s", def.Semaphore, cfg.MaxHold)
		}
		sctx, cancelSlot := context.WithCancel(context.WithoutCancel(ctx))
		defer cancelSlot()
		stopSlot = cancelSlot
		go slot.KeepAlive(sctx, nil)
	}
	// A claim (or a semaphore wait) that hung in a stalled backend leaves
	// the command little of its lease: the supervisor would stop it at
	// once. Renew first, so that it starts with a fresh lease.
	if left := rl.trustLeft(); left < def.RunLease/2 && left > 0 {
		if err := rl.extend(ctx, left); err != nil {
			log.Debug("renewing the run lease before the start failed", "error", err)
		}
	}
	if !rl.trusted() || rl.isLost() {
		return finish(backends.RunResult{Status: backends.RunLost, ExitCode: child.ExitLeaseLost, Error: "run lease lost before the start"}, child.ExitLeaseLost)
	}

	out := &tail{}
	spec := child.Spec{
		Dir:    def.Workdir,
		Env:    env(t, occ, slot),
		Stdout: io.MultiWriter(stdout, out),
		Stderr: io.MultiWriter(stderr, out),
		Lease:  def.RunLease, Margin: rl.margin(), Grace: min(def.RunLease/3, 10*time.Second),
		Timeout: timeout, KillGrace: max(def.KillGrace, time.Millisecond),
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
	if f := s.cfg.ChildEnvUnset; f != nil {
		spec.Unset = f()
	}
	if len(def.Command.Argv) > 0 {
		spec.Argv = def.Command.Argv
	} else {
		spec.Shell = def.Command.Shell
	}
	// AcquiredAt is the send time of the last renewal; renewals from now on
	// reach the child.
	rl.mu.Lock()
	spec.AcquiredAt = rl.lastSent
	log.Info("starting")
	if o := s.cfg.Observer; o != nil {
		o.CronStarted(t.name, occ.ScheduledAt, occ.Attempt, time.Now())
	}
	p, err := child.Start(ctx, spec)
	markStarted()
	if err == nil {
		rl.proc = p
		// A renewal between reading lastSent and setting proc.
		p.Renewed(rl.lastSent)
	}
	rl.mu.Unlock()
	if err != nil {
		code := child.ExitCode(child.Result{StartErr: err})
		return finish(backends.RunResult{Status: backends.RunFailed, ExitCode: code, Error: err.Error()}, code)
	}

	lost := false
	var slotLost <-chan struct{}
	if slot != nil {
		slotLost = slot.Lost()
	}
	runLost := rl.lost
	grace := spec.Grace
	for done := false; !done; {
		stop := func(why string) {
			if lost {
				return
			}
			lost = true
			log.Warn("stopping the command", "reason", why)
			_ = p.Signal(syscall.SIGTERM)
			go func() {
				select {
				case <-p.Done():
				case <-time.After(grace):
					_ = p.Signal(syscall.SIGKILL)
				}
			}()
		}
		select {
		case <-runLost:
			runLost = nil
			stop("run lease lost")
		case <-slotLost:
			slotLost = nil
			stop("semaphore slot lost")
		case <-p.Done():
			done = true
		}
	}
	res := p.Wait()
	rr := backends.RunResult{ExitCode: child.ExitCode(res), Output: out.Bytes()}
	code := rr.ExitCode
	switch {
	case lost || res.LeaseLost:
		rr.Status, rr.Error, code = backends.RunLost, "lease lost: the command was stopped", child.ExitLeaseLost
		rr.ExitCode = code
	case res.TimedOut:
		rr.Status, rr.Error = backends.RunTimedOut, timedOut
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
	return finish(rr, code)
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
