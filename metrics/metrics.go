// Package metrics is coordd's Prometheus metrics and health endpoint.
//
// Nothing listens unless `coordd run --listen ADDR` asks for it: three
// daemons on one host must not fight over a port. The listener serves
// /metrics (the Prometheus text format, from a registry of coordd's own,
// not the global default one) and /healthz.
//
// Two kinds of metrics live here:
//   - events the daemon reports as they happen, through the methods of
//     Metrics (CronStarted, CronFinished, Reconciled, RoundTrip): counters
//     and histograms;
//   - state read at scrape time from a Source: leadership, the last spec
//     reload and one in progress, and the semaphores, queues and cron tasks (paused or not),
//     which a collector observes on their backends (one ObserveSemaphores,
//     one ObserveQueues and one ObserveCrons call per backend, all
//     backends at once), and the data-loss marker of a backend that can
//     lose its data, bounded by ObserveTimeout so that a slow backend
//     cannot hang a scrape;
//   - the host registry (a Source that is also a HostSource): this host's
//     spec hash against the applied one, as the daemon last read it, and
//     the hosts of the cluster, read from the cluster backend at scrape
//     time within the same bound.
//
// The backends expose no per-call timing, so
// coordd_backend_round_trip_seconds measures what the daemon itself can
// time: the collector's observe calls and the leader lease calls (elect,
// renew, current, resign). It is not a histogram of every query.
//
// Only this package imports prometheus; the daemon and the scheduler call
// small interfaces.
package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/coordd/coordd/backends"
)

// ObserveTimeout bounds the backend reads of one scrape.
const ObserveTimeout = 3 * time.Second

// Source is what the collector reads at scrape time. The daemon
// implements it.
type Source interface {
	// Leading returns the current term and whether this host leads.
	Leading() (term int64, leading bool)
	// LastReload returns the outcome of the last spec (re)load and the time
	// of the last successful one.
	LastReload() (ok bool, lastSuccess time.Time)
	// Health is liveness (/healthz): nil while the daemon runs and is not
	// wedged, and otherwise an error whose message is the reason.
	Health() error
	// Ready is readiness (/readyz): nil when the daemon can do its work
	// (its last spec load good, its backends reachable and migrated).
	Ready(ctx context.Context) error
	// Objects lists, per backend, the semaphores, queues and cron tasks of
	// the last good spec.
	Objects() []Objects
}

// HostSource is implemented by a Source whose cluster backend keeps a host
// registry (backends.Cluster). It is a separate interface so that a
// Source without one still works.
type HostSource interface {
	// SpecHashes returns this host's spec hash and the latest applied one
	// as last read ("" before the first apply); known is false until the
	// applied one was read once.
	SpecHashes() (local, applied string, known bool)
	// HostRegistry returns the cluster backend's name and registry (nil:
	// none).
	HostRegistry() (backend string, r backends.Cluster)
}

// ReloadSource is implemented by a Source that can tell a spec reload in
// progress, for coordd_config_reload_in_progress_seconds.
type ReloadSource interface {
	// ReloadRunning is how long the reload in progress has run; 0 when
	// none runs.
	ReloadRunning() time.Duration
}

// Objects are the semaphores and queues that one backend holds.
type Objects struct {
	Backend    string
	B          backends.Backend
	Semaphores []string
	Queues     []string
	// Crons are the cron tasks, for coordd_cron_paused.
	Crons []string
	// RateLimits are the rate limits, for coordd_rate_limit_*.
	RateLimits []string
}

// Metrics holds coordd's registry and its event metrics. Its methods are
// safe for concurrent use.
type Metrics struct {
	reg *prometheus.Registry
	src Source

	reconcileRuns   *prometheus.CounterVec
	reconcileErrors *prometheus.CounterVec
	cronLateness    *prometheus.HistogramVec
	cronRuns        *prometheus.CounterVec
	roundTrip       *prometheus.HistogramVec
	hostIDConflict  prometheus.Gauge
	hooks           *prometheus.CounterVec

	// lastOK is the latest successful run seen per backend and task
	// (lastSuccess): a scrape reads only each task's latest run.
	lastOKMu sync.Mutex
	lastOK   map[[2]string]time.Time
}

