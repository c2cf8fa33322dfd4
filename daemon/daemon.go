// Package daemon is `coordd run`: one process per server that keeps the
// spec loaded, takes part in leader election, runs the scheduler, and lets
// the leader apply and resync.
//
// Reload follows Prometheus: the spec path is watched, changes are debounced
// (~250 ms), and the new spec is loaded and validated before it replaces the
// old one. Any error keeps the last good spec running and is logged with its
// file:line. SIGHUP forces a reload. Reloads run on a goroutine of their
// own, never in the signal loop, so that SIGTERM is handled even while a
// reload is stuck.
//
// Who applies, and what:
//   - only the leader applies, and only a spec hash that was never applied
//     before. A hash that was applied and later superseded is a stale
//     checkout (a server that missed a deploy): it is reported, never
//     applied. An operator can still `coordd apply` it by hand.
//   - gaining leadership never re-applies anything.
//   - automatic apply follows the same safety rules as `coordd apply` without
//     flags: an empty spec, prevent_destroy and queues with jobs block it.
//   - a periodic resync repairs drift toward the applied record, not toward
//     the local files (reconcile.Options.Resync).
package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/dashboard"
	"github.com/coordd/coordd/leadership"
	"github.com/coordd/coordd/metrics"
	"github.com/coordd/coordd/notify"
	"github.com/coordd/coordd/ratelimit"
	"github.com/coordd/coordd/reconcile"
	"github.com/coordd/coordd/scheduler"
	"github.com/coordd/coordd/semaphore"
	"github.com/coordd/coordd/spec"
)

// Config configures a daemon.
type Config struct {
	SpecPath string
	HostID   string
	Version  string
	Log      hclog.Logger
	// LoadOptions are passed to spec.Load on every (re)load.
	LoadOptions spec.LoadOptions
	// ResyncEvery is how often the leader repairs drift; default 1m (at 30s
	// an idle MySQL leader would send more than one query a second).
	ResyncEvery time.Duration
	// ShutdownGrace bounds how long running commands may finish after
	// SIGTERM; default 30s.
	ShutdownGrace time.Duration
	// Debounce and Poll tune the spec watcher; defaults 250ms and 5s.
	Debounce, Poll time.Duration
	// Listen is the address of the /metrics and /healthz listener; empty:
	// no listener.
	Listen string
	// Dashboard, with Listen, serves the web dashboard at / on the same
	// listener (dashboard.go); nil: none.
	Dashboard *dashboard.Options
	// HeartbeatEvery is how often the host record is written to the
	// cluster backend (hosts.go); default 30s. Tests shorten it.
	HeartbeatEvery time.Duration
	// PruneEvery is how often the daemon deletes host records not seen
	// for backends.HostRetention, after doing so at start (hosts.go);
	// default 1h. Tests shorten it.
	PruneEvery time.Duration
	// NotifyEvery is how often the leader looks for failure events to
	// deliver to on_failure hooks; default 5s.
	NotifyEvery time.Duration
	// Signals, when not nil, is a channel the caller registered for
	// SIGHUP, SIGTERM and SIGINT (signal.Notify) before starting up, so
	// that a signal that comes during startup is not lost; nil: Run
	// registers its own.
	Signals <-chan os.Signal
}

