package daemon

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/coordd/coordd/backends"
)

// The host registry (backends.Cluster) from the daemon's side. Every
// daemon heartbeats its record into the cluster backend at start, every
// Config.HeartbeatEvery (30 s: one statement, so an idle MySQL daemon stays
// under one query a second), at once after a reload, and a last time, marked
// stopped, at a clean shutdown. The record is informational: status and
// metrics read it, nothing else does, and a heartbeat that fails is logged
// and never stops the daemon.
//
// Every appliedCheckBeats heartbeats (and after a reload, and after the
// leader applied) the daemon also reads the latest apply record (one
// statement) and compares its spec hash with the local one: the result is
// coordd_spec_hash_matches_applied, and a difference is logged once it has
// held for two checks in a row, so that a rollout in flight (a reload seen
// just before the leader applies it) is not reported.

// defaultHeartbeatEvery is Config.HeartbeatEvery's default.
const defaultHeartbeatEvery = 30 * time.Second

// appliedCheckBeats is how many heartbeats pass between two reads of the
// latest apply record: every 2 minutes by default.
const appliedCheckBeats = 4

// defaultPruneEvery is Config.PruneEvery's default: how often a daemon
// deletes the records of hosts not seen for backends.HostRetention; every
// daemon does, at start and then hourly.
const defaultPruneEvery = time.Hour

// hashState is what the daemon knows of its spec hash against the applied
// one. Guarded by Daemon.mu.
type hashState struct {
	// known: the latest apply record was read at least once.
	known bool
	// local is the hash the last check compared; applied is the latest
	// apply record's hash ("" before the first apply).
	local, applied string
	// pending is the mismatch (local+" "+applied) one check has seen and
	// the next must confirm before it is logged; logged is the one last
	// logged ("" when none, or once it ended).
	pending, logged string
}

// hostLoop heartbeats and checks the applied hash until ctx ends. Without a
// registry on the cluster backend it returns at once.
func (d *Daemon) hostLoop(ctx context.Context) {
	if d.hosts == nil {
		return
	}
	t := time.NewTicker(d.cfg.HeartbeatEvery)
	defer t.Stop()
	beats := 0
	var pruned time.Time
	for {
		d.checkHostRecord(ctx)
		if d.heartbeat(ctx, false) {
			d.guard.beaten = true
		}
		if beats%appliedCheckBeats == 0 {
			d.checkApplied(ctx)
		}
		if pruned.IsZero() || time.Since(pruned) >= d.cfg.PruneEvery {
			pruned = time.Now()
			d.pruneRecords(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			beats++
		case <-d.hostKick:
			beats = 0
		}
	}
}

// kickHosts asks hostLoop for a heartbeat and an applied-hash check now.
func (d *Daemon) kickHosts() {
	select {
	case d.hostKick <- struct{}{}:
	default:
	}
}

// heartbeatTimeout bounds one heartbeat, so that a hung backend delays the
// next one at most this long.
func (d *Daemon) heartbeatTimeout() time.Duration {
	return min(d.cfg.HeartbeatEvery, 10*time.Second)
}

// hostRecord is this host's record as its next heartbeat sends it. The run
// id is the elector's holder id, so status can tell which record leads.
func (d *Daemon) hostRecord(stopped bool) backends.HostRecord {
	return backends.HostRecord{
		Host: d.cfg.HostID, RunID: d.elector.Holder(), PID: os.Getpid(), Version: d.cfg.Version,
		SpecHash: d.Spec().Hash(), HeartbeatEvery: d.cfg.HeartbeatEvery, Stopped: stopped,
	}
}

// heartbeat writes this host's record and reports whether it did. A
// failure is logged at warn the first time and at debug while it lasts;
// the recovery is logged at info.
func (d *Daemon) heartbeat(ctx context.Context, stopped bool) bool {
	hctx, cancel := context.WithTimeout(ctx, d.heartbeatTimeout())
	defer cancel()
	start := time.Now()
	err := d.hosts.Heartbeat(hctx, d.hostRecord(stopped))
	d.metrics.RoundTrip(d.clusterName, "heartbeat", time.Since(start))
	switch {
	case err != nil && ctx.Err() != nil:
	case err != nil && d.beatFailing:
		d.log.Debug("host heartbeat failed again", "error", err)
	case err != nil:
		d.beatFailing = true
		d.log.Warn("host heartbeat failed; status shows this host stale until one succeeds", "error", err)
	case d.beatFailing:
		d.beatFailing = false
		d.log.Info("host heartbeat works again")
	}
	return err == nil
}

// checkApplied reads the latest apply record and compares its hash with
// the local spec's.
func (d *Daemon) checkApplied(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, d.heartbeatTimeout())
	defer cancel()
	last, err := d.hosts.LastApply(rctx)
	if err != nil {
		if ctx.Err() == nil {
			d.log.Debug("reading the latest apply record", "error", err)
		}
		return
	}
	applied, gen := "", int64(0)
	if last != nil {
		applied, gen = last.SpecHash, last.Generation
	}
	local := d.Spec().Hash()
	d.mu.Lock()
	hs := &d.hashes
	hs.known, hs.local, hs.applied = true, local, applied
	mismatch := ""
	if applied != "" && applied != local {
		mismatch = local + " " + applied
	}
	confirmed := mismatch != "" && mismatch == hs.pending && mismatch != hs.logged
	// Before the first apply (or after Redis lost the apply log) nothing
	// is compared: no mismatch, and no end of one either.
	ended := applied != "" && mismatch == "" && hs.logged != ""
	hs.pending = mismatch
	if confirmed {
		hs.logged = mismatch
	}
	if ended {
		hs.logged = ""
	}
	d.mu.Unlock()
	switch {
	case confirmed:
		why := "not applied (a rollout in flight, an apply the leader refused, or an apply to run)"
		if _, err := d.engineState().FindApply(rctx, local); err == nil {
			why = "a stale checkout: applied before and superseded"
		}
		d.log.Warn("this host's spec differs from the applied one: "+why,
			"local_hash", short(local), "applied_hash", short(applied), "applied_generation", gen)
	case ended:
		d.log.Info("this host's spec matches the applied one again", "spec_hash", short(local), "applied_generation", gen)
	}
}

