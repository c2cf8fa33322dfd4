package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/coordd/coordd/backends"
)

// semLine reads a semaphore's waiters for coordd status: the count on a
// backend with a line, and the line itself when somebody waits. A line
// that cannot be read (a store migrated by an older binary lacks the
// columns) leaves the count alone: status reports counts first.
func semLine(ctx context.Context, sems backends.Semaphores, name string, st *backends.SemaphoreState) (*int, []backends.Waiter) {
	l := sems.Waiters()
	if l == nil {
		return nil, nil
	}
	n := st.Waiters
	if n == 0 {
		return &n, nil
	}
	line, err := l.ListWaiters(ctx, backends.SemRef{Name: name})
	if err != nil {
		return &n, nil
	}
	return &n, line
}

// waitersCell is the "waiters N" column of a semaphore's status row, empty
// on a backend without a line.
func (o objectStatus) waitersCell() string {
	if o.Waiters == nil {
		return ""
	}
	return fmt.Sprintf("\twaiters %d", *o.Waiters)
}

// writeLine writes one row per waiter under its semaphore's: place (and
// key), host and pid, and since when it waits by the backend's clock.
func (o objectStatus) writeLine(env *cliEnv, w io.Writer) {
	for _, wt := range o.Line {
		place := fmt.Sprintf("  waiting %d", wt.Place)
		if wt.Key != "" {
			place += " key " + esc(wt.Key)
		}
		since := "since unknown"
		if !wt.Since.IsZero() {
			since = "since " + wt.Since.UTC().Format(time.RFC3339)
		}
		host := wt.Host
		if host == "" {
			host = "unknown"
		}
		fmt.Fprintf(w, "%s\thost %s pid %d\t%s\n", place, esc(host), wt.PID, env.paint(colourPlain, since))
	}
}