// New returns the metrics of a daemon that src describes.
func New(src Source) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		src: src,
		reconcileRuns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordd_reconcile_runs_total",
			Help: "Reconcile runs by the leader, by kind (apply: a new spec hash; resync: drift repair).",
		}, []string{"kind"}),
		reconcileErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordd_reconcile_errors_total",
			Help: "Reconcile runs that failed or were refused, by kind (apply, resync).",
		}, []string{"kind"}),
		cronLateness: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "coordd_cron_lateness_seconds",
			Help:    "Start time minus scheduled time of first attempts of cron occurrences started on this host.",
			Buckets: []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300},
		}, []string{"task"}),
		cronRuns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordd_cron_runs_total",
			Help: "Cron runs finished on this host, by task and status (succeeded, failed, timeout, lost, not-recorded).",
		}, []string{"task", "status"}),
		roundTrip: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "coordd_backend_round_trip_seconds",
			Help:    "Duration of the backend calls the daemon times: the scrape's observe calls and the leader lease calls.",
			Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5},
		}, []string{"backend", "op"}),
		hostIDConflict: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "coordd_host_id_conflict",
			Help: "1 while another live daemon rewrites this daemon's host record: two daemons run with one --host-id.",
		}),
		hooks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordd_hook_deliveries_total",
			Help: "on_failure hooks run by this host (the leader), by object, event kind and result (ok, failed: the command or the webhook failed after its retries).",
		}, []string{"object", "event", "result"}),
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.reconcileRuns, m.reconcileErrors, m.cronLateness, m.cronRuns, m.roundTrip, m.hostIDConflict, m.hooks,
		&collector{m: m},
	)
	for _, k := range []string{"apply", "resync"} {
		m.reconcileRuns.WithLabelValues(k)
		m.reconcileErrors.WithLabelValues(k)
	}
	return m
}

// HostIDConflict sets coordd_host_id_conflict: whether another live
// daemon runs with this daemon's host id.
func (m *Metrics) HostIDConflict(on bool) {
	v := 0.0
	if on {
		v = 1
	}
	m.hostIDConflict.Set(v)
}

// Registry is the registry /metrics serves.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// CronStarted records the lateness of an occurrence's first attempt.
// Retries start late by design (backoff) and are not observed.
func (m *Metrics) CronStarted(task string, scheduledAt time.Time, attempt int, startedAt time.Time) {
	if attempt > 1 {
		return
	}
	m.cronLateness.WithLabelValues(task).Observe(max(startedAt.Sub(scheduledAt).Seconds(), 0))
}

// lastSuccess returns when task's latest successful run finished, as far
// as this process has seen: the task's latest run is read at each scrape
// (one indexed read) and a success is remembered.
func (m *Metrics) lastSuccess(ctx context.Context, cr backends.Crons, backend, task string) (time.Time, bool, error) {
	runs, err := cr.History(ctx, task, 1)
	if err != nil {
		return time.Time{}, false, err
	}
	k := [2]string{backend, task}
	m.lastOKMu.Lock()
	defer m.lastOKMu.Unlock()
	if len(runs) == 1 && runs[0].Status == backends.RunSucceeded && runs[0].FinishedAt.After(m.lastOK[k]) {
		if m.lastOK == nil {
			m.lastOK = map[[2]string]time.Time{}
		}
		m.lastOK[k] = runs[0].FinishedAt
	}
	at, found := m.lastOK[k]
	return at, found, nil
}

// HookDelivered counts one on_failure hook run (notify.Observer).
func (m *Metrics) HookDelivered(object, kind string, ok bool) {
	result := "ok"
	if !ok {
		result = "failed"
	}
	m.hooks.WithLabelValues(object, kind, result).Inc()
}

// CronFinished counts a finished run by its status.
func (m *Metrics) CronFinished(task, status string) {
	m.cronRuns.WithLabelValues(task, status).Inc()
}

// Reconciled counts one reconcile run of kind ("apply" or "resync") and,
// when err is not nil, one error.
func (m *Metrics) Reconciled(kind string, err error) {
	m.reconcileRuns.WithLabelValues(kind).Inc()
	if err != nil {
		m.reconcileErrors.WithLabelValues(kind).Inc()
	}
}

// RoundTrip records the duration of one backend call.
func (m *Metrics) RoundTrip(backend, op string, d time.Duration) {
	m.roundTrip.WithLabelValues(backend, op).Observe(d.Seconds())
}