// engineState is the applied-state store of the cluster backend.
func (d *Daemon) engineState() backends.Cluster {
	_, e := d.current()
	return e.State
}

// pruneRecords deletes the records of hosts not seen for
// backends.HostRetention, the records of events notified more than
// backends.NoticeRetention ago, and the queue counts older than
// backends.QueueCountRetention and the push-once records older than
// backends.PushOnceRetention on every backend that holds queues, and
// the idle records of rate limits (backends.RateLimits.PruneRateKeys).
func (d *Daemon) pruneRecords(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, d.heartbeatTimeout())
	defer cancel()
	n, err := d.hosts.PruneHosts(pctx, backends.HostRetention)
	switch {
	case err != nil && ctx.Err() == nil:
		d.log.Debug("pruning old host records", "error", err)
	case n > 0:
		d.log.Info("forgot hosts not seen for a day", "hosts", n, "retention", backends.HostRetention)
	}
	if _, err := d.hosts.PruneNotices(pctx, backends.NoticeRetention); err != nil && ctx.Err() == nil {
		d.log.Debug("pruning old records of notified events", "error", err)
	}
	_, e := d.current()
	for name, b := range e.Backends {
		if b == nil || b.Queues() == nil {
			continue
		}
		q := b.Queues()
		if _, err := q.PruneQueueCounts(pctx, backends.QueueCountRetention); err != nil && ctx.Err() == nil {
			d.log.Debug("pruning old queue counts", "backend", name, "error", err)
		}
		if _, err := q.PrunePushOnce(pctx, backends.PushOnceRetention); err != nil && ctx.Err() == nil {
			d.log.Debug("pruning old push-once records", "backend", name, "error", err)
		}
	}
	for name, b := range e.Backends {
		rl := backends.RateLimitsOf(b)
		if b == nil || rl == nil {
			continue
		}
		if _, err := rl.PruneRateKeys(pctx); err != nil && ctx.Err() == nil {
			d.log.Debug("pruning idle rate limit records", "backend", name, "error", err)
		}
	}
}

// lastHeartbeat marks this host stopped at a clean shutdown, so that status
// shows it stopped rather than stale. It is best effort and bounded.
func (d *Daemon) lastHeartbeat(ctx context.Context) {
	if d.hosts == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := d.hosts.Heartbeat(ctx, d.hostRecord(true)); err != nil && !errors.Is(err, context.Canceled) {
		d.log.Debug("last heartbeat", "error", err)
	}
}

// SpecHashes implements metrics.HostSource: the local spec's hash and the
// applied one as last read.
func (s source) SpecHashes() (local, applied string, known bool) {
	local = s.d.Spec().Hash()
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	return local, s.d.hashes.applied, s.d.hashes.known
}

// HostRegistry implements metrics.HostSource.
func (s source) HostRegistry() (string, backends.Cluster) {
	return s.d.clusterName, s.d.hosts
}
