package sqlite

import (
	"context"
	"fmt"

	"github.com/coordd/coordd/backends"
)

var _ backends.WaiterLister = (*Store)(nil)

const (
	// qWaitList lists a semaphore's live waiters in line order.
	qWaitList = `SELECT '', host, pid, since, expires_at FROM semaphore_waiters
WHERE name = ? AND expires_at > ` + nowSQL + ` ORDER BY seq`

	// qInstWaitListAll lists the live waiters of every instance of a keyed
	// semaphore, by key and then line order.
	qInstWaitListAll = `SELECT ikey, host, pid, since, expires_at FROM semaphore_instance_waiters
WHERE name = ? AND expires_at > ` + nowSQL + ` ORDER BY ikey, seq`

	// qInstWaitList lists one instance's live waiters in line order.
	qInstWaitList = `SELECT ikey, host, pid, since, expires_at FROM semaphore_instance_waiters
WHERE name = ? AND ikey = ? AND expires_at > ` + nowSQL + ` ORDER BY seq`
)

// ListWaiters lists the live waiters of semaphore or instance name in line
// order, from one snapshot (backends.WaiterLister).
func (s *Store) ListWaiters(ctx context.Context, name string) ([]backends.Waiter, error) {
	var ws []backends.Waiter
	_, err := s.read(ctx, func(c conn) error {
		ws = ws[:0]
		if parent, key, ok := backends.SplitInstance(name); ok {
			return listWaiters(ctx, c, &ws, qInstWaitList, parent, key)
		}
		if err := listWaiters(ctx, c, &ws, qWaitList, name); err != nil {
			return err
		}
		return listWaiters(ctx, c, &ws, qInstWaitListAll, name)
	})
	if err != nil {
		return nil, fmt.Errorf("list waiters %s: %w", backends.DescribeRef(name), err)
	}
	return ws, nil
}

// listWaiters appends the rows of q (key, host, pid, since, expires_at, in
// line order per key) to ws, numbering places within each key's line.
func listWaiters(ctx context.Context, c conn, ws *[]backends.Waiter, q string, args ...any) error {
	rows, err := c.query(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var w backends.Waiter
		var since, exp int64
		if err := rows.Scan(&w.Key, &w.Host, &w.PID, &since, &exp); err != nil {
			return err
		}
		if since > 0 {
			w.Since = fromMicros(since)
		}
		w.ExpiresAt = fromMicros(exp)
		w.Place = 1
		if n := len(*ws); n > 0 && (*ws)[n-1].Key == w.Key {
			w.Place = (*ws)[n-1].Place + 1
		}
		*ws = append(*ws, w)
	}
	return rows.Err()
}
