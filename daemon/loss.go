package daemon

import (
	"context"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/reconcile"
)

// lossCheckEvery is how often the leader reads the data-loss marker of
// each backend that can lose its data (one cheap read each), so that a
// loss, a restart or a failover is noticed, and its hold started, within
// seconds rather than at the next resync.
const lossCheckEvery = 2 * time.Second

// markerLoop watches the data-loss markers of the backends that can lose
// their data. On the leader it runs reconcile.Engine.NoticeLoss every
// lossCheckEvery: a loss is recorded at once, and a resync is scheduled
// for just after each hold it sees, so the semaphores come back then even
// when another leader recorded the hold. Other hosts only remember the
// markers (reconcile.Engine.RememberMarkers), at start and every resync
// period: any of them may lead when a loss happens. With no such backend
// it returns.
func (d *Daemon) markerLoop(ctx context.Context) {
	_, e := d.current()
	if !e.HasLossGuard() {
		return
	}
	t := time.NewTicker(lossCheckEvery)
	defer t.Stop()
	var remembered time.Time
	holds := map[string]time.Time{} // the hold ends already scheduled
	failing := false
	for {
		_, e := d.current()
		var err error
		if _, leading := d.elector.Leading(); leading {
			var states map[string]backends.LossState
			states, _, err = e.NoticeLoss(ctx)
			for name, st := range states {
				if st.HoldUntil.IsZero() || holds[name].Equal(st.HoldUntil) || st.Now.Sub(st.HoldUntil) > backends.LossRecreateGrace {
					continue
				}
				holds[name] = st.HoldUntil
				left := max(st.HoldUntil.Sub(st.Now), 0)
				d.resyncIn(left)
				// Recorded here, by another host, or by a sem run; perhaps
				// over already (a check that failed while the backend
				// restarted): logged once either way.
				d.logLoss(reconcile.LostBackend{Backend: name, Recorded: true, Cause: st.Cause, HoldUntil: st.HoldUntil, Left: left})
			}
		} else if time.Since(remembered) >= d.cfg.ResyncEvery {
			remembered = time.Now()
			err = e.RememberMarkers(ctx)
		}
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			failing = true
			d.log.Warn("reading the data-loss markers", "error", err)
		case err != nil && ctx.Err() == nil:
			d.log.Debug("reading the data-loss markers", "error", err)
		case err == nil:
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// resyncIn asks the leader for a resync once d has passed, plus a moment:
// a data-loss hold ends then, and the semaphores it held come back.
func (d *Daemon) resyncIn(left time.Duration) {
	time.AfterFunc(max(left, 0)+100*time.Millisecond, func() {
		select {
		case d.resyncKick <- struct{}{}:
		default:
		}
	})
}

// logLoss logs a data loss (or a restart or failover that may have lost
// writes) with its hold, once per hold.
func (d *Daemon) logLoss(l reconcile.LostBackend) {
	d.lossMu.Lock()
	seen := d.lossLogged[l.Backend].Equal(l.HoldUntil)
	if !seen {
		if d.lossLogged == nil {
			d.lossLogged = map[string]time.Time{}
		}
		d.lossLogged[l.Backend] = l.HoldUntil
	}
	d.lossMu.Unlock()
	if seen {
		return
	}
	if l.Cause == backends.LossCauseChanged {
		d.log.Warn("backend restarted or failed over and may have lost its last writes: its semaphores grant no slot until holders from before have stopped",
			"backend", l.Backend, "hold_until", l.HoldUntil, "hold", l.Left.Round(time.Millisecond))
		return
	}
	d.log.Warn("backend lost its data: its semaphores come back once holders from before the loss have stopped",
		"backend", l.Backend, "hold_until", l.HoldUntil, "hold", l.Left.Round(time.Millisecond))
}
