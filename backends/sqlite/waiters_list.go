package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/internal/waiterrow"
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

// waitListQueries are the queries above, for waiterrow.List.
var waitListQueries = waiterrow.Queries{Line: qWaitList, Instance: qInstWaitList, Instances: qInstWaitListAll}

// ListWaiters lists the live waiters of semaphore or instance name in line
// order, from one snapshot (backends.WaiterLister).
func (s *Store) ListWaiters(ctx context.Context, name string) ([]backends.Waiter, error) {
	var ws []backends.Waiter
	_, err := s.read(ctx, func(c conn) (err error) {
		ws, err = waiterrow.List(name, waitListQueries, func(q string, args ...any) (*sql.Rows, error) {
			return c.query(ctx, q, args...)
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list waiters %s: %w", backends.DescribeRef(name), err)
	}
	return ws, nil
}