var (
	descLeader = prometheus.NewDesc("coordd_leader",
		"1 while this host holds the leader lease inside its trust window, else 0.", nil, nil)
	descTerm = prometheus.NewDesc("coordd_leader_term",
		"The term this host leads in; 0 while it does not lead.", nil, nil)
	descReloadOK = prometheus.NewDesc("coordd_config_last_reload_successful",
		"1 if the last spec (re)load succeeded, else 0 (the last good spec keeps running).", nil, nil)
	descReloadAt = prometheus.NewDesc("coordd_config_last_reload_success_timestamp_seconds",
		"Unix time of the last successful spec (re)load.", nil, nil)
	descReloading = prometheus.NewDesc("coordd_config_reload_in_progress_seconds",
		"How long the spec reload in progress has run, 0 when none runs. A reload ends at its read deadline (10s by default); one that runs past twice that is stuck, and /healthz fails meanwhile.", nil, nil)
	descObserveOK = prometheus.NewDesc("coordd_backend_observe_successful",
		"1 if this scrape observed the backend's semaphores, queues and cron tasks, 0 on an error or timeout.", []string{"backend"}, nil)
	descSemLimit = prometheus.NewDesc("coordd_semaphore_limit",
		"The effective limit applied on the backend (0 while draining).", []string{"semaphore", "backend"}, nil)
	descSemHolders = prometheus.NewDesc("coordd_semaphore_holders",
		"Held slots whose lease has not expired.", []string{"semaphore", "backend"}, nil)
	descSemWaiters = prometheus.NewDesc("coordd_semaphore_waiters",
		"Live waiter records (backends that record waiters; 0 elsewhere).", []string{"semaphore", "backend"}, nil)
	descSemInstances = prometheus.NewDesc("coordd_semaphore_instances",
		"Live instances of a keyed semaphore: keys with a holder or a waiter (holders and waiters count those of every instance).", []string{"semaphore", "backend"}, nil)
	descQReady = prometheus.NewDesc("coordd_queue_ready",
		"Jobs ready now: waiting to be claimed, delayed ones not included (coordd status and queue stats show the same).", []string{"queue", "backend"}, nil)
	descQDelayed = prometheus.NewDesc("coordd_queue_delayed",
		"Jobs waiting out a delay or a retry backoff.", []string{"queue", "backend"}, nil)
	descQInFlight = prometheus.NewDesc("coordd_queue_in_flight",
		"Jobs claimed by a worker and not yet acked.", []string{"queue", "backend"}, nil)
	descQDead = prometheus.NewDesc("coordd_queue_dead",
		"Jobs that used up their attempts.", []string{"queue", "backend"}, nil)
	descQPaused = prometheus.NewDesc("coordd_queue_paused",
		"1 while the queue is paused (coordd queue pause): its workers claim nothing; else 0.", []string{"queue", "backend"}, nil)
	descQAge = prometheus.NewDesc("coordd_queue_oldest_ready_age_seconds",
		"Age of the oldest ready job by this host's clock; 0 when none is ready.", []string{"queue", "backend"}, nil)
	descRateAvailable = prometheus.NewDesc("coordd_rate_limit_available",
		"Permits an unkeyed rate limit would grant at once now (its burst when idle, 0 when callers wait); absent for a keyed one.", []string{"rate_limit", "backend"}, nil)
	descRateBusyKeys = prometheus.NewDesc("coordd_rate_limit_busy_keys",
		"Keys of a keyed rate limit that are not idle (granted a permit within their burst's time); absent for an unkeyed one.", []string{"rate_limit", "backend"}, nil)
	descCronPaused = prometheus.NewDesc("coordd_cron_paused",
		"1 while the cron task is paused (coordd cron pause, or paused: true in the spec): the scheduler starts none of its occurrences; else 0.", []string{"task", "backend"}, nil)
	descCronNext = prometheus.NewDesc("coordd_cron_next_run_timestamp_seconds",
		"Unix time (backend clock) of the cron task's next scheduled time not yet claimed (next_exec): far in the past while no server runs the task (every host down, paused, no leader), which is how silence shows. Absent while the task has no next time (a task that runs after others, waiting for them).", []string{"task", "backend"}, nil)
	descCronLastSuccess = prometheus.NewDesc("coordd_cron_last_success_timestamp_seconds",
		"Unix time at which the cron task's latest successful run finished, as this process has seen it: each scrape reads the task's latest run in the backend's history; absent until a successful one was seen since the process started.", []string{"task", "backend"}, nil)
	descLossHold = prometheus.NewDesc("coordd_backend_loss_hold_until_timestamp_seconds",
		"Unix time (backend clock) at which the backend's data-loss hold ends, while one runs (cause: lost, the data is gone and its semaphores come back then; changed, a restart or failover that may have lost writes, and no slot is granted until then); absent otherwise.", []string{"backend", "cause"}, nil)
	descLossHoldLeft = prometheus.NewDesc("coordd_backend_loss_hold_seconds",
		"What is left of the backend's data-loss hold, by the backend's clock; 0 when none runs (backends that can lose their data only).", []string{"backend"}, nil)
	descHashMatches = prometheus.NewDesc("coordd_spec_hash_matches_applied",
		"1 if this host's spec hash is the latest applied one, 0 if it differs (a rollout in flight or a stale checkout); absent until the applied hash was read, or before the first apply.", nil, nil)
	descSpecInfo = prometheus.NewDesc("coordd_spec_info",
		"Always 1; the labels are this host's spec hash and the latest applied one (12 hex digits; applied_hash is empty until read).", []string{"local_hash", "applied_hash"}, nil)
	descHosts = prometheus.NewDesc("coordd_hosts",
		"Hosts in the cluster backend's host registry by state (live, stale: no heartbeat for 3 periods, stopped: shut down cleanly), read at scrape time.", []string{"state"}, nil)
	descHostHashes = prometheus.NewDesc("coordd_hosts_spec_hashes",
		"Distinct spec hashes that live hosts run, read at scrape time: above 1 during a rollout or with a stale checkout.", nil, nil)
)