// Daemon is one running `coordd run`.
type Daemon struct {
	cfg Config
	log hclog.Logger

	mu     sync.Mutex
	spec   *spec.Spec // the last good spec
	engine *reconcile.Engine
	// lastReload reports the last reload's outcome, for status and metrics.
	lastReloadOK  bool
	lastReloadAt  time.Time
	lastReloadErr error
	lastGoodAt    time.Time // the last successful (re)load
	// reloadingSince is when the reload in progress began; zero when none
	// runs. A reload past its read deadline shows in /healthz.
	reloadingSince time.Time
	// stopping is set once shutdown begins; /healthz then reports 503.
	stopping bool

	metrics *metrics.Metrics
	ln      net.Listener // nil without Config.Listen
	dash    dashState    // the web dashboard (dashboard.go)

	elector *leadership.Elector
	changes <-chan bool // leadership changes, subscribed before the elector runs
	sched   *scheduler.Scheduler
	// notifier delivers failure events to on_failure hooks (notify.go).
	notifier *notify.Notifier
	kick     chan struct{} // leader work: apply check, resync
	// resyncKick asks the leader for a resync now (a data-loss hold ended).
	resyncKick chan struct{}
	// lossLogged is the end of the last data-loss hold logged per backend
	// (logLoss), under lossMu.
	lossMu     sync.Mutex
	lossLogged map[string]time.Time

	// checkedHash is the local spec hash that maybeApply last found
	// applied (or applied, or found superseded), at checkedAt (monotonic):
	// until the spec or the leadership changes, or appliedRecheck passes,
	// there is nothing to check again. Only leaderLoop uses them.
	checkedHash string
	checkedAt   time.Time

	// hosts is the cluster backend's host registry (nil: it has none),
	// clusterName that backend's name; hostKick asks hostLoop for a
	// heartbeat now (hosts.go).
	hosts       backends.Cluster
	clusterName string
	hostKick    chan struct{}
	// hashes is the local spec hash against the applied one (under mu).
	hashes hashState
	// beatFailing: the last heartbeat failed (only hostLoop uses it).
	beatFailing bool
	// loadSpec loads the spec on a reload; nil means spec.LoadContext. A
	// test makes it block, standing for a reload stuck where no deadline
	// reaches.
	loadSpec func(context.Context, string, spec.LoadOptions) (*spec.Spec, error)
	// guard watches for another daemon with this host id (hostguard.go;
	// only hostLoop uses it).
	guard hostGuard
}

// New loads the spec and opens (and migrates) its backends. An invalid
// spec at start is an error: there is no last good spec to keep.
func New(ctx context.Context, cfg Config) (*Daemon, error) {
	// The host id names this daemon's records in every backend: refuse a
	// bad one before anything is opened.
	if err := spec.CheckHostID(cfg.HostID); err != nil {
		return nil, err
	}
	if cfg.Log == nil {
		cfg.Log = hclog.NewNullLogger()
	}
	if cfg.ResyncEvery <= 0 {
		cfg.ResyncEvery = time.Minute
	}
	if cfg.ShutdownGrace <= 0 {
		cfg.ShutdownGrace = 30 * time.Second
	}
	if cfg.Debounce <= 0 {
		cfg.Debounce = 250 * time.Millisecond
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 5 * time.Second
	}
	if cfg.HeartbeatEvery <= 0 {
		cfg.HeartbeatEvery = defaultHeartbeatEvery
	}
	if cfg.PruneEvery <= 0 {
		cfg.PruneEvery = defaultPruneEvery
	}
	// Bounded by LoadOptions.ReadTimeout, and by ctx: a signal during
	// startup stops a load stuck in the file system.
	s, err := spec.LoadContext(ctx, cfg.SpecPath, cfg.LoadOptions)
	if err != nil {
		return nil, err
	}
	e, err := reconcile.Open(ctx, s, reconcile.OpenOptions{Version: cfg.Version, Host: cfg.HostID})
	if err != nil {
		return nil, err
	}
	e.Loss = &reconcile.LossMemory{} // markers seen while this daemon runs
	now := time.Now()
	d := &Daemon{cfg: cfg, log: cfg.Log, spec: s, engine: e, lastReloadOK: true, lastReloadAt: now, lastGoodAt: now, kick: make(chan struct{}, 1), resyncKick: make(chan struct{}, 1), hostKick: make(chan struct{}, 1)}
	d.clusterName = s.Cluster.Backend
	d.hosts = e.State // the cluster backend's Cluster: reconcile.Open checked it holds one
	d.metrics = metrics.New(source{d})
	if d.elector, err = leadership.New(leadership.Config{Leader: timeLeader(e.State, s.Cluster.Backend, d.metrics), Host: cfg.HostID, Lease: s.Cluster.LeaderLease, Log: d.log.Named("leader")}); err != nil {
		e.Close()
		return nil, err
	}
	if cfg.Listen != "" {
		ln, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			e.Close()
			return nil, fmt.Errorf("--listen: %w", err)
		}
		d.ln = ln
		if cfg.Dashboard != nil {
			if err := d.openDashboard(); err != nil {
				ln.Close()
				e.Close()
				return nil, err
			}
		}
	}
	d.changes = d.elector.Subscribe()
	d.sched = scheduler.New(scheduler.Config{
		Host:      cfg.HostID,
		Elector:   d.elector,
		Backends:  d.cronBackends,
		Semaphore: d.semaphore,
		RateLimit: d.rateLimit,
		Queue:     d.queue,
		After:     d.afterTasks,
		Notices:   d.hosts,
		Log:       d.log.Named("scheduler"),
		Observer:  d.metrics,
		// The spec of the moment: a reload may change child_env.
		ChildEnvUnset: func() []string { return d.Spec().ChildEnvUnset() },
	})
	d.notifier = d.newNotifier()
	return d, nil
}

