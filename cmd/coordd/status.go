package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

var statusCmd = &command{
	name:    "status",
	summary: "show the leader, the spec hashes and every object's state",
	usage: `Usage: coordd status [-f PATH] [--json] [--host-id ID]

Shows the leader and its term, this host, the local and the applied spec
hashes (a difference means a rollout in flight or a stale checkout), and a
line per semaphore, cron task and queue. It changes nothing.
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
		s, ok := loadSpec(env, *path, false)
		if !ok {
			return 1
		}
		e, ok := openEngine(ctx, env, s, true)
		if !ok {
			return 1
		}
		defer e.Close()
		st, err := collectStatus(ctx, s, e.Backends, e.State, hostID(*host))
		if err != nil {
			fmt.Fprintf(env.stderr, "coordd status: %v\n", err)
			return 1
		}
		if *asJSON {
			enc := json.NewEncoder(env.stdout)
			enc.SetIndent("", "  ")
			_ = enc.Encode(st)
			return 0
		}
		st.writeText(env)
		return 0
	},
}

// statusReport is `coordd status --json`.
type statusReport struct {
	Host        string                `json:"host"`
	Leader      *backends.Term        `json:"leader"`
	LocalHash   string                `json:"local_spec_hash"`
	Applied     *backends.ApplyRecord `json:"applied"`
	HashWarning string                `json:"hash_warning,omitempty"`
	Objects     []objectStatus        `json:"objects"`
}

type objectStatus struct {
	Address string `json:"address"`
	Backend string `json:"backend"`
	Applied bool   `json:"applied"`
	// Semaphores
	Limit   *int `json:"limit,omitempty"`
	Holders *int `json:"holders,omitempty"`
	// Cron
	NextRun    *time.Time `json:"next_run,omitempty"`
	Running    *int       `json:"running,omitempty"`
	LastResult string     `json:"last_result,omitempty"`
	// Queues
	Ready    *int64     `json:"ready,omitempty"`
	InFlight *int64     `json:"in_flight,omitempty"`
	Delayed  *int64     `json:"delayed,omitempty"`
	Dead     *int64     `json:"dead,omitempty"`
	Oldest   *time.Time `json:"oldest_ready,omitempty"`
}

func ptr[T any](v T) *T { return &v }

func collectStatus(ctx context.Context, s *spec.Spec, bs map[string]backends.Backend, ss backends.StateStore, host string) (*statusReport, error) {
	r := &statusReport{Host: host, LocalHash: s.Hash(), Objects: []objectStatus{}}
	if l, ok := bs[s.Cluster.Backend].(backends.Leader); ok {
		t, err := l.CurrentLeader(ctx)
		switch {
		case err == nil:
			r.Leader = &t
		case !errors.Is(err, backends.ErrNotFound):
			return nil, fmt.Errorf("leader: %w", err)
		}
	}
	state, err := ss.LoadState(ctx)
	if err != nil {
		return nil, err
	}
	r.Applied = state.Last
	switch {
	case state.Last == nil:
		r.HashWarning = "nothing applied yet"
	case state.Last.SpecHash != r.LocalHash:
		if _, err := ss.FindApply(ctx, r.LocalHash); err == nil {
			r.HashWarning = "the local spec was applied before and superseded: a stale checkout"
		} else {
			r.HashWarning = "the local spec differs from the applied one: a rollout in flight, or an apply to run"
		}
	}
	for _, a := range s.Addresses() {
		b := s.BackendOf(a)
		ob := objectStatus{Address: a.String(), Backend: b.Name}
		bk := bs[b.Name]
		switch a.Kind {
		case spec.KindSemaphore:
			if adm, ok := bk.(backends.SemaphoreAdmin); ok {
				m, err := adm.ObserveSemaphores(ctx, []string{a.Name})
				if err != nil {
					return nil, err
				}
				if st := m[a.Name]; st != nil {
					ob.Applied, ob.Limit, ob.Holders = true, ptr(st.Config.Limit), ptr(len(st.Holders))
				}
			}
		case spec.KindCron:
			if adm, ok := bk.(backends.CronAdmin); ok {
				m, err := adm.ObserveCrons(ctx, []string{a.Name})
				if err != nil {
					return nil, err
				}
				if st := m[a.Name]; st != nil {
					ob.Applied, ob.NextRun, ob.Running = true, ptr(st.NextExec), ptr(st.Running)
				}
			}
			if cr, ok := bk.(backends.Crons); ok && ob.Applied {
				h, err := cr.History(ctx, a.Name, 1)
				if err != nil {
					return nil, err
				}
				if len(h) > 0 {
					ob.LastResult = fmt.Sprintf("%s (exit %d, %s)", h[0].Status, h[0].ExitCode, h[0].ScheduledAt.UTC().Format(time.RFC3339))
				}
			}
		case spec.KindQueue:
			if adm, ok := bk.(backends.QueueAdmin); ok {
				m, err := adm.ObserveQueues(ctx, []string{a.Name})
				if err != nil {
					return nil, err
				}
				if st := m[a.Name]; st != nil {
					ob.Applied = true
					ob.Ready, ob.InFlight, ob.Delayed, ob.Dead = ptr(st.Ready), ptr(st.InFlight), ptr(st.Delayed), ptr(st.Dead)
					if !st.OldestReady.IsZero() {
						ob.Oldest = ptr(st.OldestReady)
					}
				}
			}
		}
		r.Objects = append(r.Objects, ob)
	}
	return r, nil
}

func (r *statusReport) writeText(env *cliEnv) {
	w := env.stdout
	if r.Leader != nil {
		fmt.Fprintf(w, "Leader:    %s (term %d, lease until %s)\n", r.Leader.Holder, r.Leader.Term, r.Leader.ExpiresAt.UTC().Format(time.RFC3339))
	} else {
		fmt.Fprintln(w, "Leader:    none (no coordd run holds the lease)")
	}
	fmt.Fprintf(w, "This host: %s\n", r.Host)
	applied := "none"
	if r.Applied != nil {
		applied = fmt.Sprintf("%s (generation %d, %s, by %s)", short12(r.Applied.SpecHash), r.Applied.Generation, r.Applied.At.UTC().Format(time.RFC3339), r.Applied.Host)
	}
	fmt.Fprintf(w, "Spec:      local %s, applied %s\n", short12(r.LocalHash), applied)
	if r.HashWarning != "" {
		fmt.Fprintf(w, "Warning:   %s\n", r.HashWarning)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, o := range r.Objects {
		if !o.Applied {
			fmt.Fprintf(tw, "%s\tbackend %s\tnot applied\n", o.Address, o.Backend)
			continue
		}
		switch {
		case o.Limit != nil:
			fmt.Fprintf(tw, "%s\tbackend %s\tlimit %d\tholders %d\n", o.Address, o.Backend, *o.Limit, *o.Holders)
		case o.NextRun != nil:
			last := o.LastResult
			if last == "" {
				last = "never ran"
			}
			fmt.Fprintf(tw, "%s\tbackend %s\tnext %s\trunning %d\tlast %s\n", o.Address, o.Backend, o.NextRun.UTC().Format(time.RFC3339), *o.Running, last)
		case o.Ready != nil:
			oldest := "-"
			if o.Oldest != nil {
				oldest = time.Since(*o.Oldest).Round(time.Second).String()
			}
			fmt.Fprintf(tw, "%s\tbackend %s\tready %d\tin flight %d\tdelayed %d\tdead %d\toldest %s\n", o.Address, o.Backend, *o.Ready, *o.InFlight, *o.Delayed, *o.Dead, oldest)
		}
	}
	tw.Flush()
}

func short12(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}
