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
	"os/signal"
	"reflect"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/dashboard"
	"github.com/coordd/coordd/internal/safetext"
	"github.com/coordd/coordd/leadership"
	"github.com/coordd/coordd/metrics"
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
	kick    chan struct{} // leader work: apply check, resync
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
	hosts       backends.HostRegistry
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

// appliedRecheck is how long maybeApply trusts that the local spec's hash
// is settled (applied, or superseded) without reading the apply records.
const appliedRecheck = 10 * time.Minute

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
	cb := e.Backends[s.Cluster.Backend]
	d.clusterName = s.Cluster.Backend
	d.hosts, _ = cb.(backends.HostRegistry)
	lb, ok := cb.(backends.Leader)
	if !ok {
		e.Close()
		return nil, fmt.Errorf("cluster backend %q cannot hold the leader lease: %w", s.Cluster.Backend, backends.ErrUnsupported)
	}
	d.metrics = metrics.New(source{d})
	if d.elector, err = leadership.New(leadership.Config{Leader: timeLeader(lb, s.Cluster.Backend, d.metrics), Host: cfg.HostID, Lease: s.Cluster.LeaderLease, Log: d.log.Named("leader")}); err != nil {
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
		Log:       d.log.Named("scheduler"),
		Observer:  d.metrics,
		// The spec of the moment: a reload may change child_env.
		ChildEnvUnset: func() []string { return d.Spec().ChildEnvUnset() },
	})
	return d, nil
}

// Spec returns the last good spec.
func (d *Daemon) Spec() *spec.Spec {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.spec
}

// cronBackends lists the opened backends that can hold cron tasks.
func (d *Daemon) cronBackends() map[string]backends.Backend {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]backends.Backend{}
	for n, b := range d.engine.Backends {
		if _, ok := b.(backends.Crons); ok {
			out[n] = b
		}
	}
	return out
}

// semaphore resolves a cron task's semaphore to a client on its backend
// and the config applied there. The scheduler puts `semaphore "NAME": ` in
// front of its errors, which therefore do not name it again.
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
	adm, ok := b.(backends.SemaphoreAdmin)
	if !ok {
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

// Run runs until ctx ends or a shutdown signal arrives, then shuts down
// gracefully: stop claiming, let running commands finish within the grace
// period (a second signal ends it early), hand back the leader lease.
//
// When ctx ends because of a signal (signal.NotifyContext, as coordd's main
// does), that signal also reaches Run's own channel, perhaps after Run saw
// ctx end: it is the first signal, not a second one. SIGHUP during the
// grace period is a reload request, not a second signal, and is ignored.
func (d *Daemon) Run(ctx context.Context) error {
	sigs := d.cfg.Signals
	if sigs == nil {
		own := make(chan os.Signal, 4)
		signal.Notify(own, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
		defer signal.Stop(own)
		sigs = own
	}
	r := d.start(ctx)
	defer r.stop()
	defer r.stopServer()
	sig, dup := d.waitForStop(ctx, sigs, r)
	return d.shutdown(ctx, sigs, r, sig, dup)
}

// running is what start started and shutdown stops, in this order: stop
// (no new claims; the loops end), the scheduler's shutdown, stopElector
// (hands back the leader lease), stopServer, then wg.Wait.
type running struct {
	stop        context.CancelFunc // ends runCtx, the context of the loops and the scheduler
	stopElector context.CancelFunc
	stopServer  context.CancelFunc
	wg          sync.WaitGroup // the elector, watcher, loops and listener
	schedDone   chan error     // the scheduler's Run returned
	// requestReload asks reloadLoop for a reload (coalesced).
	requestReload func()
}

// start starts the elector, the scheduler, the reload loop, the spec
// watcher, the leader, marker and host loops and, with a listener, the
// HTTP server.
func (d *Daemon) start(ctx context.Context) *running {
	r := &running{schedDone: make(chan error, 1)}
	runCtx, stop := context.WithCancel(ctx)
	r.stop = stop
	elCtx, stopElector := context.WithCancel(context.WithoutCancel(ctx))
	r.stopElector = stopElector
	r.wg.Add(1)
	go func() { defer r.wg.Done(); d.elector.Run(elCtx) }()
	go func() { r.schedDone <- d.sched.Run(runCtx) }()
	// Reloads run one at a time on their own goroutine, never in the
	// signal loop (waitForStop) or in the watcher: a reload stuck in the
	// file system must not keep SIGTERM from being handled. Requests made
	// while one runs coalesce into one more. Shutdown does not wait for
	// it, for the same reason; a reload that ends after shutdown began
	// changes nothing (reload checks stopping).
	reloads := make(chan struct{}, 1)
	r.requestReload = func() {
		select {
		case reloads <- struct{}{}:
		default:
		}
	}
	go d.reloadLoop(runCtx, reloads)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		w := &watcher{path: d.cfg.SpecPath, debounce: d.cfg.Debounce, poll: d.cfg.Poll}
		if err := w.run(runCtx, r.requestReload); err != nil {
			d.log.Error("spec watcher stopped", "error", err)
		}
	}()
	r.wg.Add(1)
	go func() { defer r.wg.Done(); d.leaderLoop(runCtx) }()
	r.wg.Add(1)
	go func() { defer r.wg.Done(); d.markerLoop(runCtx) }()
	r.wg.Add(1)
	go func() { defer r.wg.Done(); d.hostLoop(runCtx) }()
	// The listener outlives runCtx: /healthz reports 503 while running
	// commands finish, and it closes when Run returns.
	srvCtx, stopServer := context.WithCancel(context.WithoutCancel(ctx))
	r.stopServer = stopServer
	if d.ln != nil {
		d.log.Info("serving /metrics and /healthz", "addr", d.ln.Addr().String(), "dashboard", d.dash.h != nil)
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			if err := metrics.ServeHandler(srvCtx, d.ln, d.handler()); err != nil {
				d.log.Error("metrics listener stopped", "error", err)
			}
		}()
	}
	d.log.Info("coordd running", "host", d.cfg.HostID, "spec", safetext.Line(d.cfg.SpecPath), "spec_hash", short(d.Spec().Hash()), "version", d.cfg.Version)
	return r
}

