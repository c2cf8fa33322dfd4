package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/internal/clusterview"
	"github.com/coordd/coordd/spec"
)

var statusCmd = &command{
	name:    "status",
	summary: "show the leader, the spec hashes and every object's state",
	usage: `Usage: coordd status [-f PATH] [--json] [--host-id ID]

Shows the leader and its term, this host, the local and the applied spec
hashes (a difference means a rollout in flight or a stale checkout), the
hosts whose daemons heartbeat into the cluster backend (leader, version,
spec hash, last seen; "stale" after three missed heartbeats), with a warning
when live hosts run different spec hashes, and a line per semaphore, cron
task and queue. It changes nothing.
`,
	run: func(ctx context.Context, c *command, env *cliEnv, args []string) int {
		fs := newFlags(c, env)
		path := specFlag(fs, env)
		asJSON := fs.Bool("json", false, "print JSON")
		host := fs.String("host-id", "", "this server's id (default: the hostname)")
		pos, _, err := parseArgs(fs, args)
		if err != nil {
			return flagExit(err)
		}
		if !noPositional(env, c.name, pos) {
			return 1
		}
		hid, err := hostID(env, *host)
		if err != nil {
			fmt.Fprintf(env.stderr, "coordd status: %v\n", err)
			return 1
		}
		s, ok := loadSpec(ctx, env, *path, false)
		if !ok {
			return 1
		}
		e, ok := openEngine(ctx, env, s, true)
		if !ok {
			return 1
		}
		defer e.Close()
		st, err := collectStatus(ctx, s, e.Backends, e.State, hid)
		if err != nil {
			fmt.Fprintf(env.stderr, "coordd status: %v\n", err)
			return 1
		}
		if *asJSON {
			_ = writeJSON(env.stdout, st)
			return 0
		}
		st.writeText(env)
		return 0
	},
}

// statusReport is `coordd status --json`.
type statusReport struct {
	Host      string         `json:"host"`
	Leader    *backends.Term `json:"leader"`
	LocalHash string         `json:"local_spec_hash"`
	// ClusterStore is the file of the cluster backend when it is an
	// embedded store: status next to a daemon reads the daemon's only
	// when both resolve the same data directory. StoreMissing: it does
	// not exist (status opens it read-only and creates nothing).
	ClusterStore string                `json:"cluster_store,omitempty"`
	StoreMissing bool                  `json:"cluster_store_missing,omitempty"`
	Applied      *backends.ApplyRecord `json:"applied"`
	HashWarning  string                `json:"hash_warning,omitempty"`
	// Hosts are the cluster backend's host records, by host id ([] when
	// none was recorded yet, or the backend keeps none).
	Hosts []hostStatus `json:"hosts"`
	// HostSpecHashes groups the live hosts by the spec hash they run, the
	// applied one first.
	HostSpecHashes []hashGroup `json:"host_spec_hashes"`
	// HostsWarning is set when live hosts run different spec hashes.
	HostsWarning string `json:"hosts_warning,omitempty"`
	// LossHolds are the backends that hold their semaphores after a data
	// loss, a restart or a failover ([] when none does).
	LossHolds []lossHoldStatus `json:"loss_holds"`
	Objects   []objectStatus   `json:"objects"`
}

// lossHoldStatus is one backend's data-loss hold (backends.LossState).
type lossHoldStatus struct {
	Backend string `json:"backend"`
	// Cause is "lost" (the data is gone; the semaphores come back when
	// the hold ends) or "changed" (a restart or failover that may have
	// lost the last writes; no slot is granted until it ends).
	Cause string `json:"cause"`
	// HoldUntil is the end of the hold, in backend time; LeftSeconds is
	// what is left of it by the backend's clock.
	HoldUntil   time.Time `json:"hold_until"`
	LeftSeconds float64   `json:"left_seconds"`
	// Message says it for a person.
	Message string `json:"message"`
}

// hostStatus is one host record as status shows it. Ages are measured with
// the backend's clock, never this host's.
type hostStatus struct {
	Host     string `json:"host"`
	State    string `json:"state"` // live, stale or stopped
	Leader   bool   `json:"leader"`
	Version  string `json:"version"`
	SpecHash string `json:"spec_hash"`
	// RunsApplied: its spec hash is the latest applied one.
	RunsApplied bool      `json:"runs_applied_spec"`
	RunID       string    `json:"run_id"`
	PID         int       `json:"pid"`
	StartedAt   time.Time `json:"started_at"`
	LastSeen    time.Time `json:"last_seen"`
	// LastSeenAgo is backend now minus LastSeen, in seconds.
	LastSeenAgo float64 `json:"last_seen_seconds_ago"`
	// HeartbeatEvery is the host's heartbeat period, in seconds.
	HeartbeatEvery float64 `json:"heartbeat_every_seconds"`
}

