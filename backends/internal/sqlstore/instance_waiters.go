package sqlstore

import (
	"context"
	"fmt"

	"github.com/coordd/coordd/backends"
)

// An instance's line is its rows of semaphore_instance_waiters, with the
// rules of a semaphore's line (waiters_line.go); max_waiting bounds each
// instance's line.
var (
	// qInstWaitRenew renews owner's live waiter record, keeping its place.
	// Arguments: lease µs, name, key, owner.
	qInstWaitRenew = Query{SQL: `UPDATE {p}semaphore_instance_waiters SET expires_at = {now} + ?
WHERE name = ? AND ikey = ? AND owner = ? AND expires_at > {now}`}

	// qInstWaitRenewSeq is qInstWaitRenew returning the owner's ticket
	// (ReturningInt).
	qInstWaitRenewSeq = Query{
		SQL: qInstWaitRenew.SQL + ` RETURNING seq`,
		MySQL: `UPDATE {p}semaphore_instance_waiters SET expires_at = {now} + ?, seq = LAST_INSERT_ID(seq)
WHERE name = ? AND ikey = ? AND owner = ? AND expires_at > {now}`,
	}

	// qInstWaitCount counts an instance's waiters and finds its highest
	// ticket (after the sweep, every row is live).
	qInstWaitCount = Query{SQL: `SELECT count(*), coalesce(max(seq), 0) FROM {p}semaphore_instance_waiters WHERE name = ? AND ikey = ?`}

	// qInstWaitInsert queues owner behind every live waiter of an
	// instance. Arguments: name, key, owner, seq, lease µs, host, pid.
	qInstWaitInsert = Query{SQL: `INSERT INTO {p}semaphore_instance_waiters (name, ikey, owner, seq, expires_at, host, pid, since)
VALUES (?, ?, ?, ?, {now} + ?, ?, ?, {now})`}

	// qInstWaitLeave removes owner's waiter record.
	qInstWaitLeave = Query{SQL: `DELETE FROM {p}semaphore_instance_waiters WHERE name = ? AND ikey = ? AND owner = ?`}

	// qInstWaitFirst finds the oldest live waiter of an instance.
	qInstWaitFirst = Query{SQL: `SELECT owner FROM {p}semaphore_instance_waiters WHERE name = ? AND ikey = ? AND expires_at > {now} ORDER BY seq LIMIT 1`}

	// qInstMayAcquire is WaitSemaphore's poll for an instance: true when
	// TryAcquire may succeed for the owner (fewer live holders than the
	// limit, and fewer live waiters ahead of it than slots free). No row:
	// the semaphore is absent. Arguments: key, key, owner, key, name.
	qInstMayAcquire = Query{SQL: `SELECT (SELECT count(*) FROM {p}semaphore_instance_waiters w
    WHERE w.name = s.name AND w.ikey = ? AND w.expires_at > {now}
      AND w.seq < coalesce((SELECT x.seq FROM {p}semaphore_instance_waiters x
        WHERE x.name = s.name AND x.ikey = ? AND x.owner = ? AND x.expires_at > {now}), ` + noTicket + `))
  < s.lim - (SELECT count(*) FROM {p}semaphore_instance_slots t WHERE t.name = s.name AND t.ikey = ? AND t.expires_at > {now})
FROM {p}semaphores s WHERE s.name = ?`}
)

// EnterInstanceLine queues req.Owner in the line of the instance of name
// for key (creating the instance), or renews its live record, in a write
// transaction that locks the semaphore and sweeps its expired instance
// rows first; with ticket it returns the owner's ticket (as EnterLine).
// ErrTooManyWaiters: the instance's live waiters reach the semaphore's
// max_waiting.
func EnterInstanceLine(ctx context.Context, c Conn, d *Dialect, name, key string, req backends.AcquireRequest, lease int64, ticket bool) (seq int64, err error) {
	sem, err := LockInstances(ctx, c, d, name)
	if err != nil {
		return 0, err
	}
	seq, renewed, err := renew(ctx, c, d, ticket, qInstWaitRenew, qInstWaitRenewSeq, lease, name, key, req.Owner)
	if err != nil || renewed {
		return seq, err
	}
	var waiting int
	if err := c.QueryRow(ctx, d.Text(qInstWaitCount), name, key).Scan(&waiting, &seq); err != nil {
		return 0, err
	}
	if sem.MaxWaiting >= 0 && waiting >= sem.MaxWaiting {
		return 0, fmt.Errorf("%d of %d waiting: %w", waiting, sem.MaxWaiting, backends.ErrTooManyWaiters)
	}
	seq++
	_, err = c.Exec(ctx, d.Text(qInstWaitInsert), name, key, req.Owner, seq, lease, req.Host, req.PID)
	return seq, err
}
