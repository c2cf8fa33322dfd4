package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/coordd/coordd/backends"
)

// The lines of waiters, as backends.Waiters lists them. Each query
// returns, in line order within each key:
//
//	ikey ('' for a semaphore's own line), host, pid, since, expires_at
//
// with times in microseconds of the store's clock (since 0: a record
// written by a binary from before the column, shown as unknown).
var (
	// qWaitList lists a semaphore's live waiters in line order.
	qWaitList = Query{SQL: `SELECT '', host, pid, since, expires_at FROM {p}semaphore_waiters
WHERE name = ? AND expires_at > {now} ORDER BY seq`}

	// qInstWaitListAll lists the live waiters of every instance of a keyed
	// semaphore, by key and then line order.
	qInstWaitListAll = Query{SQL: `SELECT ikey, host, pid, since, expires_at FROM {p}semaphore_instance_waiters
WHERE name = ? AND expires_at > {now} ORDER BY ikey, seq`}

	// qInstWaitList lists one instance's live waiters in line order.
	qInstWaitList = Query{SQL: `SELECT ikey, host, pid, since, expires_at FROM {p}semaphore_instance_waiters
WHERE name = ? AND ikey = ? AND expires_at > {now} ORDER BY seq`}
)

// ListWaiters lists the live waiters of semaphore or instance name in line
// order, from one snapshot: an instance's line, or a semaphore's own line
// followed by those of its instances.
func (s *Core) ListWaiters(ctx context.Context, ref backends.SemRef) ([]backends.Waiter, error) {
	name := ref.Name
	d := s.DB.Dialect()
	var ws []backends.Waiter
	_, err := s.DB.Read(ctx, func(c Conn) error {
		ws = nil
		read := func(q Query, args ...any) error {
			rows, err := c.Query(ctx, d.Text(q), args...)
			if err == nil {
				ws, err = appendWaiters(ws, rows)
			}
			return err
		}
		if ref.IsInstance() {
			return read(qInstWaitList, name, ref.Key)
		}
		if err := read(qWaitList, name); err != nil {
			return err
		}
		return read(qInstWaitListAll, name)
	})
	if err != nil {
		return nil, fmt.Errorf("list waiters %s: %w", ref, err)
	}
	return ws, nil
}

// appendWaiters appends the waiters of rows to ws, numbering places from 1
// within each key's line, and closes rows.
func appendWaiters(ws []backends.Waiter, rows *sql.Rows) ([]backends.Waiter, error) {
	defer rows.Close()
	for rows.Next() {
		var w backends.Waiter
		var since, exp int64
		if err := rows.Scan(&w.Key, &w.Host, &w.PID, &since, &exp); err != nil {
			return ws, err
		}
		if since > 0 {
			w.Since = time.UnixMicro(since).UTC()
		}
		w.ExpiresAt = time.UnixMicro(exp).UTC()
		w.Place = 1
		if n := len(ws); n > 0 && ws[n-1].Key == w.Key {
			w.Place = ws[n-1].Place + 1
		}
		ws = append(ws, w)
	}
	return ws, rows.Err()
}