// hashGroup is the live hosts that run one spec hash.
type hashGroup struct {
	SpecHash string   `json:"spec_hash"`
	Applied  bool     `json:"applied"`
	Hosts    []string `json:"hosts"`
}

type objectStatus struct {
	Address string `json:"address"`
	Backend string `json:"backend"`
	Applied bool   `json:"applied"`
	// Semaphores
	Limit   *int `json:"limit,omitempty"`
	Holders *int `json:"holders,omitempty"`
	// Instances counts a keyed semaphore's live instances (its holders
	// are theirs).
	Instances *int `json:"instances,omitempty"`
	// Waiters counts a semaphore's live waiters and Line lists them in
	// line order (backends.Waiters); neither is set on a backend that
	// keeps no line (memcached).
	Waiters *int              `json:"waiters,omitempty"`
	Line    []backends.Waiter `json:"line,omitempty"`
	// Cron: the next run, printed in Timezone, the task's.
	NextRun    *time.Time `json:"next_run,omitempty"`
	Timezone   string     `json:"timezone,omitempty"`
	Running    *int       `json:"running,omitempty"`
	LastResult string     `json:"last_result,omitempty"`
	// Paused is set for a cron task: whether it is paused (Pause: by an
	// operator; PausedInSpec: by paused: true). A queue has Pause alone,
	// an operator's (coordd queue pause).
	Paused       *bool               `json:"paused,omitempty"`
	Pause        *backends.CronPause `json:"pause,omitempty"`
	PausedInSpec bool                `json:"paused_in_spec,omitempty"`
	// Queues
	Ready    *int64     `json:"ready,omitempty"`
	InFlight *int64     `json:"in_flight,omitempty"`
	Delayed  *int64     `json:"delayed,omitempty"`
	Dead     *int64     `json:"dead,omitempty"`
	Oldest   *time.Time `json:"oldest_ready,omitempty"`
	// Rate limits: the stored rate and burst, the permits an unkeyed
	// limit would grant at once now, and the keys of a keyed one that
	// are not idle.
	Rate      string `json:"rate,omitempty"`
	Burst     *int   `json:"burst,omitempty"`
	Available *int   `json:"available,omitempty"`
	Keys      *int   `json:"busy_keys,omitempty"`
}

func ptr[T any](v T) *T { return &v }

