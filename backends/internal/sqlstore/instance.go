package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/internal/slots"
)

// Instances of keyed semaphores (backends/instance.go). An instance is its
// rows in semaphore_instance_slots (one per holder, none free) and
// semaphore_instance_waiters, keyed by (name, ikey); the semaphore's row
// holds the config and the fencing counter. Every transaction that adds to
// an instance (acquire, enter wait) locks the semaphore's row first, reads
// the config and the store's clock under it, and then sweeps, counts and
// writes the instance's rows: so the instances of one semaphore change one
// at a time, an instance is created and removed with the call that does
// it, and a limit change (which takes the same lock) reaches them between
// two calls. The sweep deletes the expired rows of every instance of the
// semaphore: an expired holder's slot is free to take anyway, deleting its
// row is the reclaim, and it leaves nothing of an instance nobody uses.
// Since the sweep is a write, it waits for an extend in flight and keeps
// the row the extend renewed; an extend that comes after finds its row
// gone (ErrLost).
var (
	// qInstLock reads and locks the semaphore an instance obeys, with the
	// store's now. No row: the semaphore is absent.
	qInstLock = Query{SQL: `SELECT lim, max_waiting, keyed, fencing, {now} FROM {p}semaphores WHERE name = ?{lock}`}

	// qInstSweepSlots and qInstSweepWaiters delete the rows of every
	// instance of a semaphore whose lease expired by now. Arguments: name,
	// now.
	qInstSweepSlots   = Query{SQL: `DELETE FROM {p}semaphore_instance_slots WHERE name = ? AND expires_at <= ?`}
	qInstSweepWaiters = Query{SQL: `DELETE FROM {p}semaphore_instance_waiters WHERE name = ? AND expires_at <= ?`}

	// qInstSlots lists an instance's slot numbers (after a sweep, every
	// row is a live holder).
	qInstSlots = Query{SQL: `SELECT slot FROM {p}semaphore_instance_slots WHERE name = ? AND ikey = ? ORDER BY slot`}

	// qInstAhead counts the live waiters ahead of an owner in an
	// instance's line (every one when the owner has no live record) and
	// tells whether it has a record. Arguments: name, key, now, name, key,
	// owner, now, name, key, owner.
	qInstAhead = Query{SQL: `SELECT (SELECT count(*) FROM {p}semaphore_instance_waiters w WHERE w.name = ? AND w.ikey = ? AND w.expires_at > ?
    AND w.seq < coalesce((SELECT x.seq FROM {p}semaphore_instance_waiters x
      WHERE x.name = ? AND x.ikey = ? AND x.owner = ? AND x.expires_at > ?), ` + noTicket + `)),
  EXISTS (SELECT 1 FROM {p}semaphore_instance_waiters WHERE name = ? AND ikey = ? AND owner = ?)`}

	// qInstBump sets the semaphore's fencing counter to the number the
	// grant hands out: Dialect.NextCounter of the value read under the
	// semaphore's row lock. Arguments: fencing, name.
	qInstBump = Query{SQL: `UPDATE {p}semaphores SET fencing = ? WHERE name = ?`}

	// qInstTake records a new holder. Arguments: name, key, slot, owner,
	// host, pid, fencing, acquired_at, expires_at.
	qInstTake = Query{SQL: `INSERT INTO {p}semaphore_instance_slots (name, ikey, slot, owner, host, pid, fencing, acquired_at, expires_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`}

	// qInstExtend renews a live lease of its owner. Standard flavor only
	// (RETURNING). Arguments: lease µs, name, key, owner.
	qInstExtend = Query{SQL: `UPDATE {p}semaphore_instance_slots SET expires_at = {now} + ?
WHERE name = ? AND ikey = ? AND owner = ? AND expires_at > {now} RETURNING expires_at`}

	// qInstRelease deletes owner's holder row and says whether its lease
	// was still live. Standard flavor only (RETURNING).
	qInstRelease = Query{SQL: `DELETE FROM {p}semaphore_instance_slots WHERE name = ? AND ikey = ? AND owner = ?
RETURNING expires_at > {now}`}

	// qInstHolders lists an instance's live holders.
	qInstHolders = Query{SQL: `SELECT ikey, slot, owner, host, pid, fencing, acquired_at, expires_at FROM {p}semaphore_instance_slots
WHERE name = ? AND ikey = ? AND expires_at > {now} ORDER BY slot`}

	// qInstAllHolders lists the live holders of every instance of a
	// semaphore.
	qInstAllHolders = Query{SQL: `SELECT ikey, slot, owner, host, pid, fencing, acquired_at, expires_at FROM {p}semaphore_instance_slots
WHERE name = ? AND expires_at > {now} ORDER BY ikey, slot`}

	// qInstLiveCount counts the live holders of every instance of a
	// semaphore (DeleteSemaphore).
	qInstLiveCount = Query{SQL: `SELECT count(*) FROM {p}semaphore_instance_slots WHERE name = ? AND expires_at > {now}`}
)

