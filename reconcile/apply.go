package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// ErrPlanChanged is returned when the plan computed under the apply lock
// differs from the one the operator approved.
var ErrPlanChanged = errors.New("the plan changed since it was shown; review the new plan and apply again")

// Engine plans and applies one spec against opened backends.
type Engine struct {
	Spec *spec.Spec
	// Backends holds an opened backend for each name in Spec.Backends.
	Backends map[string]backends.Backend
	// State is the cluster backend's applied state, hosts and leader lease.
	State backends.Cluster
	// Host identifies this process in apply records and the apply lock.
	Host string
	// LockWait bounds how long Apply waits for another host's apply lock.
	LockWait time.Duration
	// LockTTL is the apply lock's lease; a crashed apply frees it after this.
	LockTTL time.Duration
	// Loss, when set, remembers the data-loss markers this process saw
	// (the daemon keeps one for its life; see loss.go).
	Loss *LossMemory
}

func (e *Engine) backend(name string) (backends.Backend, error) {
	b, ok := e.Backends[name]
	if !ok {
		return nil, fmt.Errorf("backend %q holds applied objects but is not declared in the spec; keep it declared until its objects are deleted", name)
	}
	return b, nil
}

// Plan computes the plan without changing anything.
func (e *Engine) Plan(ctx context.Context, opts Options) (*Plan, error) {
	return e.plan(ctx, opts)
}

// Result reports what an apply did.
type Result struct {
	Plan       *Plan
	Generation int64
	Applied    int
	// LossRecorded lists the data losses this apply found and recorded:
	// their semaphores wait for the hold.
	LossRecorded []LostBackend
}

// Apply takes the apply lock, plans again under it and applies the plan.
// When approved is not empty it must equal the fingerprint of the plan
// computed under the lock (ErrPlanChanged otherwise). A blocked plan is
// refused with ErrBlocked and changes nothing.
func (e *Engine) Apply(ctx context.Context, opts Options, approved string) (*Result, error) {
	unlock, err := e.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = unlock(uctx)
	}()

	recorded, err := e.markLoss(ctx, opts)
	if err != nil {
		return nil, err
	}
	p, err := e.plan(ctx, opts)
	if err != nil {
		return nil, err
	}
	res := &Result{Plan: p, LossRecorded: recorded}
	if approved != "" && p.Fingerprint() != approved {
		return res, ErrPlanChanged
	}
	if len(p.Blocked) > 0 {
		return res, ErrBlocked
	}
	if p.held > 0 {
		// Cron tasks and queues come back at once; nothing is recorded,
		// so the apply after the hold adopts them (Put is idempotent)
		// and records the whole spec, semaphores included.
		for _, c := range append(append([]*Change{}, p.Changes...), p.Drift...) {
			if _, _, err := e.applyChange(ctx, c, opts); err != nil {
				return res, fmt.Errorf("%s: %s: %w", c.Address, c.Action, err)
			}
			res.Applied++
		}
		return res, fmt.Errorf("%w: %d semaphore change(s) wait until holders from before the loss have stopped; apply again then", ErrLossHold, p.held)
	}
	if !p.HasChanges() {
		return res, nil
	}

	var put []backends.InventoryEntry
	var remove []spec.Address
	var applyErr error
	for _, c := range append(append([]*Change{}, p.Changes...), p.Drift...) {
		entry, gone, err := e.applyChange(ctx, c, opts)
		if err != nil {
			applyErr = fmt.Errorf("%s: %s: %w", c.Address, c.Action, err)
			break
		}
		res.Applied++
		if gone {
			remove = append(remove, c.Address)
		} else if entry != nil {
			put = append(put, *entry)
		}
	}
	// Record what succeeded even when a later change failed, so that the
	// inventory never forgets an object that exists.
	if len(put)+len(remove) > 0 || applyErr == nil {
		rec := backends.ApplyRecord{SpecHash: p.SpecHash, Host: e.Host, Summary: p.SummaryLine()}
		gen, err := e.State.CommitApply(ctx, e.Host, rec, put, remove)
		if err != nil {
			return res, errors.Join(applyErr, fmt.Errorf("record apply: %w", err))
		}
		res.Generation = gen
	}
	return res, applyErr
}