func collectStatus(ctx context.Context, s *spec.Spec, bs map[string]backends.Backend, ss backends.Cluster, host string) (*statusReport, error) {
	r := &statusReport{Host: host, LocalHash: s.Hash(), Hosts: []hostStatus{}, HostSpecHashes: []hashGroup{}, LossHolds: []lossHoldStatus{}, Objects: []objectStatus{}}
	if b := s.Backends[s.Cluster.Backend]; b != nil && b.Type == spec.TypeSQLite {
		r.ClusterStore = b.Path
		if _, err := os.Stat(b.Path); errors.Is(err, os.ErrNotExist) {
			r.StoreMissing = true
		}
	}
	t, err := ss.CurrentLeader(ctx)
	switch {
	case err == nil:
		r.Leader = &t
	case !errors.Is(err, backends.ErrNotFound):
		return nil, fmt.Errorf("leader: %w", err)
	}
	state, err := ss.LoadState(ctx)
	if err != nil {
		return nil, err
	}
	r.Applied = state.Last
	r.HashWarning = clusterview.HashWarning(ctx, ss, state.Last, r.LocalHash)
	hs, err := ss.ListHosts(ctx)
	if err != nil {
		return nil, err
	}
	r.addHosts(hs)
	if err := r.addLossHolds(ctx, bs); err != nil {
		return nil, err
	}
	for _, a := range s.Addresses() {
		b := s.BackendOf(a)
		ob := objectStatus{Address: a.String(), Backend: b.Name}
		bk := bs[b.Name]
		switch a.Kind {
		case spec.KindSemaphore:
			if adm := bk.Semaphores(); adm != nil {
				m, err := adm.ObserveSemaphores(ctx, []string{a.Name})
				if err != nil {
					return nil, err
				}
				if st := m[a.Name]; st != nil {
					ob.Applied, ob.Limit, ob.Holders = true, ptr(st.Config.Limit), ptr(len(st.Holders))
					if st.Config.Keyed {
						ob.Instances = ptr(len(st.Instances))
					}
					ob.Waiters, ob.Line = semLine(ctx, adm, a.Name, st)
				}
			}
		case spec.KindCron:
			cr := bk.Crons()
			if cr != nil {
				m, err := cr.ObserveCrons(ctx, []string{a.Name})
				if err != nil {
					return nil, err
				}
				if st := m[a.Name]; st != nil {
					ob.Applied, ob.NextRun, ob.Running = true, ptr(st.NextExec), ptr(st.Running)
					if t := s.Cron[a.Name]; t != nil {
						ob.Timezone = t.Timezone
					}
					p := pausedOf(st)
					ob.Paused, ob.Pause, ob.PausedInSpec = ptr(p.Paused), p.Pause, p.PausedInSpec
				}
			}
			if cr != nil && ob.Applied {
				h, err := cr.History(ctx, a.Name, 1)
				if err != nil {
					return nil, err
				}
				if len(h) > 0 {
					ob.LastResult = fmt.Sprintf("%s (%s)", esc(h[0].Status), h[0].ScheduledAt.UTC().Format(time.RFC3339))
					if r := newCronRunJSON(h[0]); r.ExitCode != nil {
						ob.LastResult = fmt.Sprintf("%s (exit %d, %s)", esc(h[0].Status), *r.ExitCode, h[0].ScheduledAt.UTC().Format(time.RFC3339))
					}
				}
			}
		case spec.KindQueue:
			if adm := bk.Queues(); adm != nil {
				m, err := adm.ObserveQueues(ctx, []string{a.Name})
				if err != nil {
					return nil, err
				}
				if st := m[a.Name]; st != nil {
					ob.Applied = true
					ob.Ready, ob.InFlight, ob.Delayed, ob.Dead = ptr(st.ReadyNow()), ptr(st.InFlight), ptr(st.Delayed), ptr(st.Dead)
					ob.Pause = st.Paused
					if !st.OldestReady.IsZero() {
						ob.Oldest = ptr(st.OldestReady)
					}
				}
			}
		case spec.KindRateLimit:
			if adm := backends.RateLimitsOf(bk); adm != nil {
				m, err := adm.ObserveRateLimits(ctx, []string{a.Name})
				if err != nil {
					return nil, err
				}
				if st := m[a.Name]; st != nil {
					c := st.Config
					ob.Applied, ob.Burst = true, ptr(c.Burst)
					ob.Rate = (&spec.RateLimit{Count: c.Count, Per: c.Per}).Rate()
					if c.Keyed {
						ob.Keys = ptr(st.Keys)
					} else {
						ob.Available = ptr(st.Available)
					}
				}
			}
		}
		r.Objects = append(r.Objects, ob)
	}
	return r, nil
}

// addLossHolds lists the backends that hold their semaphores after a data
// loss (one marker read per backend that can lose its data).
func (r *statusReport) addLossHolds(ctx context.Context, bs map[string]backends.Backend) error {
	for name, b := range bs {
		lg, ok := b.(backends.LossGuard)
		if !ok {
			continue
		}
		st, err := lg.ObserveLoss(ctx)
		if err != nil {
			return fmt.Errorf("backend %q: %w", name, err)
		}
		if !st.Holding() {
			continue
		}
		h := backends.LossHoldError{Backend: name, Cause: st.Cause, Until: st.HoldUntil, Left: st.HoldUntil.Sub(st.Now)}
		cause := st.Cause
		if cause == "" {
			cause = backends.LossCauseLost
		}
		r.LossHolds = append(r.LossHolds, lossHoldStatus{Backend: name, Cause: cause, HoldUntil: st.HoldUntil, LeftSeconds: h.Left.Seconds(), Message: h.Error()})
	}
	sort.Slice(r.LossHolds, func(i, j int) bool { return r.LossHolds[i].Backend < r.LossHolds[j].Backend })
	return nil
}

// lossHold is the hold on backend, or nil.
func (r *statusReport) lossHold(backend string) *lossHoldStatus {
	for i := range r.LossHolds {
		if r.LossHolds[i].Backend == backend {
			return &r.LossHolds[i]
		}
	}
	return nil
}