// InstanceSem is the semaphore an instance obeys, read under its row lock.
type InstanceSem struct {
	Limit, MaxWaiting int
	Fencing           int64
	Now               int64 // the store's clock, µs
}

// LockInstances locks and reads the semaphore whose instance is changed
// (ErrNotFound, ErrNotKeyed), then sweeps the expired rows of its
// instances.
func LockInstances(ctx context.Context, c Conn, d *Dialect, name string) (InstanceSem, error) {
	var r InstanceSem
	var keyed bool
	err := c.QueryRow(ctx, d.Text(qInstLock), name).Scan(&r.Limit, &r.MaxWaiting, &keyed, &r.Fencing, &r.Now)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return r, backends.ErrNotFound
	case err != nil:
		return r, err
	case !keyed:
		return r, backends.ErrNotKeyed
	}
	if _, err := c.Exec(ctx, d.Text(qInstSweepSlots), name, r.Now); err != nil {
		return r, err
	}
	_, err = c.Exec(ctx, d.Text(qInstSweepWaiters), name, r.Now)
	return r, err
}

// CheckInstanceAcquire checks an acquire of an instance and returns the
// lease in microseconds.
func CheckInstanceAcquire(name, key string, req backends.AcquireRequest) (int64, error) {
	what := backends.SemRef{Name: name, Key: key}.String()
	if err := backends.CheckInstanceKey(key); err != nil {
		return 0, fmt.Errorf("acquire %s: %w", what, err)
	}
	return CheckAcquireRequest(what, req)
}

// TakeInstanceSlot is an instance's acquire in a write transaction: it
// locks the semaphore and sweeps its expired instance rows (the reclaim),
// then grants the lowest slot number the instance does not use unless
// Refusal says no. The grant bumps the semaphore's fencing counter and
// removes req.Owner's waiter record. A refusal comes back as refused with
// a nil error, so that the transaction still commits the sweep.
func TakeInstanceSlot(ctx context.Context, c Conn, d *Dialect, name, key string, req backends.AcquireRequest, lease int64) (g backends.Grant, refused, err error) {
	sem, err := LockInstances(ctx, c, d, name)
	if err != nil {
		return g, nil, err
	}
	rows, err := c.Query(ctx, d.Text(qInstSlots), name, key)
	if err != nil {
		return g, nil, err
	}
	used, err := slots.Numbers(rows)
	if err != nil {
		return g, nil, err
	}
	var ahead int64
	var waiting bool
	err = c.QueryRow(ctx, d.Text(qInstAhead), name, key, sem.Now, name, key, req.Owner, sem.Now, name, key, req.Owner).Scan(&ahead, &waiting)
	if err != nil {
		return g, nil, err
	}
	if refused := Refusal(int64(len(used)), int64(sem.Limit), ahead, true); refused != nil {
		return g, refused, nil
	}
	g = backends.Grant{Slot: slots.LowestUnused(used), Fencing: d.NextCounter(sem.Fencing, sem.Now), ExpiresAt: FromMicros(sem.Now + lease)}
	if _, err := c.Exec(ctx, d.Text(qInstBump), g.Fencing, name); err != nil {
		return g, nil, err
	}
	_, err = c.Exec(ctx, d.Text(qInstTake), name, key, g.Slot, req.Owner, req.Host, req.PID, g.Fencing, sem.Now, sem.Now+lease)
	if err == nil && waiting {
		_, err = c.Exec(ctx, d.Text(qInstWaitLeave), name, key, req.Owner)
	}
	return g, nil, err
}

