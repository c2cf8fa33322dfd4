package reconcile

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/coordd/coordd/backends"
)

// Data loss (backends.LossGuard). A backend such as Redis can come back
// empty: restarted without persistence, or flushed. Its semaphores then
// look missing, and re-creating their tokens at once would admit new
// holders next to the old ones that still run. So before apply changes
// anything it asks each such backend to record the loss (MarkLoss: a
// marker that was missing while the inventory lists objects there starts a
// hold of the longest lease), and the plan keeps every semaphore that
// existed on a backend in its hold waiting, instead of re-creating or
// changing it. A first use (no inventory entry on the backend, and a
// marker this process never saw) has no hold.

// LossMemory remembers, for the life of a process (the daemon), which
// backends it has seen marked. A marker that vanishes while the process
// runs is lost data even when the inventory cannot say so: when the
// cluster backend is that same Redis, the inventory is lost with it.
type LossMemory struct {
	mu     sync.Mutex
	marked map[string]bool
}

func (m *LossMemory) seen(backend string) bool {
	if m == nil {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.marked[backend]
}

func (m *LossMemory) remember(backend string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.marked == nil {
		m.marked = map[string]bool{}
	}
	m.marked[backend] = true
}

// lossInfo is what reconcile knows of one backend that can lose its data.
type lossInfo struct {
	state backends.LossState
	// existed: the inventory lists objects on the backend.
	existed bool
	// longest is the longest lease of its semaphores, applied or desired:
	// no holder of one of them can have had a longer one.
	longest time.Duration
}

// lossInfos computes lossInfo for every declared backend that is a
// LossGuard, reading each one's marker when observe is set.
func (e *Engine) lossInfos(ctx context.Context, st backends.State, desired []*object, observe bool) (map[string]*lossInfo, error) {
	var out map[string]*lossInfo
	for name, b := range e.Backends {
		lg, ok := b.(backends.LossGuard)
		if !ok {
			continue
		}
		li := &lossInfo{existed: e.Loss.seen(name)}
		for _, en := range st.Entries {
			for _, p := range []*backends.Placement{&en.Placement, en.Previous} {
				if p == nil || p.Backend != name {
					continue
				}
				li.existed = true
				o, err := appliedObject(en.Address, *p)
				if err != nil {
					return nil, err
				}
				if o.sem != nil {
					li.longest = max(li.longest, o.sem.Lease)
				}
			}
		}
		for _, d := range desired {
			if d.backend == name && d.sem != nil {
				li.longest = max(li.longest, d.sem.Lease)
			}
		}
		if e.Spec != nil { // the local spec's too: with Resync, desired is the inventory, which may be lost
			for _, sem := range e.Spec.Semaphores {
				if sem.Backend == name {
					li.longest = max(li.longest, sem.Lease)
				}
			}
		}
		if observe {
			s, err := lg.ObserveLoss(ctx)
			if err != nil {
				return nil, fmt.Errorf("backend %q: %w", name, err)
			}
			li.state = s
			if s.Marked {
				e.Loss.remember(name)
			}
		}
		if out == nil {
			out = map[string]*lossInfo{}
		}
		out[name] = li
	}
	return out, nil
}

// markLoss records lost data on every LossGuard backend before apply
// plans under the lock (see the top of this file). It returns the losses
// it recorded now (the marker was missing while objects existed).
func (e *Engine) markLoss(ctx context.Context, opts Options) ([]LostBackend, error) {
	if !e.HasLossGuard() {
		return nil, nil
	}
	st, err := e.State.LoadState(ctx)
	if err != nil {
		return nil, fmt.Errorf("load applied state: %w", err)
	}
	desired, err := e.desired(st, opts)
	if err != nil {
		return nil, err
	}
	infos, err := e.lossInfos(ctx, st, desired, false)
	if err != nil {
		return nil, err
	}
	var recorded []LostBackend
	for name, li := range infos {
		ls, err := e.Backends[name].(backends.LossGuard).MarkLoss(ctx, li.existed, li.longest)
		if err != nil {
			return nil, fmt.Errorf("backend %q: %w", name, err)
		}
		e.Loss.remember(name)
		if ls.Wrote && li.existed {
			recorded = append(recorded, LostBackend{Backend: name, Recorded: true, Cause: ls.Cause, HoldUntil: ls.HoldUntil, Left: ls.HoldUntil.Sub(ls.Now)})
		}
	}
	return recorded, nil
}

// RememberMarkers reads the marker of every backend that can lose its data
// and remembers those present (Engine.Loss), so that this process can tell
// a later loss from a first use even if the cluster state is lost too.
// The daemon calls it at start and then every resync period, on every
// host: any of them may lead when the loss happens.
func (e *Engine) RememberMarkers(ctx context.Context) error {
	var errs []error
	for name, b := range e.Backends {
		lg, ok := b.(backends.LossGuard)
		if !ok {
			continue
		}
		st, err := lg.ObserveLoss(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("backend %q: %w", name, err))
			continue
		}
		if st.Marked {
			e.Loss.remember(name)
		}
	}
	return errors.Join(errs...)
}

