package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/internal/clusterview"
	"github.com/coordd/coordd/reconcile"
	"github.com/coordd/coordd/spec"
)

// The cluster page (GET /) is `coordd status` in a browser: the leader's
// term, the applied spec and the hosts' spec hashes, each backend's clock,
// and the plan an apply would make now (computed at most every planEvery).

type hostRow struct {
	Host, State, Version, SpecHash string
	Leader, RunsApplied            bool
	PID                            int
	StartedAt, LastSeen            time.Time
	Ago                            time.Duration
}

type hashGroup struct {
	SpecHash string
	Applied  bool
	Hosts    []string
}

type backendRow struct {
	Name, Type string
	Now        time.Time
	Skew       time.Duration
	Err        string
	// Hold says that the backend holds its semaphores after a data loss,
	// and until when ("" when it does not).
	Hold string
}

type planView struct {
	At      time.Time
	Err     string
	Changes []changeView
	Drift   []changeView
	Waiting []changeView
	Blocked []string
	Lost    []string
	Summary reconcile.Summary
}

type changeView struct {
	Symbol, Address, Action, Backend, Blocked string
	Attrs                                     []string
	Notes                                     []string
}

type clusterData struct {
	Leader       *backends.Term
	LeaderErr    string
	LocalHash    string
	Applied      *backends.ApplyRecord
	HashWarning  string
	StateErr     string
	Hosts        []hostRow
	HostsErr     string
	HostsNow     time.Time
	Groups       []hashGroup
	Backends     []backendRow
	Plan         *planView
	Semaphores   int
	Cron         int
	Queues       int
	RateLimits   int
	ClusterStore string
}

func (d *Dashboard) clusterPage(ctx context.Context, r *http.Request, p *page) (any, int) {
	s, e := d.src.Current()
	c := &clusterData{LocalHash: s.Hash(), Semaphores: len(s.Semaphores), Cron: len(s.Cron), Queues: len(s.Queues), RateLimits: len(s.RateLimits), ClusterStore: s.Cluster.Backend}
	t, err := e.State.CurrentLeader(ctx)
	switch {
	case err == nil:
		c.Leader = &t
	case !isNotFound(err):
		c.LeaderErr = err.Error()
	}
	if st, err := e.State.LoadState(ctx); err != nil {
		c.StateErr = err.Error()
	} else {
		c.Applied = st.Last
		c.HashWarning = clusterview.HashWarning(ctx, e.State, st.Last, c.LocalHash)
	}
	if hs, err := e.State.ListHosts(ctx); err != nil {
		c.HostsErr = err.Error()
	} else {
		c.addHosts(hs)
	}
	c.Backends = backendRows(ctx, e.Backends)
	c.Plan = d.plans.get(ctx, s, e)
	return c, http.StatusOK
}

// backendRows reads each open backend's clock, its skew from this host's
// (the backend's time against the middle of the round trip), and the hold
// of a backend that lost its data.
func backendRows(ctx context.Context, bs map[string]backends.Backend) []backendRow {
	var rows []backendRow
	for _, n := range sortedKeys(bs) {
		b := bs[n]
		row := backendRow{Name: n, Type: b.Type()}
		sent := time.Now()
		if now, err := b.Now(ctx); err != nil {
			row.Err = err.Error()
		} else {
			row.Now = now
			row.Skew = now.Sub(sent.Add(time.Since(sent) / 2)).Round(time.Millisecond)
		}
		if lg, ok := b.(backends.LossGuard); ok && row.Err == "" {
			if ls, err := lg.ObserveLoss(ctx); err == nil && ls.Holding() {
				row.Hold = (&backends.LossHoldError{Backend: n, Cause: ls.Cause, Until: ls.HoldUntil, Left: ls.HoldUntil.Sub(ls.Now)}).Error()
			}
		}
		rows = append(rows, row)
	}
	return rows
}

// addHosts fills the hosts section as `coordd status` does.
func (c *clusterData) addHosts(hs backends.Hosts) {
	applied := ""
	if c.Applied != nil {
		applied = c.Applied.SpecHash
	}
	c.HostsNow = hs.Now
	for _, h := range hs.Hosts {
		c.Hosts = append(c.Hosts, hostRow{
			Host: h.Host, State: h.State(hs.Now), Version: h.Version, SpecHash: h.SpecHash,
			Leader: clusterview.IsLeader(c.Leader, h, hs.Now), RunsApplied: applied != "" && h.SpecHash == applied,
			PID: h.PID, StartedAt: h.StartedAt, LastSeen: h.LastSeen, Ago: max(hs.Now.Sub(h.LastSeen), 0),
		})
	}
	for hash, hosts := range hs.LiveSpecHashes() {
		c.Groups = append(c.Groups, hashGroup{SpecHash: hash, Applied: applied != "" && hash == applied, Hosts: hosts})
	}
	sort.Slice(c.Groups, func(i, j int) bool {
		a, b := c.Groups[i], c.Groups[j]
		if a.Applied != b.Applied {
			return a.Applied
		}
		return a.SpecHash < b.SpecHash
	})
}

// planEvery is how long a computed plan is shown before it is computed
// again: a plan observes every object, and pages refresh every 10 s.
const planEvery = 30 * time.Second

// planCache keeps the last plan of the spec hash it was computed for.
type planCache struct {
	mu   sync.Mutex
	hash string
	view *planView
}

func (c *planCache) get(ctx context.Context, s *spec.Spec, e *reconcile.Engine) *planView {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.view != nil && c.hash == s.Hash() && time.Since(c.view.At) < planEvery {
		return c.view
	}
	v := &planView{At: time.Now()}
	p, err := e.Plan(ctx, reconcile.Options{})
	if err != nil {
		v.Err = err.Error()
	} else {
		v.Changes, v.Drift, v.Waiting = changeViews(p.Changes), changeViews(p.Drift), changeViews(p.Waiting)
		v.Blocked, v.Summary = p.Blocked, p.Summary
		for _, l := range p.Lost {
			v.Lost = append(v.Lost, lostText(l))
		}
	}
	c.hash, c.view = s.Hash(), v
	return v
}

// lostText says what a backend's data loss means for its semaphores, as
// plan does.
func lostText(l reconcile.LostBackend) string {
	if !l.Recorded {
		return fmt.Sprintf("backend %s lost its data; the next apply records it and holds its semaphores back for %s", l.Backend, span(l.Left))
	}
	if l.Cause == backends.LossCauseChanged {
		return fmt.Sprintf("backend %s restarted or failed over and may have lost its last writes; its semaphores grant no slot until %s (%s more)", l.Backend, stamp(l.HoldUntil), span(l.Left))
	}
	return fmt.Sprintf("backend %s lost its data; its semaphores are held back until %s (%s more)", l.Backend, stamp(l.HoldUntil), span(l.Left))
}

func changeViews(cs []*reconcile.Change) []changeView {
	out := make([]changeView, 0, len(cs))
	for _, c := range cs {
		v := changeView{Symbol: c.Action.Symbol(), Address: c.Address.String(), Action: string(c.Action), Backend: c.Backend, Notes: c.Notes, Blocked: c.Blocked}
		for _, a := range c.Attrs {
			switch {
			case a.Old == "":
				v.Attrs = append(v.Attrs, a.Name+": "+a.New)
			case a.New == "":
				v.Attrs = append(v.Attrs, a.Name+": "+a.Old+" -> (none)")
			default:
				v.Attrs = append(v.Attrs, a.Name+": "+a.Old+" -> "+a.New)
			}
		}
		out = append(out, v)
	}
	return out
}