// acquireInstance takes a slot of the instance of name for key
// (TakeInstanceSlot) in one write transaction.
func (s *Core) acquireInstance(ctx context.Context, name, key string, req backends.AcquireRequest) (backends.Grant, error) {
	lease, err := CheckInstanceAcquire(name, key, req)
	if err != nil {
		return backends.Grant{}, err
	}
	var g backends.Grant
	var refused error
	err = s.DB.Write(ctx, func(c Conn) (err error) {
		g, refused, err = TakeInstanceSlot(ctx, c, s.DB.Dialect(), name, key, req, lease)
		return err
	})
	if err == nil {
		err = refused
	}
	if err != nil {
		return backends.Grant{}, fmt.Errorf("acquire %s: %w", backends.SemRef{Name: name, Key: key}.String(), err)
	}
	return g, nil
}

// extendInstance renews owner's lease on an instance; ErrLost once it
// expired.
func (s *Core) extendInstance(ctx context.Context, name, key, owner string, lease time.Duration) (time.Time, error) {
	what := backends.SemRef{Name: name, Key: key}.String()
	us, err := LeaseMicros(lease)
	if err != nil {
		return time.Time{}, fmt.Errorf("extend %s: %w", what, err)
	}
	var exp int64
	err = s.DB.Write(ctx, func(c Conn) error {
		err := c.QueryRow(ctx, s.DB.Dialect().Text(qInstExtend), us, name, key, owner).Scan(&exp)
		if errors.Is(err, sql.ErrNoRows) {
			return backends.ErrLost
		}
		return err
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("extend %s: %w", what, err)
	}
	return FromMicros(exp), nil
}

// releaseInstance deletes owner's holder row: the instance is gone with it
// when it was the last row. A lease that had expired (and was not swept
// yet) is deleted too, but the call returns ErrLost.
func (s *Core) releaseInstance(ctx context.Context, name, key, owner string) error {
	var wasLive bool
	err := s.DB.Write(ctx, func(c Conn) error {
		err := c.QueryRow(ctx, s.DB.Dialect().Text(qInstRelease), name, key, owner).Scan(&wasLive)
		if errors.Is(err, sql.ErrNoRows) {
			return backends.ErrLost
		}
		return err
	})
	if err == nil && !wasLive {
		err = fmt.Errorf("lease had expired: %w", backends.ErrLost)
	}
	if err != nil {
		return fmt.Errorf("release %s: %w", backends.SemRef{Name: name, Key: key}.String(), err)
	}
	return nil
}

// instanceHolders reads the holders q lists: rows of (ikey, slot, owner,
// host, pid, fencing, acquired_at, expires_at).
func instanceHolders(ctx context.Context, c Conn, d *Dialect, q Query, args ...any) ([]backends.Holder, error) {
	rows, err := c.Query(ctx, d.Text(q), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var hs []backends.Holder
	for rows.Next() {
		var h backends.Holder
		var acq, exp int64
		if err := rows.Scan(&h.Key, &h.Slot, &h.Owner, &h.Host, &h.PID, &h.Fencing, &acq, &exp); err != nil {
			return nil, err
		}
		h.AcquiredAt, h.ExpiresAt = FromMicros(acq), FromMicros(exp)
		hs = append(hs, h)
	}
	return hs, rows.Err()
}
