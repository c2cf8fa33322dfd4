package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/dashboard"
	"github.com/coordd/coordd/reconcile"
	"github.com/coordd/coordd/spec"
)

// ErrShuttingDown: the daemon takes no new manual run once shutdown began.
var ErrShuttingDown = errors.New("the daemon is shutting down")

// dashState is the web dashboard of a daemon with Config.Listen and
// Config.Dashboard, and the manual runs it started ("Run now"). Those
// runs belong to the daemon like scheduled ones: shutdown waits for them
// within the grace period, then stops them.
type dashState struct {
	h http.Handler // nil: no dashboard
	// sample reads every queue for the throughput column (nil: no
	// dashboard); sampleLoop calls it.
	sample func(context.Context)

	runs      sync.WaitGroup // Add only under Daemon.mu while !stopping
	runCtx    context.Context
	cancelRun context.CancelFunc
}

// openDashboard builds the dashboard served at / beside /metrics and
// /healthz. Its token file is read now: a bad one stops the start.
func (d *Daemon) openDashboard() error {
	opts := *d.cfg.Dashboard
	if opts.Version == "" {
		opts.Version = d.cfg.Version
	}
	opts.Extra = append(append([]dashboard.Action(nil), opts.Extra...), dashboard.PauseActions(dashSource{d})...)
	// The name --listen gives is one the dashboard answers to.
	if host, _, err := net.SplitHostPort(d.cfg.Listen); err == nil && host != "" && net.ParseIP(host) == nil {
		opts.Hosts = append(append([]string(nil), opts.Hosts...), host)
	}
	h, err := dashboard.New(dashSource{d}, opts, d.log.Named("dashboard"))
	if err != nil {
		return fmt.Errorf("dashboard: %w", err)
	}
	d.dash.h, d.dash.sample = h, h.Sample
	d.dash.runCtx, d.dash.cancelRun = context.WithCancel(context.Background())
	if !isLoopback(d.ln.Addr()) {
		d.log.Warn("the dashboard shows job payloads, command output and host names to anyone who can reach this address; bind --listen to loopback, put an authenticating proxy in front, or run with --dashboard=false",
			"addr", d.ln.Addr().String())
	}
	return nil
}

// sampleLoop reads every queue every dashboard.SampleEvery while the
// daemon runs, so that the dashboard's throughput is known before a page
// is opened. Without a dashboard it returns at once.
func (d *Daemon) sampleLoop(ctx context.Context) {
	if d.dash.sample == nil {
		return
	}
	t := time.NewTicker(dashboard.SampleEvery)
	defer t.Stop()
	for {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		d.dash.sample(sctx)
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// isLoopback reports whether a listener's address takes connections only
// from this machine.
func isLoopback(a net.Addr) bool {
	tcp, ok := a.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// handler is what the listener serves: /metrics, /healthz and /readyz, and the
// dashboard at every other path when there is one.
func (d *Daemon) handler() http.Handler {
	m := d.metrics.Handler()
	if d.dash.h == nil {
		return m
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", m)
	mux.Handle("/healthz", m)
	mux.Handle("/readyz", m)
	mux.Handle("/", d.dash.h)
	return mux
}

// waitManualRuns waits for the dashboard's manual runs until ctx (the
// shutdown grace) ends, then stops the rest and waits for them to be
// recorded. Daemon.stopping is set: no run is added any more.
func (d *Daemon) waitManualRuns(ctx context.Context) {
	if d.dash.cancelRun == nil {
		return
	}
	done := make(chan struct{})
	go func() { d.dash.runs.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		d.log.Warn("shutdown grace over: stopping manual runs started from the dashboard")
	}
	d.dash.cancelRun()
	<-done
}

// dashSource is the daemon as the dashboard reads it.
type dashSource struct{ d *Daemon }

func (s dashSource) Current() (*spec.Spec, *reconcile.Engine) { return s.d.current() }

func (s dashSource) HostID() string { return s.d.cfg.HostID }

func (s dashSource) Leading() (backends.Term, bool) { return s.d.elector.Leading() }

// RunNow starts a manual run of task on this host, as `coordd cron run`
// would (the normal claim: overlap and the semaphore apply, the history
// records it as manual), and returns at once. The child's output goes to
// the run's record, not to the daemon's stdout; the outcome is logged.
func (s dashSource) RunNow(task string) error {
	d := s.d
	sp, e := d.current()
	t := sp.Cron[task]
	if t == nil {
		return fmt.Errorf("cron task %q is not declared in this host's spec: %w", task, backends.ErrNotFound)
	}
	b := e.Backends[t.Backend]
	if b == nil {
		return fmt.Errorf("backend %q of cron task %q is not open on this host", t.Backend, task)
	}
	d.mu.Lock()
	if d.stopping {
		d.mu.Unlock()
		return ErrShuttingDown
	}
	d.dash.runs.Add(1)
	d.mu.Unlock()
	go func() {
		defer d.dash.runs.Done()
		code, err := d.sched.RunManual(d.dash.runCtx, b, task, io.Discard, io.Discard)
		if err != nil {
			d.log.Error("manual run from the dashboard failed", "task", task, "error", err)
			return
		}
		d.log.Info("manual run from the dashboard ended", "task", task, "exit_code", code)
	}()
	return nil
}
