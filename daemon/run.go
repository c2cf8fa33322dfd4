package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"github.com/coordd/coordd/internal/safetext"
	"github.com/coordd/coordd/metrics"
)

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
	r.wg.Add(1)
	go func() { defer r.wg.Done(); d.notifier.Run(runCtx) }()
	r.wg.Add(1)
	go func() { defer r.wg.Done(); d.sampleLoop(runCtx) }()
	// The listener outlives runCtx: /healthz reports 503 while running
	// commands finish, and it closes when Run returns.
	srvCtx, stopServer := context.WithCancel(context.WithoutCancel(ctx))
	r.stopServer = stopServer
	if d.ln != nil {
		dash := "off"
		if d.dash.h != nil {
			dash = "http://" + d.ln.Addr().String() + "/"
		}
		d.log.Info("serving /metrics and /healthz", "addr", d.ln.Addr().String(), "dashboard", dash)
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
	d.notifier.Wait(graceCtx)
	cancelGrace()
	r.stopElector()
	r.stopServer()
	r.wg.Wait()
	d.lastHeartbeat(ctx)
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.engine.Close()
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
