package dashboard

import (
	"context"
	"fmt"
	"net/http"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// The rate limits page lists every rate limit of the spec with its rate
// as the spec writes it, its burst, whether it is keyed, the cron tasks
// and queues that take their permits from it, and what `coordd status` shows of it: the
// permits an unkeyed limit would grant at once now, or the keys of a
// keyed one that are not idle. One read per backend; no action.

// noRateLimitsText is shown for a backend that holds no rate limits
// (memcached: validate refuses them there).
const noRateLimitsText = "this backend holds no rate limits"

type rateRow struct {
	Name, Backend string
	// Rate, Burst and Keyed are the spec's.
	Rate  string
	Burst int
	Keyed bool
	// UsedBy are the cron tasks and queues that name the limit in their
	// rate_limit ("cron.NAME", "queue.NAME").
	UsedBy []string
	// Applied: the backend holds the limit; Config is what it enforces,
	// Available and Keys what it would grant now (status's meaning).
	Applied   bool
	Config    backends.RateLimitConfig
	Available int
	Keys      int
	// NoLimits says why the backend cannot hold the limit.
	NoLimits string
	Err      string
}

// AppliedRate is the rate the backend enforces, written as the spec
// writes it.
func (r *rateRow) AppliedRate() string {
	return (&spec.RateLimit{Count: r.Config.Count, Per: r.Config.Per}).Rate()
}

// Drift says how the backend's config differs from the spec's ("" when
// it does not): until the next apply the backend enforces its own.
func (r *rateRow) Drift() string {
	if !r.Applied {
		return ""
	}
	c := r.Config
	switch {
	case c.Keyed && !r.Keyed:
		return "the backend holds it keyed"
	case !c.Keyed && r.Keyed:
		return "the backend holds it unkeyed"
	case r.AppliedRate() != r.Rate || c.Burst != r.Burst:
		return fmt.Sprintf("the backend enforces %s, burst %d", r.AppliedRate(), c.Burst)
	}
	return ""
}

// Fill is the share of the burst available now, in tenths (0 to 10), for
// the meter of an unkeyed limit.
func (r *rateRow) Fill() int {
	if r.Config.Burst <= 0 {
		return 0
	}
	return min(max(r.Available*10/r.Config.Burst, 0), 10)
}

func (d *Dashboard) rateLimitsPage(ctx context.Context, r *http.Request, p *page) (any, int) {
	p.Title = "rate limits"
	s, e := d.src.Current()
	names := sortedKeys(s.RateLimits)
	rows := map[string]*rateRow{}
	for _, n := range names {
		l := s.RateLimits[n]
		rows[n] = &rateRow{Name: n, Backend: l.Backend, Rate: l.Rate(), Burst: l.Burst, Keyed: l.Keyed}
	}
	for _, tn := range sortedKeys(s.Cron) {
		if row := rows[s.Cron[tn].RateLimit]; row != nil {
			row.UsedBy = append(row.UsedBy, "cron."+tn)
		}
	}
	for _, qn := range sortedKeys(s.Queues) {
		if row := rows[s.Queues[qn].RateLimit]; row != nil {
			row.UsedBy = append(row.UsedBy, "queue."+qn)
		}
	}
	order, groups := byBackend(names, func(n string) string { return s.RateLimits[n].Backend })
	for _, bn := range order {
		readRateLimits(ctx, bn, e.Backends[bn], groups[bn], rows)
	}
	out := make([]*rateRow, 0, len(names))
	for _, n := range names {
		out = append(out, rows[n])
	}
	return out, http.StatusOK
}

// readRateLimits fills the rows of names, rate limits of backend bn, with
// one read of their state; a read that fails is every row's Err.
func readRateLimits(ctx context.Context, bn string, b backends.Backend, names []string, rows map[string]*rateRow) {
	if b == nil {
		for _, n := range names {
			rows[n].Err = fmt.Sprintf("backend %q is not open on this host", bn)
		}
		return
	}
	adm := backends.RateLimitsOf(b)
	if adm == nil {
		for _, n := range names {
			rows[n].NoLimits = noRateLimitsText
		}
		return
	}
	m, err := adm.ObserveRateLimits(ctx, names)
	for _, n := range names {
		row := rows[n]
		if err != nil {
			row.Err = err.Error()
			continue
		}
		st := m[n]
		if st == nil {
			continue
		}
		row.Applied, row.Config, row.Available, row.Keys = true, st.Config, st.Available, st.Keys
	}
}