// collector reads the Source at scrape time.
type collector struct{ m *Metrics }

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLeader, descTerm, descReloadOK, descReloadAt, descReloading, descObserveOK,
		descSemLimit, descSemHolders, descSemWaiters, descSemInstances, descQReady, descQDelayed, descQInFlight, descQDead, descQPaused, descQAge, descRateAvailable, descRateBusyKeys, descCronPaused, descCronNext, descCronLastSuccess,
		descLossHold, descLossHoldLeft, descHashMatches, descSpecInfo, descHosts, descHostHashes} {
		ch <- d
	}
}

func gauge(d *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	src := c.m.src
	term, leading := src.Leading()
	ch <- gauge(descLeader, b2f(leading))
	ch <- gauge(descTerm, float64(term))
	ok, at := src.LastReload()
	ch <- gauge(descReloadOK, b2f(ok))
	if !at.IsZero() {
		ch <- gauge(descReloadAt, float64(at.UnixNano())/1e9)
	}
	if rs, ok := src.(ReloadSource); ok {
		ch <- gauge(descReloading, rs.ReloadRunning().Seconds())
	}

	ctx, cancel := context.WithTimeout(context.Background(), ObserveTimeout)
	defer cancel()
	objs := src.Objects()
	// One job per backend, and one for the host registry. Buffered: an
	// observe that ignores its context finishes into the buffer after the
	// scrape gave up on it.
	type result struct {
		backend string
		ms      []prometheus.Metric
	}
	jobs := len(objs)
	results := make(chan result, jobs+1)
	for _, o := range objs {
		go func() { results <- result{o.Backend, c.observe(ctx, o)} }()
	}
	if hs, ok := src.(HostSource); ok {
		for _, m := range specHashes(hs) {
			ch <- m
		}
		if name, reg := hs.HostRegistry(); reg != nil {
			jobs++
			go func() { results <- result{"", c.hosts(ctx, name, reg)} }()
		}
	}
	done := map[string]bool{}
	for range jobs {
		select {
		case r := <-results:
			for _, m := range r.ms {
				ch <- m
			}
			done[r.backend] = true
		case <-ctx.Done():
			for _, o := range objs {
				if !done[o.Backend] {
					ch <- gauge(descObserveOK, 0, o.Backend)
				}
			}
			return
		}
	}
}

// specHashes is coordd_spec_info and, once the applied hash is known,
// coordd_spec_hash_matches_applied.
func specHashes(hs HostSource) []prometheus.Metric {
	local, applied, known := hs.SpecHashes()
	out := []prometheus.Metric{gauge(descSpecInfo, 1, short(local), short(applied))}
	if known && applied != "" {
		out = append(out, gauge(descHashMatches, b2f(local == applied)))
	}
	return out
}

// hosts reads the host registry: coordd_hosts by state and
// coordd_hosts_spec_hashes. Nothing on an error: the registry is
// informational, and a stale reading would mislead.
func (c *collector) hosts(ctx context.Context, backend string, reg backends.Cluster) []prometheus.Metric {
	start := time.Now()
	hs, err := reg.ListHosts(ctx)
	c.m.RoundTrip(backend, "list_hosts", time.Since(start))
	if err != nil {
		return nil
	}
	by := map[string]int{backends.HostLive: 0, backends.HostStale: 0, backends.HostStopped: 0}
	for _, h := range hs.Hosts {
		by[h.State(hs.Now)]++
	}
	out := make([]prometheus.Metric, 0, len(by)+1)
	for state, n := range by {
		out = append(out, gauge(descHosts, float64(n), state))
	}
	return append(out, gauge(descHostHashes, float64(len(hs.LiveSpecHashes()))))
}

