package dashboard

import (
	"context"
	"time"

	"github.com/coordd/coordd/backends"
)

// The semaphores page lists each line of waiters (backends.Waiters):
// place, host, pid, how long each has waited and when its record lapses,
// never its owner token. memcached keeps no line, so the page says so
// instead.

// noLineText is shown for a backend that keeps no line of waiters.
const noLineText = "This backend keeps no line of waiters: a waiting caller retries, and whoever tries first after a release wins, so waiters are neither counted nor listed."

type waiterRow struct {
	Place     int
	Host      string
	PID       int
	Since     time.Time
	Waited    time.Duration
	Expires   time.Time
	ExpiresIn time.Duration
}

// listLine fills row's line, and each instance's, from sems when somebody
// waits (one more read only then).
func listLine(ctx context.Context, sems backends.Semaphores, row *semRow, st *backends.SemaphoreState) {
	l := sems.Waiters()
	if l == nil {
		row.NoLine = noLineText
		return
	}
	if st.Waiters == 0 {
		return
	}
	ws, err := l.ListWaiters(ctx, backends.SemRef{Name: row.Name})
	if err != nil {
		row.LineErr = err.Error()
		return
	}
	byKey := map[string][]waiterRow{}
	for _, w := range ws {
		r := waiterRow{Place: w.Place, Host: w.Host, PID: w.PID, Since: w.Since, Expires: w.ExpiresAt, ExpiresIn: w.ExpiresAt.Sub(row.Now)}
		if !w.Since.IsZero() {
			r.Waited = row.Now.Sub(w.Since)
		}
		if w.Key == "" {
			row.Line = append(row.Line, r)
		} else {
			byKey[w.Key] = append(byKey[w.Key], r)
		}
	}
	for i := range row.Instances {
		row.Instances[i].Line = byKey[row.Instances[i].Key]
	}
}
