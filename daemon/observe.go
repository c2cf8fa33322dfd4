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

func (s source) Health() error {
	running := s.ReloadRunning()
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	switch {
	case s.d.stopping:
		return errors.New("shutting down")
	case running > s.d.reloadStuck():
		return fmt.Errorf("spec reload stuck: running for %s (the last good spec keeps running)", running.Round(time.Second))
	case !s.d.lastReloadOK:
		msg := "spec reload failed"
		if err := s.d.lastReloadErr; err != nil {
			// The first error of a spec.Errors list: one line.
			msg += ": " + strings.SplitN(err.Error(), "\n", 2)[0]
		}
		return fmt.Errorf("%s (at %s; the last good spec keeps running)", msg, s.d.lastReloadAt.UTC().Format(time.RFC3339))
	}
	return nil
}

// Objects groups the last good spec's semaphores and queues by backend.
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
	out := make([]metrics.Objects, 0, len(by))
	for _, o := range by {
		if o.B == nil { // a backend added by a reload is not open until a restart
			continue
		}
		sort.Strings(o.Semaphores)
		sort.Strings(o.Queues)
		sort.Strings(o.Crons)
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