// waitForStop waits until ctx ends or a shutdown signal arrives; SIGHUP
// meanwhile requests a reload. It returns the signal that asked for the
// shutdown (nil when ctx ended) and dup, the name of the signal that ended
// ctx, whose copy on sigs is not a second signal (signalCause).
func (d *Daemon) waitForStop(ctx context.Context, sigs <-chan os.Signal, r *running) (sig os.Signal, dup string) {
	schedDone := r.schedDone
	for {
		select {
		case <-ctx.Done():
			return nil, signalCause(ctx)
		case err := <-schedDone:
			if err != nil && ctx.Err() == nil {
				d.log.Error("scheduler stopped", "error", err)
			}
			schedDone = nil
		case s := <-sigs:
			if s == syscall.SIGHUP {
				d.log.Info("SIGHUP: reloading the spec")
				r.requestReload()
				continue
			}
			return s, ""
		}
	}
}

// shutdown stops claiming, lets running commands finish within the grace
// period (a second signal on sigs, other than SIGHUP or the copy dup of
// the one that ended ctx, ends it early), hands back the leader lease,
// stops what start started and closes the backends.
func (d *Daemon) shutdown(ctx context.Context, sigs <-chan os.Signal, r *running, sig os.Signal, dup string) error {
	d.log.Info("shutting down: no new claims; running commands may finish", "grace", d.cfg.ShutdownGrace, "signal", fmt.Sprint(sig))
	d.mu.Lock()
	d.stopping = true
	d.mu.Unlock()
	r.stop()
	graceCtx, cancelGrace := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.ShutdownGrace)
	go func() {
		for {
			select {
			case s := <-sigs:
				switch {
				case s == syscall.SIGHUP:
					continue
				case dup != "" && s.String() == dup:
					dup = ""
					continue
				}
				d.log.Warn("second signal: killing running commands", "signal", s.String())
				cancelGrace()
				return
			case <-graceCtx.Done():
				return
			}
		}
	}()
	if err := d.sched.Shutdown(graceCtx); err != nil {
		d.log.Warn("shutdown", "error", err)
	}
	d.waitManualRuns(graceCtx)
	cancelGrace()
	r.stopElector()
	r.stopServer()
	r.wg.Wait()
	d.lastHeartbeat(ctx)
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.engine.Close()
}

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

// repairWakeups wakes semaphore waiters that a lost release left asleep, on
// every backend that parks them, for the semaphores of mode session with
// wake kill in the spec.
func (d *Daemon) repairWakeups(ctx context.Context) {
	s, e := d.current()
	names := map[string][]string{}
	for n, sem := range s.Semaphores {
		if sem.Mode == spec.ModeSession && sem.Wake == spec.WakeKill {
			names[sem.Backend] = append(names[sem.Backend], n)
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

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// reconcileErr is the error a reconcile run counts: waiting for a
// data-loss hold to end is not one.
func reconcileErr(err error) error {
	if errors.Is(err, reconcile.ErrLossHold) {
		return nil
	}
	return err
}

// signalCause names the signal that ended ctx when signal.NotifyContext
// ended it (its cause reads "<signal> signal received"), "" otherwise.
func signalCause(ctx context.Context) string {
	cause := context.Cause(ctx)
	if cause == nil || cause == context.Canceled || !errors.Is(cause, context.Canceled) {
		return ""
	}
	name, ok := strings.CutSuffix(cause.Error(), " signal received")
	if !ok {
		return ""
	}
	return name
}