// addHosts fills the hosts section from the registry.
func (r *statusReport) addHosts(hs backends.Hosts) {
	applied := ""
	if r.Applied != nil {
		applied = r.Applied.SpecHash
	}
	for _, h := range hs.Hosts {
		leader := clusterview.IsLeader(r.Leader, h, hs.Now)
		r.Hosts = append(r.Hosts, hostStatus{
			Host: h.Host, State: h.State(hs.Now), Leader: leader, Version: h.Version,
			SpecHash: h.SpecHash, RunsApplied: applied != "" && h.SpecHash == applied,
			RunID: h.RunID, PID: h.PID, StartedAt: h.StartedAt, LastSeen: h.LastSeen,
			LastSeenAgo:    max(hs.Now.Sub(h.LastSeen), 0).Seconds(),
			HeartbeatEvery: h.HeartbeatEvery.Seconds(),
		})
	}
	for hash, hosts := range hs.LiveSpecHashes() {
		r.HostSpecHashes = append(r.HostSpecHashes, hashGroup{SpecHash: hash, Applied: applied != "" && hash == applied, Hosts: hosts})
	}
	sort.Slice(r.HostSpecHashes, func(i, j int) bool {
		a, b := r.HostSpecHashes[i], r.HostSpecHashes[j]
		if a.Applied != b.Applied {
			return a.Applied
		}
		return a.SpecHash < b.SpecHash
	})
	if len(r.HostSpecHashes) > 1 {
		parts := make([]string, len(r.HostSpecHashes))
		for i, g := range r.HostSpecHashes {
			tag := ""
			if g.Applied {
				tag = " (applied)"
			}
			hosts := make([]string, len(g.Hosts))
			for j, h := range g.Hosts {
				hosts[j] = esc(h)
			}
			parts[i] = fmt.Sprintf("%s%s on %s", esc(short12(g.SpecHash)), tag, strings.Join(hosts, ", "))
		}
		r.HostsWarning = fmt.Sprintf("live hosts run %d different spec hashes (a rollout in flight, or a stale checkout): %s",
			len(r.HostSpecHashes), strings.Join(parts, "; "))
	}
}

