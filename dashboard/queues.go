package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/reconcile"
	"github.com/coordd/coordd/spec"
)

// The queues page lists every queue with `queue stats`'s counts (ready
// now, delayed, in flight, dead, stranded), the age of its oldest ready
// job and the backlog's trend (trend.go). A queue's page and its dead
// jobs are in jobs.go.

type queueRow struct {
	Name, Backend string
	Applied       bool
	Config        backends.QueueConfig
	Ready         int64
	Delayed       int64
	InFlight      int64
	Dead          int64
	Stranded      int64
	Oldest        string
	Trend         trend
	Err           string
	Now           time.Time
	// Pause is an operator's pause of the queue (nil: none).
	Pause *backends.Pause
	// Counts are what the workers of every host did with the queue's jobs
	// over the last day, minute by minute (read for a page, not by
	// Sample); CountsErr says why they are missing.
	Counts    backends.QueueCounts
	CountsErr string
}

// LastHour and LastDay sum the row's counts.
func (r *queueRow) LastHour() backends.QueueCount { return r.Counts.Since(time.Hour) }

// LastDay sums the row's counts over the last day.
func (r *queueRow) LastDay() backends.QueueCount { return r.Counts.Since(24 * time.Hour) }

// readCounts fills each applied row's counts of the last day.
func readCounts(ctx context.Context, e *reconcile.Engine, rows []*queueRow) {
	for _, row := range rows {
		if !row.Applied {
			continue
		}
		b := e.Backends[row.Backend]
		var q backends.Queues
		if b != nil {
			q = b.Queues()
		}
		if q == nil {
			continue
		}
		c, err := q.ReadQueueCounts(ctx, row.Name, 24*time.Hour)
		if err != nil {
			row.CountsErr = err.Error()
			continue
		}
		row.Counts = c
	}
}

func (d *Dashboard) queueRows(ctx context.Context, s *spec.Spec, e *reconcile.Engine, names []string) []*queueRow {
	rows := map[string]*queueRow{}
	for _, n := range names {
		rows[n] = &queueRow{Name: n, Backend: s.Queues[n].Backend, Oldest: "-"}
	}
	order, groups := byBackend(names, func(n string) string { return s.Queues[n].Backend })
	for _, bn := range order {
		d.readQueues(ctx, bn, e.Backends[bn], groups[bn], rows)
	}
	out := make([]*queueRow, 0, len(names))
	for _, n := range names {
		out = append(out, rows[n])
	}
	return out
}

// readQueues fills the rows of names, queues of backend bn, with one read
// of their counts, and adds each reading to the queue's trend; a read
// that fails is every row's Err.
func (d *Dashboard) readQueues(ctx context.Context, bn string, b backends.Backend, names []string, rows map[string]*queueRow) {
	var adm backends.Queues
	if b != nil {
		adm = b.Queues()
	}
	var err error
	if adm == nil {
		err = fmt.Errorf("backend %q is not open on this host", bn)
	}
	var now time.Time
	var m map[string]*backends.QueueState
	if err == nil {
		now, err = b.Now(ctx)
	}
	if err == nil {
		m, err = adm.ObserveQueues(ctx, names)
	}
	for _, n := range names {
		row := rows[n]
		row.Now = now
		if err != nil {
			row.Err = err.Error()
			continue
		}
		st := m[n]
		if st == nil {
			continue
		}
		row.Applied, row.Config = true, st.Config
		row.Ready, row.Delayed, row.InFlight, row.Dead, row.Stranded = st.ReadyNow(), st.Delayed, st.InFlight, st.Dead, st.Stranded
		row.Pause = st.Paused
		if !st.OldestReady.IsZero() && st.ReadyNow() > 0 {
			row.Oldest = span(max(now.Sub(st.OldestReady), 0))
		}
		row.Trend = d.samples.add(bn+"/"+n, now, st.Ready+st.InFlight, st.Dead)
	}
}

// SampleEvery is how often the daemon reads every queue for the
// dashboard's throughput (Sample), whether or not a page is open.
const SampleEvery = 30 * time.Second

// Sample reads every queue of the spec of the moment once, as the queues
// page does, so that the backlog trend has readings before anyone opens a
// page (the daemon calls it every SampleEvery).
func (d *Dashboard) Sample(ctx context.Context) {
	s, e := d.src.Current()
	d.queueRows(ctx, s, e, sortedKeys(s.Queues))
}

func (d *Dashboard) queuesPage(ctx context.Context, r *http.Request, p *page) (any, int) {
	s, e := d.src.Current()
	rows := d.queueRows(ctx, s, e, sortedKeys(s.Queues))
	readCounts(ctx, e, rows)
	return rows, http.StatusOK
}