// HasLossGuard reports whether a backend of the engine can lose its data.
func (e *Engine) HasLossGuard() bool {
	for _, b := range e.Backends {
		if _, ok := b.(backends.LossGuard); ok {
			return true
		}
	}
	return false
}

// LostBackend is a backend that lost its data while the inventory lists
// objects on it.
type LostBackend struct {
	Backend string `json:"backend"`
	// Recorded: the loss is recorded (the marker is back), and HoldUntil
	// is when semaphore tokens may come back, in backend time.
	Recorded bool `json:"recorded"`
	// Cause is backends.LossCauseLost (the data is gone) or
	// backends.LossCauseChanged (a restart or failover that may have lost
	// the last writes; the semaphores stay, but grant no slot).
	Cause     string    `json:"cause,omitempty"`
	HoldUntil time.Time `json:"hold_until,omitzero"`
	// Left is how long the hold still runs (the longest lease when the
	// loss is not recorded yet).
	Left time.Duration `json:"left"`
}

// lostBackends lists the backends in loss whose hold has not passed.
func lostBackends(loss map[string]*lossInfo) []LostBackend {
	var out []LostBackend
	for name, li := range loss {
		switch {
		case !li.existed:
		case !li.state.Marked:
			out = append(out, LostBackend{Backend: name, Left: li.longest})
		case li.state.Holding():
			out = append(out, LostBackend{Backend: name, Recorded: true, Cause: li.state.Cause, HoldUntil: li.state.HoldUntil, Left: li.state.HoldUntil.Sub(li.state.Now)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Backend < out[j].Backend })
	return out
}

// ErrLossHold is returned by Apply while a backend that lost its data is in
// its hold and the plan would put semaphores on it. The other changes (cron
// tasks and queues re-created on that backend) are applied at once, but
// nothing is recorded until the hold has passed, so that no apply records a
// spec whose semaphores it could not create: the apply after the hold
// adopts what was created meanwhile.
var ErrLossHold = errors.New("waiting for a data-loss hold")

// holdLost moves the changes that would put semaphore tokens on a backend
// that lost its data, and is still in its hold, to Waiting, and counts
// them (Plan.held).
func holdLost(p *Plan, loss map[string]*lossInfo) {
	if len(loss) == 0 {
		return
	}
	keep := func(cs []*Change) []*Change {
		out := cs[:0]
		for _, c := range cs {
			if note := lossNote(c, loss); note != "" {
				p.Waiting = append(p.Waiting, &Change{Address: c.Address, Action: Wait, Backend: c.Backend, Notes: []string{note}})
				p.held++
				continue
			}
			out = append(out, c)
		}
		return out
	}
	p.Changes = keep(p.Changes)
	p.Drift = keep(p.Drift)
}

// lossNote says why c must wait for a data-loss hold, or "" when it need
// not: c puts a semaphore on a backend whose data was lost while objects
// existed there (a new semaphore too: after a loss of the cluster state
// with it, a semaphore that existed looks new).
func lossNote(c *Change, loss map[string]*lossInfo) string {
	if c.desired == nil || c.desired.sem == nil {
		return ""
	}
	switch c.Action {
	case Create, Update, Repair, Finish, Replace:
	default:
		return ""
	}
	li := loss[c.desired.backend]
	if li == nil || !li.existed {
		return ""
	}
	switch {
	case !li.state.Marked:
		return fmt.Sprintf("backend %s lost its data (its marker is missing): apply records the loss, and the semaphore comes back %s later (the longest lease), once holders from before the loss have stopped",
			c.desired.backend, dur(li.longest))
	case li.state.Holding() && li.state.Cause == backends.LossCauseChanged:
		return fmt.Sprintf("backend %s restarted or failed over and may have lost its last writes: the semaphore changes at %s (backend time, in %s), once holders from before have stopped",
			c.desired.backend, li.state.HoldUntil.Format(time.RFC3339), li.state.HoldUntil.Sub(li.state.Now).Round(time.Second))
	case li.state.Holding():
		return fmt.Sprintf("backend %s lost its data: the semaphore comes back at %s (backend time, in %s), once holders from before the loss have stopped",
			c.desired.backend, li.state.HoldUntil.Format(time.RFC3339), li.state.HoldUntil.Sub(li.state.Now).Round(time.Second))
	}
	return ""
}

// NoticeLoss reads the marker of every backend of the engine that can lose
// its data (one cheap read each) and records a loss the moment it sees one:
// a marker missing while objects existed there, or a server that changed
// under its marker (a restart, a promoted replica: LossState.Changed). It
// also records the longest lease in a marker that holds a shorter one than
// the spec's (LossState.Hold: the hold a later change starts). It
// needs no apply lock: MarkLoss writes only what is missing, atomically,
// and the apply that comes next finds the hold in the marker. The daemon's
// leader runs it every few seconds, and `sem run` and the daemon's cron
// runs when they find a semaphore missing, so that a loss is noticed
// within seconds rather than at the next resync.
//
// It returns the state of each backend (after any mark) and the losses it
// recorded now.
func (e *Engine) NoticeLoss(ctx context.Context) (map[string]backends.LossState, []LostBackend, error) {
	states := map[string]backends.LossState{}
	var recorded []LostBackend
	var errs []error
	var infos map[string]*lossInfo
	for name, b := range e.Backends {
		lg, ok := b.(backends.LossGuard)
		if !ok {
			continue
		}
		s, err := lg.ObserveLoss(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("backend %q: %w", name, err))
			continue
		}
		if s.Marked && !s.Changed && (!s.TracksChanges || s.Hold >= e.specLongest(name)) {
			e.Loss.remember(name)
			states[name] = s
			continue
		}
		if infos == nil {
			st, err := e.State.LoadState(ctx)
			if err != nil {
				return states, recorded, fmt.Errorf("load applied state: %w", err)
			}
			if infos, err = e.lossInfos(ctx, st, nil, false); err != nil {
				return states, recorded, err
			}
		}
		li := infos[name]
		if !s.Marked && !li.existed {
			states[name] = s // a first use, or a loss nothing remembers
			continue
		}
		ms, err := lg.MarkLoss(ctx, li.existed, li.longest)
		if err != nil {
			errs = append(errs, fmt.Errorf("backend %q: %w", name, err))
			continue
		}
		e.Loss.remember(name)
		states[name] = ms
		if ms.Wrote && ms.Holding() {
			recorded = append(recorded, LostBackend{Backend: name, Recorded: true, Cause: ms.Cause, HoldUntil: ms.HoldUntil, Left: ms.HoldUntil.Sub(ms.Now)})
		}
	}
	return states, recorded, errors.Join(errs...)
}

// specLongest is the longest lease of the spec's semaphores on backend.
func (e *Engine) specLongest(backend string) time.Duration {
	var d time.Duration
	if e.Spec != nil {
		for _, sem := range e.Spec.Semaphores {
			if sem.Backend == backend {
				d = max(d, sem.Lease)
			}
		}
	}
	return d
}

// LossExplainsMissing reports whether a semaphore found missing from
// backend may be on its way back after a data loss, rather than never
// applied, once NoticeLoss has recorded any loss there: the backend's
// marker holds its semaphores (or did until moments ago, and they are
// being re-created), or it has no marker and also holds the cluster state,
// so that no inventory can tell a loss from a first use. A caller that
// waits (semaphore.Acquire) then waits for the hold; otherwise the
// semaphore is not applied.
func (e *Engine) LossExplainsMissing(ctx context.Context, backend string) (bool, error) {
	if _, ok := e.Backends[backend].(backends.LossGuard); !ok {
		return false, nil
	}
	states, _, err := e.NoticeLoss(ctx)
	st, ok := states[backend]
	if !ok {
		return false, err
	}
	switch {
	case st.MissingHold(backend) != nil:
		return true, nil
	case !st.Marked:
		return e.Spec != nil && e.Spec.Cluster.Backend == backend, nil
	}
	return false, nil
}