// short is a spec hash as operators see it: its first 12 hex digits.
func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// observe reads one backend's semaphores, queues and cron tasks, one call
// each.
func (c *collector) observe(ctx context.Context, o Objects) []prometheus.Metric {
	out := []prometheus.Metric{nil}
	ok := true
	if sa := o.B.Semaphores(); sa != nil && len(o.Semaphores) > 0 {
		start := time.Now()
		states, err := sa.ObserveSemaphores(ctx, o.Semaphores)
		c.m.RoundTrip(o.Backend, "observe_semaphores", time.Since(start))
		if err != nil {
			ok = false
		}
		for _, n := range o.Semaphores {
			s := states[n]
			if s == nil {
				continue
			}
			out = append(out,
				gauge(descSemLimit, float64(s.Config.Limit), n, o.Backend),
				gauge(descSemHolders, float64(len(s.Holders)), n, o.Backend),
				gauge(descSemWaiters, float64(s.Waiters), n, o.Backend))
			if s.Config.Keyed {
				out = append(out, gauge(descSemInstances, float64(len(s.Instances)), n, o.Backend))
			}
		}
	}
	if qa := o.B.Queues(); qa != nil && len(o.Queues) > 0 {
		start := time.Now()
		states, err := qa.ObserveQueues(ctx, o.Queues)
		c.m.RoundTrip(o.Backend, "observe_queues", time.Since(start))
		if err != nil {
			ok = false
		}
		now := time.Now()
		for _, n := range o.Queues {
			q := states[n]
			if q == nil {
				continue
			}
			age := 0.0
			if !q.OldestReady.IsZero() {
				age = max(now.Sub(q.OldestReady).Seconds(), 0)
			}
			paused := 0.0
			if q.Paused != nil {
				paused = 1
			}
			out = append(out,
				gauge(descQPaused, paused, n, o.Backend),
				gauge(descQReady, float64(q.ReadyNow()), n, o.Backend),
				gauge(descQDelayed, float64(q.Delayed), n, o.Backend),
				gauge(descQInFlight, float64(q.InFlight), n, o.Backend),
				gauge(descQDead, float64(q.Dead), n, o.Backend),
				gauge(descQAge, age, n, o.Backend))
		}
	}
	if ra := backends.RateLimitsOf(o.B); ra != nil && len(o.RateLimits) > 0 {
		start := time.Now()
		states, err := ra.ObserveRateLimits(ctx, o.RateLimits)
		c.m.RoundTrip(o.Backend, "observe_rate_limits", time.Since(start))
		if err != nil {
			ok = false
		}
		for _, n := range o.RateLimits {
			r := states[n]
			switch {
			case r == nil:
			case r.Config.Keyed:
				out = append(out, gauge(descRateBusyKeys, float64(r.Keys), n, o.Backend))
			default:
				out = append(out, gauge(descRateAvailable, float64(r.Available), n, o.Backend))
			}
		}
	}
	if ca := o.B.Crons(); ca != nil && len(o.Crons) > 0 {
		start := time.Now()
		states, err := ca.ObserveCrons(ctx, o.Crons)
		c.m.RoundTrip(o.Backend, "observe_crons", time.Since(start))
		if err != nil {
			ok = false
		}
		for _, n := range o.Crons {
			st := states[n]
			if st == nil {
				continue
			}
			out = append(out, gauge(descCronPaused, b2f(st.IsPaused()), n, o.Backend))
			if !st.NextExec.IsZero() {
				out = append(out, gauge(descCronNext, float64(st.NextExec.UnixNano())/1e9, n, o.Backend))
			}
			if at, found, err := c.m.lastSuccess(ctx, ca, o.Backend, n); err != nil {
				ok = false
			} else if found {
				out = append(out, gauge(descCronLastSuccess, float64(at.UnixNano())/1e9, n, o.Backend))
			}
		}
	}
	if lg, isLoss := o.B.(backends.LossGuard); isLoss {
		start := time.Now()
		st, err := lg.ObserveLoss(ctx)
		c.m.RoundTrip(o.Backend, "observe_loss", time.Since(start))
		switch {
		case err != nil:
			ok = false
		case st.Holding():
			cause := st.Cause
			if cause == "" {
				cause = backends.LossCauseLost
			}
			out = append(out,
				gauge(descLossHold, float64(st.HoldUntil.UnixNano())/1e9, o.Backend, cause),
				gauge(descLossHoldLeft, st.HoldUntil.Sub(st.Now).Seconds(), o.Backend))
		default:
			out = append(out, gauge(descLossHoldLeft, 0, o.Backend))
		}
	}
	out[0] = gauge(descObserveOK, b2f(ok), o.Backend)
	return out
}
