package daemon

import (
	"context"
	"errors"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/coordd/coordd/spec"
)

// reloadLoop runs the reloads requested on reqs until ctx ends.
func (d *Daemon) reloadLoop(ctx context.Context, reqs <-chan struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-reqs:
			d.reload(ctx)
		}
	}
}

// reload loads the spec again. On any error the last good spec stays.
// The load is bounded by LoadOptions.ReadTimeout; a reload that runs past
// twice that (reloadStuck) makes /healthz fail until it ends.
func (d *Daemon) reload(ctx context.Context) {
	load := d.loadSpec
	if load == nil {
		load = spec.LoadContext
	}
	d.mu.Lock()
	d.reloadingSince = time.Now()
	d.mu.Unlock()
	s, err := load(ctx, d.cfg.SpecPath, d.cfg.LoadOptions)
	d.mu.Lock()
	d.reloadingSince = time.Time{}
	if d.stopping {
		d.mu.Unlock()
		return
	}
	prevErr := d.lastReloadErr
	d.lastReloadAt = time.Now()
	d.lastReloadOK = err == nil
	d.lastReloadErr = err
	if err == nil {
		d.lastGoodAt = d.lastReloadAt
	}
	old := d.spec
	d.mu.Unlock()
	if err != nil {
		// Logged once per broken version: a reload comes with every event
		// in the spec's directory (an editor's swap file, another file
		// saved), and the same errors again would bury the first report.
		if prevErr != nil && prevErr.Error() == err.Error() {
			d.log.Debug("spec reload: the same errors as the last one, not logged again")
			return
		}
		var errs spec.Errors
		if errors.As(err, &errs) {
			for _, e := range errs {
				d.log.Error("spec reload failed; keeping the last good spec", "error", e.Error())
			}
		} else {
			d.log.Error("spec reload failed; keeping the last good spec", "error", err)
		}
		return
	}
	if prevErr != nil {
		d.log.Info("spec reload recovered: the spec loads again")
	}
	// A password is not part of the hash, so this comes first: a password
	// rotated in the spec warns like any other connection change.
	if changed := changedConnections(old, s); len(changed) > 0 {
		d.log.Warn("backend connections changed; restart coordd to use them (objects keep using the open connections)",
			"backends", strings.Join(changed, ","))
		if s.Hash() == old.Hash() {
			// Only a password changed: keep the new spec, so that the
			// next reload does not warn again, but nothing else to do.
			d.mu.Lock()
			d.spec = s
			d.mu.Unlock()
			return
		}
	}
	if s.Hash() == old.Hash() {
		// Nothing to apply, but keep the new spec: the variables it
		// references, which commands must not inherit (ChildEnvUnset), may
		// have changed under the same values (a secret moved to a new
		// variable).
		d.mu.Lock()
		d.spec = s
		d.mu.Unlock()
		return
	}
	d.mu.Lock()
	d.spec = s
	d.mu.Unlock()
	d.log.Info("spec reloaded", "spec_hash", short(s.Hash()), "objects", s.ObjectCount())
	d.sched.Wake()
	d.poke()
	d.kickHosts()
}

// reloadStuck is how long a reload may run before /healthz reports it:
// twice the read deadline, which the file system part cannot pass, so
// only a reload stuck where no deadline reaches shows.
func (d *Daemon) reloadStuck() time.Duration {
	t := d.cfg.LoadOptions.ReadTimeout
	if t <= 0 {
		t = spec.DefaultReadTimeout
	}
	return 2 * t
}

// changedConnections names, sorted, the backends whose connection
// settings (what a reload cannot change without reopening the backend:
// the whole declaration but its position, passwords included) differ
// between a and b, or that only one of them declares. Names only: the
// settings hold secrets.
func changedConnections(a, b *spec.Spec) []string {
	var out []string
	for n, ba := range a.Backends {
		bb := b.Backends[n]
		if bb == nil {
			out = append(out, n)
			continue
		}
		ca, cb := *ba, *bb
		ca.Pos, cb.Pos = spec.Pos{}, spec.Pos{}
		if !reflect.DeepEqual(ca, cb) {
			out = append(out, n)
		}
	}
	for n := range b.Backends {
		if a.Backends[n] == nil {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}