// Spec returns the last good spec.
func (d *Daemon) Spec() *spec.Spec {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.spec
}

// afterTasks lists the cron tasks of backend bn that the spec of the
// moment declares with after.
func (d *Daemon) afterTasks(bn string) []string {
	var out []string
	for n, t := range d.Spec().Cron {
		if t.Backend == bn && len(t.After) > 0 {
			out = append(out, n)
		}
	}
	return out
}

// cronBackends lists the opened backends that can hold cron tasks.
func (d *Daemon) cronBackends() map[string]backends.Backend {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]backends.Backend{}
	for n, b := range d.engine.Backends {
		if b.Crons() != nil {
			out[n] = b
		}
	}
	return out
}

// semaphore resolves a cron task's semaphore to a client on its backend
// and the config applied there. The scheduler puts `semaphore "NAME": ` in
// front of its errors, which therefore do not name it again.
// queue resolves the queue a cron task pushes to to the store holding it.
func (d *Daemon) queue(name string) (backends.Queues, error) {
	s, e := d.current()
	local := s.Queues[name]
	if local == nil {
		return nil, errors.New("not declared in the local spec")
	}
	b := e.Backends[local.Backend]
	if b == nil {
		return nil, fmt.Errorf("its backend %q is not open", local.Backend)
	}
	if b.Queues() == nil {
		return nil, fmt.Errorf("backend %q cannot hold queues", local.Backend)
	}
	return b.Queues(), nil
}

// rateLimit resolves a cron task's rate limit to a client on its backend.
func (d *Daemon) rateLimit(name string) (*ratelimit.Client, error) {
	s, e := d.current()
	local := s.RateLimits[name]
	if local == nil {
		return nil, errors.New("not declared in the local spec")
	}
	b := e.Backends[local.Backend]
	if b == nil {
		return nil, fmt.Errorf("its backend %q is not open", local.Backend)
	}
	return ratelimit.New(b)
}

func (d *Daemon) semaphore(name string) (*semaphore.Client, backends.SemaphoreConfig, error) {
	s, e := d.current()
	local := s.Semaphores[name]
	if local == nil {
		return nil, backends.SemaphoreConfig{}, errors.New("not declared in the local spec")
	}
	b := e.Backends[local.Backend]
	if b == nil {
		return nil, backends.SemaphoreConfig{}, fmt.Errorf("its backend %q is not open", local.Backend)
	}
	adm := b.Semaphores()
	if adm == nil {
		return nil, backends.SemaphoreConfig{}, fmt.Errorf("backend %q cannot hold semaphores", local.Backend)
	}
	m, err := adm.ObserveSemaphores(context.Background(), []string{name})
	if err != nil {
		return nil, backends.SemaphoreConfig{}, err
	}
	cfg := backends.SemaphoreConfig{}
	if m[name] != nil {
		cfg = m[name].Config
	} else if back, err := e.LossExplainsMissing(context.Background(), local.Backend); err != nil || !back {
		return nil, backends.SemaphoreConfig{}, errors.New("not applied; run coordd apply")
	} else {
		// Held after a data loss: the run waits for it in Acquire, and
		// the local declaration stands in for the applied one.
		cfg = backends.SemaphoreConfig{Limit: local.Limit, Lease: local.Lease, MaxHold: local.MaxHold}
	}
	c, err := semaphore.New(b, d.cfg.HostID)
	return c, cfg, err
}

// current returns the last good spec and an engine for it over the open
// backends. A fresh engine value per use keeps a reload from changing the
// spec under a running plan.
func (d *Daemon) current() (*spec.Spec, *reconcile.Engine) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := *d.engine
	e.Spec = d.spec
	return d.spec, &e
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}
