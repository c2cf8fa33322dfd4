package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/coordd/coordd/backends"
)

// The semaphores page lists every semaphore of the spec with its applied
// limit, holders (host, pid, since, expiry, fencing number), the live
// instances of a keyed one, and its line of waiters (waiters.go): `sem
// status` for all of them, one read per backend.

type holderRow struct {
	Slot      int
	Key       string
	Host      string
	PID       int
	Since     time.Time
	Held      time.Duration
	Expires   time.Time
	ExpiresIn time.Duration
	Session   int64
	Fencing   int64
}

type instanceRow struct {
	Key     string
	Waiters int
	Holders []holderRow
	Line    []waiterRow
}

type semRow struct {
	Name, Backend string
	Applied       bool
	Config        backends.SemaphoreConfig
	Slots         int
	Expired       int
	Waiters       int
	Holders       []holderRow
	Instances     []instanceRow
	Err           string
	Now           time.Time
	// Line lists the waiters in line (waiters.go); NoLine says why the
	// backend lists none, LineErr why the listing failed.
	Line    []waiterRow
	NoLine  string
	LineErr string
}

func holderRows(hs []backends.Holder, now time.Time) []holderRow {
	out := make([]holderRow, 0, len(hs))
	for _, h := range hs {
		r := holderRow{Slot: h.Slot, Key: h.Key, Host: h.Host, PID: h.PID, Since: h.AcquiredAt, Expires: h.ExpiresAt, Session: h.Session, Fencing: h.Fencing}
		if !h.AcquiredAt.IsZero() {
			r.Held = now.Sub(h.AcquiredAt)
		}
		if !h.ExpiresAt.IsZero() {
			r.ExpiresIn = h.ExpiresAt.Sub(now)
		}
		out = append(out, r)
	}
	return out
}

func (d *Dashboard) semaphoresPage(ctx context.Context, r *http.Request, p *page) (any, int) {
	s, e := d.src.Current()
	names := sortedKeys(s.Semaphores)
	rows := map[string]*semRow{}
	for _, n := range names {
		rows[n] = &semRow{Name: n, Backend: s.Semaphores[n].Backend}
	}
	order, groups := byBackend(names, func(n string) string { return s.Semaphores[n].Backend })
	for _, bn := range order {
		readSemaphores(ctx, bn, e.Backends[bn], groups[bn], rows)
	}
	out := make([]*semRow, 0, len(names))
	for _, n := range names {
		out = append(out, rows[n])
	}
	return out, http.StatusOK
}

// readSemaphores fills the rows of names, semaphores of backend bn, with
// one read of their state (and one of a line of waiters where somebody
// waits); a read that fails is every row's Err.
func readSemaphores(ctx context.Context, bn string, b backends.Backend, names []string, rows map[string]*semRow) {
	fail := func(err error) {
		for _, n := range names {
			rows[n].Err = err.Error()
		}
	}
	var adm backends.Semaphores
	if b != nil {
		adm = b.Semaphores()
	}
	if adm == nil {
		fail(fmt.Errorf("backend %q is not open on this host", bn))
		return
	}
	now, err := b.Now(ctx)
	if err != nil {
		fail(err)
		return
	}
	m, err := adm.ObserveSemaphores(ctx, names)
	if err != nil {
		fail(err)
		return
	}
	for _, n := range names {
		st := m[n]
		row := rows[n]
		row.Now = now
		if st == nil {
			continue
		}
		row.Applied, row.Config, row.Slots, row.Expired, row.Waiters = true, st.Config, st.Slots, st.Expired, st.Waiters
		row.Holders = holderRows(st.Holders, now)
		for _, i := range st.Instances {
			row.Instances = append(row.Instances, instanceRow{Key: i.Key, Waiters: i.Waiters, Holders: holderRows(i.Holders, now)})
		}
		listLine(ctx, adm, row, st)
	}
}
