package daemon

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/metrics"
)

// ListenAddr is the address of the /metrics and /healthz listener, or ""
// without Config.Listen.
func (d *Daemon) ListenAddr() string {
	if d.ln == nil {
		return ""
	}
	return d.ln.Addr().String()
}

// source is the daemon as the metrics collector reads it.
type source struct{ d *Daemon }

func (s source) Leading() (int64, bool) {
	t, ok := s.d.elector.Leading()
	return t.Term, ok
}

func (s source) LastReload() (bool, time.Time) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	return s.d.lastReloadOK, s.d.lastGoodAt
}

// ReloadRunning is how long the reload in progress has run; 0 when none.
func (s source) ReloadRunning() time.Duration {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if s.d.reloadingSince.IsZero() {
		return 0
	}
	return max(time.Since(s.d.reloadingSince), time.Nanosecond)
}

// Health is liveness: nil while the process runs and is not wedged. A
// failed reload is not a reason (the last good spec keeps running, and a
// probe that restarted the process would stop it on the broken spec);
// Ready reports it.
func (s source) Health() error {
	running := s.ReloadRunning()
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	switch {
	case s.d.stopping:
		return errors.New("shutting down")
	case running > s.d.reloadStuck():
		return fmt.Errorf("spec reload stuck: running for %s (the last good spec keeps running)", running.Round(time.Second))
	}
	return nil
}

// readyProbeTimeout bounds each backend's round trip in Ready.
const readyProbeTimeout = 2 * time.Second

// Ready is readiness: nil when the process is live, its last spec load
// was good, and every backend of the running spec answers with a store
// migrated for this binary. A backend that is down, or a host cut off from
// it, makes the host unready though it is alive.
func (s source) Ready(ctx context.Context) error {
	if err := s.Health(); err != nil {
		return err
	}
	s.d.mu.Lock()
	ok, at, rerr := s.d.lastReloadOK, s.d.lastReloadAt, s.d.lastReloadErr
	s.d.mu.Unlock()
	if !ok {
		msg := "spec reload failed"
		if rerr != nil {
			// The first error of a spec.Errors list: one line.
			msg += ": " + strings.SplitN(rerr.Error(), "\n", 2)[0]
		}
		return fmt.Errorf("%s (at %s; the last good spec keeps running)", msg, at.UTC().Format(time.RFC3339))
	}
	_, e := s.d.current()
	names := make([]string, 0, len(e.Backends))
	for n := range e.Backends {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := probeBackend(ctx, e.Backends[n]); err != nil {
			return fmt.Errorf("backend %s: %w", n, err)
		}
	}
	return nil
}

// probeBackend asks b for its clock (one round trip) and, for a store
// with a schema, whether it is migrated for this binary.
func probeBackend(ctx context.Context, b backends.Backend) error {
	ctx, cancel := context.WithTimeout(ctx, readyProbeTimeout)
	defer cancel()
	if _, err := b.Now(ctx); err != nil {
		return fmt.Errorf("unreachable: %w", err)
	}
	m, ok := b.(backends.Migrator)
	if !ok {
		return nil
	}
	info, err := m.Schema(ctx)
	if err != nil {
		return fmt.Errorf("reading the schema version: %w", err)
	}
	return backends.SchemaCurrent(info.Version, info.Latest)
}

// Objects groups the last good spec's objects by backend.
func (s source) Objects() []metrics.Objects {
	sp, e := s.d.current()
	by := map[string]*metrics.Objects{}
	get := func(bn string) *metrics.Objects {
		if by[bn] == nil {
			by[bn] = &metrics.Objects{Backend: bn, B: e.Backends[bn]}
		}
		return by[bn]
	}
	for n, sem := range sp.Semaphores {
		o := get(sem.Backend)
		o.Semaphores = append(o.Semaphores, n)
	}
	for n, q := range sp.Queues {
		o := get(q.Backend)
		o.Queues = append(o.Queues, n)
	}
	for n, c := range sp.Cron {
		o := get(c.Backend)
		o.Crons = append(o.Crons, n)
	}
	for n, r := range sp.RateLimits {
		o := get(r.Backend)
		o.RateLimits = append(o.RateLimits, n)
	}
	out := make([]metrics.Objects, 0, len(by))
	for _, o := range by {
		if o.B == nil { // a backend added by a reload is not open until a restart
			continue
		}
		sort.Strings(o.Semaphores)
		sort.Strings(o.Queues)
		sort.Strings(o.Crons)
		sort.Strings(o.RateLimits)
		out = append(out, *o)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Backend < out[j].Backend })
	return out
}

// roundTripper records backend call durations.
type roundTripper interface {
	RoundTrip(backend, op string, d time.Duration)
}

// timedLeader times the leader lease calls for
// coordd_backend_round_trip_seconds.
type timedLeader struct {
	l       backends.Leader
	backend string
	rt      roundTripper
}

// timedClockLeader is a timedLeader over a Leader that also reads the
// backend's clock; the elector looks for that method, so it must stay
// visible through the wrapper.
type timedClockLeader struct {
	timedLeader
	now func(context.Context) (time.Time, error)
}

func (c timedClockLeader) Now(ctx context.Context) (time.Time, error) { return c.now(ctx) }

// timeLeader wraps l so that its calls are timed.
func timeLeader(l backends.Leader, backend string, rt roundTripper) backends.Leader {
	t := timedLeader{l: l, backend: backend, rt: rt}
	if c, ok := l.(interface {
		Now(context.Context) (time.Time, error)
	}); ok {
		return timedClockLeader{timedLeader: t, now: c.Now}
	}
	return t
}

func (t timedLeader) since(op string, start time.Time) {
	t.rt.RoundTrip(t.backend, op, time.Since(start))
}

func (t timedLeader) ElectLeader(ctx context.Context, holder string, lease time.Duration) (backends.Term, error) {
	defer t.since("elect_leader", time.Now())
	return t.l.ElectLeader(ctx, holder, lease)
}

func (t timedLeader) RenewLeader(ctx context.Context, term backends.Term, lease time.Duration) (backends.Term, error) {
	defer t.since("renew_leader", time.Now())
	return t.l.RenewLeader(ctx, term, lease)
}

func (t timedLeader) ResignLeader(ctx context.Context, term backends.Term) error {
	defer t.since("resign_leader", time.Now())
	return t.l.ResignLeader(ctx, term)
}

func (t timedLeader) CurrentLeader(ctx context.Context) (backends.Term, error) {
	defer t.since("current_leader", time.Now())
	return t.l.CurrentLeader(ctx)
}