func (e *Engine) lock(ctx context.Context) (func(context.Context) error, error) {
	ttl := e.LockTTL
	if ttl <= 0 {
		ttl = 5 * time.Minute
	}
	wait := e.LockWait
	if wait <= 0 {
		wait = 2 * time.Minute
	}
	deadline := time.Now().Add(wait)
	backoff := 50 * time.Millisecond
	for {
		unlock, err := e.State.TryLockApply(ctx, e.Host, ttl)
		if err == nil {
			return unlock, nil
		}
		if !errors.Is(err, backends.ErrLocked) || time.Now().After(deadline) {
			return nil, fmt.Errorf("take apply lock: %w", err)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		backoff = min(backoff*2, time.Second)
	}
}

// applyChange carries out one change. It returns the inventory entry to
// record, or gone when the entry is to be removed.
func (e *Engine) applyChange(ctx context.Context, c *Change, opts Options) (entry *backends.InventoryEntry, gone bool, err error) {
	switch c.Action {
	case Create, Update, Repair:
		d := c.desired
		en := &backends.InventoryEntry{Address: d.addr, Placement: d.toPlacement(), Status: backends.StatusActive}
		limit := 0
		if d.sem != nil {
			limit = d.sem.Limit
			if c.entry != nil && c.entry.Status == backends.StatusReplacing && c.entry.Previous != nil {
				en.Status, en.Previous = c.entry.Status, c.entry.Previous
				if held, err := e.semHeld(ctx, c.entry.Previous.Backend, d.addr.Name); err != nil {
					return nil, false, err
				} else if held {
					limit = 0
				}
			}
		}
		return en, false, e.put(ctx, c, d, limit)

	case Replace:
		d, old := c.desired, c.applied
		en := &backends.InventoryEntry{Address: d.addr, Placement: d.toPlacement(), Status: backends.StatusActive}
		pause, err := e.cronPause(ctx, old)
		if err != nil {
			return nil, false, err
		}
		held, err := e.remove(ctx, old, opts)
		if err != nil {
			return nil, false, err
		}
		if pause != nil {
			// The task moves: its operator's pause goes with it, so that
			// a backend change never resumes a paused task.
			if err := e.put(ctx, c, d, 0); err != nil {
				return nil, false, err
			}
			return en, false, e.carryPause(ctx, d, pause)
		}
		limit := 0
		if d.sem != nil {
			limit = d.sem.Limit
			if held {
				limit = 0
				prev := old.toPlacement()
				en.Status, en.Previous = backends.StatusReplacing, &prev
			}
		}
		return en, false, e.put(ctx, c, d, limit)

	case Finish:
		if c.desired == nil { // a delete that waited for holders
			held, err := e.remove(ctx, c.applied, opts)
			if err != nil || held {
				return c.entry, false, err
			}
			return nil, true, nil
		}
		// A replacement whose previous placement drained.
		if _, err := e.remove(ctx, c.previous, opts); err != nil {
			return nil, false, err
		}
		en := &backends.InventoryEntry{Address: c.desired.addr, Placement: c.desired.toPlacement(), Status: backends.StatusActive}
		return en, false, e.put(ctx, c, c.desired, c.desired.sem.Limit)

	case Delete:
		held, err := e.remove(ctx, c.applied, opts)
		if err != nil {
			return nil, false, err
		}
		if c.previous != nil {
			ph, err := e.remove(ctx, c.previous, opts)
			if err != nil {
				return nil, false, err
			}
			if ph && !held {
				// Only the previous placement still has holders: track it.
				en := &backends.InventoryEntry{Address: c.Address, Placement: *c.entry.Previous, Status: backends.StatusDraining}
				return en, false, nil
			}
		}
		if held {
			en := *c.entry
			en.Status, en.Previous = backends.StatusDraining, nil
			return &en, false, nil
		}
		return nil, true, nil
	}
	return nil, false, fmt.Errorf("unknown action %q", c.Action)
}

func (e *Engine) semHeld(ctx context.Context, backend, name string) (bool, error) {
	b, err := e.backend(backend)
	if err != nil {
		return false, err
	}
	adm := b.Semaphores()
	if adm == nil {
		return false, fmt.Errorf("backend %q: semaphores: %w", backend, backends.ErrUnsupported)
	}
	m, err := adm.ObserveSemaphores(ctx, []string{name})
	if err != nil {
		return false, err
	}
	return m[name] != nil && len(m[name].Holders) > 0, nil
}

// put creates or updates the desired object in its backend.
func (e *Engine) put(ctx context.Context, c *Change, d *object, limit int) error {
	b, err := e.backend(d.backend)
	if err != nil {
		return err
	}
	if err := e.declareHook(ctx, d); err != nil {
		return err
	}
	switch {
	case d.sem != nil:
		adm := b.Semaphores()
		if adm == nil {
			return fmt.Errorf("backend %q: semaphores: %w", d.backend, backends.ErrUnsupported)
		}
		return adm.PutSemaphore(ctx, semConfig(d.sem, limit))
	case d.cron != nil:
		adm := b.Crons()
		if adm == nil {
			return fmt.Errorf("backend %q: cron: %w", d.backend, backends.ErrUnsupported)
		}
		reset := c.Action == Create || c.Action == Replace || c.schedChanged
		if c.Action == Repair {
			m, err := adm.ObserveCrons(ctx, []string{d.addr.Name})
			if err != nil {
				return err
			}
			// A task that runs after others has no next_exec until they
			// trigger it: only a missing row is repaired.
			reset = m[d.addr.Name] == nil || (m[d.addr.Name].NextExec.IsZero() && len(d.cron.After) == 0)
		}
		var next time.Time
		if reset {
			now, err := b.Now(ctx)
			if err != nil {
				return fmt.Errorf("backend clock: %w", err)
			}
			next = d.cron.Sched.Next(now)
			if c.Action == Create && d.cron.RunOnCreate {
				next = now
			}
			if next.IsZero() && len(d.cron.After) == 0 {
				return fmt.Errorf("schedule %q has no occurrence after %s", d.cron.Schedule, now.Format(time.RFC3339))
			}
			if !next.IsZero() {
				next = next.UTC()
			}
		}
		return adm.PutCron(ctx, d.addr.Name, d.raw, next, reset)
	case d.queue != nil:
		adm := b.Queues()
		if adm == nil {
			return fmt.Errorf("backend %q: queues: %w", d.backend, backends.ErrUnsupported)
		}
		_, err := adm.PutQueue(ctx, queueConfig(d.queue))
		return err
	case d.rate != nil:
		adm := backends.RateLimitsOf(b)
		if adm == nil {
			return fmt.Errorf("backend %q: rate limits: %w", d.backend, backends.ErrUnsupported)
		}
		return adm.PutRateLimit(ctx, rateConfig(d.rate))
	}
	return nil
}

// declareHook records, before d is stored, when its on_failure hook was
// first applied (backends.HookDeclared): the leader notifies only the
// failures that come after.
func (e *Engine) declareHook(ctx context.Context, d *object) error {
	var h *spec.Hook
	switch {
	case d.cron != nil:
		h = d.cron.OnFailure
	case d.queue != nil:
		h = d.queue.OnFailure
	}
	if h == nil {
		return nil
	}
	if _, err := e.State.MarkNotice(ctx, backends.HookDeclared(d.addr.String(), h)); err != nil {
		return fmt.Errorf("recording the on_failure hook: %w", err)
	}
	return nil
}

// cronPause reads the operator's pause of applied cron task o (nil: none,
// or o is not a cron task).
func (e *Engine) cronPause(ctx context.Context, o *object) (*backends.CronPause, error) {
	if o.cron == nil {
		return nil, nil
	}
	b, err := e.backend(o.backend)
	if err != nil {
		return nil, err
	}
	adm := b.Crons()
	if adm == nil {
		return nil, nil
	}
	m, err := adm.ObserveCrons(ctx, []string{o.addr.Name})
	if err != nil {
		return nil, fmt.Errorf("observe cron %q on %q: %w", o.addr.Name, o.backend, err)
	}
	if st := m[o.addr.Name]; st != nil {
		return st.Paused, nil
	}
	return nil, nil
}

// carryPause pauses task d on its new backend as p paused it on the old
// one (at the new backend's time).
func (e *Engine) carryPause(ctx context.Context, d *object, p *backends.CronPause) error {
	b, err := e.backend(d.backend)
	if err != nil {
		return err
	}
	pz := b.Crons()
	if pz == nil {
		return fmt.Errorf("backend %q cannot pause cron tasks: %w", d.backend, backends.ErrUnsupported)
	}
	if _, _, err := pz.PauseCron(ctx, d.addr.Name, p.Host, p.Reason); err != nil {
		return fmt.Errorf("carry the pause of cron %q to %q: %w", d.addr.Name, d.backend, err)
	}
	return nil
}

// remove deletes an applied object from its backend. held reports that a
// semaphore still has holders and now drains with limit 0.
func (e *Engine) remove(ctx context.Context, o *object, opts Options) (held bool, err error) {
	b, err := e.backend(o.backend)
	if err != nil {
		return false, err
	}
	switch {
	case o.sem != nil:
		adm := b.Semaphores()
		if adm == nil {
			return false, fmt.Errorf("backend %q: semaphores: %w", o.backend, backends.ErrUnsupported)
		}
		err := adm.DeleteSemaphore(ctx, o.addr.Name)
		if errors.Is(err, backends.ErrHeld) {
			return true, nil
		}
		return false, err
	case o.cron != nil:
		adm := b.Crons()
		if adm == nil {
			return false, fmt.Errorf("backend %q: cron: %w", o.backend, backends.ErrUnsupported)
		}
		return false, adm.DeleteCron(ctx, o.addr.Name)
	case o.queue != nil:
		adm := b.Queues()
		if adm == nil {
			return false, fmt.Errorf("backend %q: queues: %w", o.backend, backends.ErrUnsupported)
		}
		return false, adm.DeleteQueue(ctx, o.addr.Name, opts.AllowDestroyJobs)
	case o.rate != nil:
		adm := backends.RateLimitsOf(b)
		if adm == nil {
			return false, fmt.Errorf("backend %q: rate limits: %w", o.backend, backends.ErrUnsupported)
		}
		return false, adm.DeleteRateLimit(ctx, o.addr.Name)
	}
	return false, nil
}