// writeText prints the report for a person. Every value read from a store
// goes through esc: other hosts wrote it.
func (r *statusReport) writeText(env *cliEnv) {
	w := env.stdout
	if r.Leader != nil {
		fmt.Fprintf(w, "Leader:    %s (term %d, lease until %s)\n", esc(r.Leader.Holder), r.Leader.Term, r.Leader.ExpiresAt.UTC().Format(time.RFC3339))
	} else {
		fmt.Fprintln(w, "Leader:    none (no coordd run holds the lease)")
	}
	fmt.Fprintf(w, "This host: %s\n", esc(r.Host))
	if r.ClusterStore != "" {
		note := ""
		if r.StoreMissing {
			note = env.paint(colourYellow, " (no such file yet: nothing ran with this data directory; for a daemon's, set COORDD_DATA_DIR as its unit does)")
		}
		fmt.Fprintf(w, "Store:     %s%s\n", esc(r.ClusterStore), note)
	}
	applied := "none"
	if r.Applied != nil {
		applied = fmt.Sprintf("%s (generation %d, %s, by %s)", esc(short12(r.Applied.SpecHash)), r.Applied.Generation, r.Applied.At.UTC().Format(time.RFC3339), esc(r.Applied.Host))
	}
	fmt.Fprintf(w, "Spec:      local %s, applied %s\n", short12(r.LocalHash), applied)
	if r.HashWarning != "" {
		fmt.Fprintf(w, "%s   %s\n", env.paint(colourYellow, "Warning:"), r.HashWarning)
	}
	r.writeHosts(env)
	for _, h := range r.LossHolds {
		fmt.Fprintf(w, "%s      %s (%s more)\n", env.paint(colourYellow, "Hold:"), esc(h.Message), (time.Duration(h.LeftSeconds * float64(time.Second))).Round(time.Second))
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, o := range r.Objects {
		if h := r.lossHold(o.Backend); !o.Applied && h != nil && strings.HasPrefix(o.Address, "semaphore.") {
			fmt.Fprintf(tw, "%s\tbackend %s\t%s\n", o.Address, o.Backend, env.paint(colourYellow, "held after a data loss until "+h.HoldUntil.Local().Format(time.TimeOnly)))
			continue
		}
		if !o.Applied {
			fmt.Fprintf(tw, "%s\tbackend %s\t%s\n", o.Address, o.Backend, env.paint(colourYellow, "not applied"))
			continue
		}
		switch {
		case o.Limit != nil && o.Instances != nil:
			// The third column is painted in every kind of row (a paused
			// task's is coloured): tabwriter counts escape codes as width.
			fmt.Fprintf(tw, "%s\tbackend %s\t%s\tholders %d\tinstances %d%s\n", o.Address, o.Backend, env.paint(colourPlain, fmt.Sprintf("limit %d per key", *o.Limit)), *o.Holders, *o.Instances, o.waitersCell())
			o.writeLine(env, tw)
		case o.Limit != nil:
			fmt.Fprintf(tw, "%s\tbackend %s\t%s\tholders %d%s\n", o.Address, o.Backend, env.paint(colourPlain, fmt.Sprintf("limit %d", *o.Limit)), *o.Holders, o.waitersCell())
			o.writeLine(env, tw)
		case o.NextRun != nil:
			last := o.LastResult
			if last == "" {
				last = "never ran"
			}
			// Painted either way: a column of painted and plain cells would
			// not line up (tabwriter counts the escape codes).
			// In the task's zone, as cron list prints it.
			next := env.paint(colourPlain, "next "+cronTimes{}.format(*o.NextRun, o.Timezone))
			if o.Paused != nil && *o.Paused {
				next = env.paint(stateColour("paused"), cronPausedJSON{Paused: true, Pause: o.Pause, PausedInSpec: o.PausedInSpec}.cell())
			}
			fmt.Fprintf(tw, "%s\tbackend %s\t%s\trunning %d\tlast %s\n", o.Address, o.Backend, next, *o.Running, last)
		case o.Rate != "" && o.Keys != nil:
			fmt.Fprintf(tw, "%s\tbackend %s\t%s\tburst %d per key\tbusy keys %d\n", o.Address, o.Backend, env.paint(colourPlain, "rate "+o.Rate), *o.Burst, *o.Keys)
		case o.Rate != "":
			fmt.Fprintf(tw, "%s\tbackend %s\t%s\tburst %d\tavailable %d\n", o.Address, o.Backend, env.paint(colourPlain, "rate "+o.Rate), *o.Burst, *o.Available)
		case o.Ready != nil:
			oldest := "-"
			if o.Oldest != nil {
				oldest = time.Since(*o.Oldest).Round(time.Second).String()
			}
			paused := ""
			if o.Pause != nil {
				paused = "\t" + env.paint(stateColour("paused"), "paused "+describePause(o.Pause))
			}
			fmt.Fprintf(tw, "%s\tbackend %s\t%s\tin flight %d\tdelayed %d\tdead %d\toldest %s%s\n", o.Address, o.Backend, env.paint(colourPlain, fmt.Sprintf("ready %d", *o.Ready)), *o.InFlight, *o.Delayed, *o.Dead, oldest, paused)
		}
	}
	tw.Flush()
	for _, o := range r.Objects {
		if o.Pause != nil {
			fmt.Fprintf(w, "%s paused %s (coordd cron resume)\n", o.Address, describePause(o.Pause))
		}
	}
}

func short12(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// writeHosts writes the hosts section: a line per host, then the warning
// when live hosts disagree on the spec hash.
func (r *statusReport) writeHosts(env *cliEnv) {
	w := env.stdout
	if len(r.Hosts) == 0 {
		fmt.Fprintln(w, "Hosts:     none recorded yet (each coordd run records its host when it starts)")
		return
	}
	counts := map[string]int{}
	for _, h := range r.Hosts {
		counts[h.State]++
	}
	var sum []string
	for _, st := range []string{backends.HostLive, backends.HostStale, backends.HostStopped} {
		if counts[st] > 0 {
			sum = append(sum, fmt.Sprintf("%d %s", counts[st], st))
		}
	}
	fmt.Fprintf(w, "Hosts:     %s\n", strings.Join(sum, ", "))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, h := range r.Hosts {
		role := ""
		if h.Leader {
			role = "leader"
		}
		applied := "not applied"
		if h.RunsApplied {
			applied = "applied"
		}
		// Every state cell is painted, so that the column stays aligned.
		fmt.Fprintf(tw, "  %s\t%s\t%s\tversion %s\tspec %s\t%s\tstarted %s\tseen %s ago\n", esc(h.Host), role, env.paint(stateColour(h.State), h.State),
			esc(h.Version), esc(short12(h.SpecHash)), applied, h.StartedAt.UTC().Format(time.RFC3339),
			(time.Duration(h.LastSeenAgo * float64(time.Second))).Round(time.Second))
	}
	tw.Flush()
	if r.HostsWarning != "" {
		fmt.Fprintf(w, "%s   %s\n", env.paint(colourYellow, "Warning:"), r.HostsWarning)
	}
}
