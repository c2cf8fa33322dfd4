package daemon

import (
	"context"
	"errors"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/reconcile"
	"github.com/coordd/coordd/spec"
)

// appliedRecheck is how long maybeApply trusts that the local spec's hash
// is settled (applied, or superseded) without reading the apply records.
const appliedRecheck = 10 * time.Minute

func (d *Daemon) poke() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// wakeRepairEvery is how often the leader runs the wake-up repair pass
// (backends.WakeRepairer); with nobody parked a pass is one cheap query.
const wakeRepairEvery = 5 * time.Second

// leaderLoop applies new specs and resyncs, while this host leads. It also
// runs the wake-up repair pass, at once and then every wakeRepairEvery.
func (d *Daemon) leaderLoop(ctx context.Context) {
	changes := d.changes
	resync := time.NewTicker(d.cfg.ResyncEvery)
	defer resync.Stop()
	repair := time.NewTicker(wakeRepairEvery)
	defer repair.Stop()
	for {
		doResync, doApply := false, true
		select {
		case <-ctx.Done():
			return
		case <-changes:
			d.checkedHash = "" // a new term: the last leader may have applied anything
		case <-d.kick:
		case <-resync.C:
			doResync = true
		case <-d.resyncKick:
			doResync = true
		case <-repair.C:
			doApply = false
		}
		if _, leading := d.elector.Leading(); !leading {
			continue
		}
		if doApply {
			d.maybeApply(ctx)
		}
		if doResync {
			d.resync(ctx)
		}
		d.repairWakeups(ctx)
	}
}

// repairWakeups wakes semaphore waiters that a lost release left asleep, on
// every backend that parks them, for the semaphores of mode session with
// wake kill in the spec.
func (d *Daemon) repairWakeups(ctx context.Context) {
	s, e := d.current()
	names := map[string][]backends.SemRef{}
	for n, sem := range s.Semaphores {
		if sem.Mode == spec.ModeSession && sem.Wake == spec.WakeKill {
			names[sem.Backend] = append(names[sem.Backend], backends.SemRef{Name: n})
		}
	}
	for bn, ns := range names {
		r, ok := e.Backends[bn].(backends.WakeRepairer)
		if !ok {
			continue
		}
		n, err := r.RepairWakeups(ctx, ns)
		switch {
		case err != nil && ctx.Err() == nil:
			d.log.Warn("wake-up repair pass", "backend", bn, "error", err)
		case n > 0:
			d.log.Info("woke semaphore waiters that no release had woken", "backend", bn, "woken", n)
		}
	}
}

// maybeApply applies the local spec if its hash was never applied. Once
// the hash is known to be applied (or superseded) it is not checked again
// until the spec or the leadership changes, or appliedRecheck passes: an
// idle leader does not read the apply records on every resync.
func (d *Daemon) maybeApply(ctx context.Context) {
	s, e := d.current()
	hash := s.Hash()
	if hash == d.checkedHash && time.Since(d.checkedAt) < appliedRecheck {
		return
	}
	settled := func() { d.checkedHash, d.checkedAt = hash, time.Now() }
	st, err := e.State.LoadState(ctx)
	if err != nil {
		d.log.Error("read applied state", "error", err)
		d.metrics.Reconciled("apply", err)
		return
	}
	if st.Last != nil && st.Last.SpecHash == hash {
		settled()
		return
	}
	rec, err := e.State.FindApply(ctx, hash)
	switch {
	case err == nil:
		latest := int64(0)
		if st.Last != nil {
			latest = st.Last.Generation
		}
		d.log.Warn("stale checkout: this spec was applied before and superseded; not applying it",
			"spec_hash", short(hash), "applied_generation", rec.Generation, "current_generation", latest)
		settled()
		return
	case !errors.Is(err, backends.ErrNotFound):
		d.log.Error("read apply history", "error", err)
		d.metrics.Reconciled("apply", err)
		return
	}
	res, err := e.Apply(ctx, reconcile.Options{}, "")
	d.logApply("apply", res, err)
	d.metrics.Reconciled("apply", reconcileErr(err))
	d.wakeScheduler(res, err)
	if res != nil && res.Plan != nil {
		d.resyncAfterHold(res.Plan)
	}
	if err == nil {
		settled()
		d.kickHosts() // the applied hash changed: compare again now
	}
}

// wakeScheduler wakes the scheduler after an apply that changed
// something: a new task, or a new next_exec, is then claimed on time even
// though the scheduler sleeps until the next_exec it knew of.
func (d *Daemon) wakeScheduler(res *reconcile.Result, err error) {
	if err == nil && res != nil && res.Plan.HasChanges() {
		d.sched.Wake()
	}
}

// resync repairs drift toward the applied record. It plans first, without
// the apply lock: only a plan with something to do (or blocked) goes on to
// Apply, which takes the lock and plans again under it. An idle cluster's
// resync is thus reads only.
func (d *Daemon) resync(ctx context.Context) {
	_, e := d.current()
	opts := reconcile.Options{Resync: true}
	p, err := e.Plan(ctx, opts)
	if err != nil {
		d.log.Error("resync failed", "error", err)
		d.metrics.Reconciled("resync", err)
		return
	}
	d.resyncAfterHold(p)
	if !p.NeedsApply() && len(p.Blocked) == 0 {
		d.metrics.Reconciled("resync", nil)
		return
	}
	res, err := e.Apply(ctx, opts, "")
	d.logApply("resync", res, err)
	d.metrics.Reconciled("resync", reconcileErr(err))
	d.wakeScheduler(res, err)
	if res != nil && res.Plan != nil {
		d.resyncAfterHold(res.Plan)
	}
}

// resyncAfterHold schedules a resync just after the data-loss holds of p
// end, so that the semaphores waiting for one come back then rather than
// at the next periodic resync.
func (d *Daemon) resyncAfterHold(p *reconcile.Plan) {
	for _, l := range p.Lost {
		if l.Recorded && l.Left > 0 {
			d.resyncIn(l.Left)
		}
	}
}

func (d *Daemon) logApply(what string, res *reconcile.Result, err error) {
	switch {
	case err != nil && errors.Is(err, reconcile.ErrLossHold):
		d.log.Debug(what+" waits for a data-loss hold", "error", err)
	case err != nil && res != nil && errors.Is(err, reconcile.ErrBlocked):
		for _, b := range res.Plan.Blocked {
			d.log.Error(what+" refused", "reason", b)
		}
	case err != nil:
		d.log.Error(what+" failed", "error", err)
	case res != nil && res.Plan.HasChanges():
		d.log.Info(what+" done", "summary", res.Plan.SummaryLine(), "generation", res.Generation)
	}
	if res != nil {
		for _, l := range res.LossRecorded {
			d.logLoss(l)
		}
	}
}

// reconcileErr is the error a reconcile run counts: waiting for a
// data-loss hold to end is not one.
func reconcileErr(err error) error {
	if errors.Is(err, reconcile.ErrLossHold) {
		return nil
	}
	return err
}
