package sqlite

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
// holds the config and the fencing counter. Every change runs in one write
// transaction, which holds the file's write lock from its first read: the
// semaphore's row is read, the instance's rows counted and changed, and the
// counter bumped against one state, so an instance is created and removed
// with the acquire, release or wait that does it.

const (
	// qInstSem reads what an instance obeys: its semaphore's limit,
	// max_waiting and whether it is keyed. No row: the semaphore is absent.
	qInstSem = `SELECT lim, max_waiting, keyed FROM semaphores WHERE name = ?`

	// qInstSweepSlots and qInstSweepWaiters delete the rows of every
	// instance of a semaphore whose lease expired: a holder or waiter that
	// crashed. An expired holder's slot is free to take anyway; deleting its
	// row is the reclaim, and leaves nothing of an instance nobody uses.
	qInstSweepSlots   = `DELETE FROM semaphore_instance_slots WHERE name = ? AND expires_at <= ` + nowSQL
	qInstSweepWaiters = `DELETE FROM semaphore_instance_waiters WHERE name = ? AND expires_at <= ` + nowSQL

	// qInstSlots lists an instance's slot numbers (after a sweep, every row
	// is a live holder).
	qInstSlots = `SELECT slot FROM semaphore_instance_slots WHERE name = ? AND ikey = ? ORDER BY slot`

	// qInstAhead counts the live waiters ahead of an owner in an instance's
	// line (every one when the owner has no live record) and tells whether
	// it has a record. Arguments: owner, owner, name, key.
	qInstAhead = `SELECT (SELECT count(*) FROM semaphore_instance_waiters w
    WHERE w.name = i.name AND w.ikey = i.ikey AND w.expires_at > ` + nowSQL + `
      AND w.seq < coalesce((SELECT x.seq FROM semaphore_instance_waiters x
        WHERE x.name = i.name AND x.ikey = i.ikey AND x.owner = ? AND x.expires_at > ` + nowSQL + `), 9223372036854775807)),
  EXISTS (SELECT 1 FROM semaphore_instance_waiters WHERE name = i.name AND ikey = i.ikey AND owner = ?)
FROM (SELECT ? AS name, ? AS ikey) i`

	// qInstTake records a new holder, leased from backend now.
	qInstTake = `INSERT INTO semaphore_instance_slots (name, ikey, slot, owner, host, pid, fencing, acquired_at, expires_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ` + nowSQL + `, ` + nowSQL + ` + ?) RETURNING expires_at`

	// qInstExtend renews a live lease of its owner.
	qInstExtend = `UPDATE semaphore_instance_slots SET expires_at = ` + nowSQL + ` + ?
WHERE name = ? AND ikey = ? AND owner = ? AND expires_at > ` + nowSQL + ` RETURNING expires_at`

	// qInstRelease deletes owner's holder row and says whether its lease
	// was still live.
	qInstRelease = `DELETE FROM semaphore_instance_slots WHERE name = ? AND ikey = ? AND owner = ?
RETURNING expires_at > ` + nowSQL

	// qInstHolders lists an instance's live holders.
	qInstHolders = `SELECT ikey, slot, owner, host, pid, fencing, acquired_at, expires_at FROM semaphore_instance_slots
WHERE name = ? AND ikey = ? AND expires_at > ` + nowSQL + ` ORDER BY slot`

	// qInstAllHolders lists the live holders of every instance of a
	// semaphore.
	qInstAllHolders = `SELECT ikey, slot, owner, host, pid, fencing, acquired_at, expires_at FROM semaphore_instance_slots
WHERE name = ? AND expires_at > ` + nowSQL + ` ORDER BY ikey, slot`

	// qInstObserveHolders reads the live holders of every instance of many
	// semaphores (a JSON array of names).
	qInstObserveHolders = `SELECT name, ikey, slot, owner, host, pid, fencing, acquired_at, expires_at FROM semaphore_instance_slots
WHERE name IN (SELECT value FROM json_each(?)) AND expires_at > ` + nowSQL + ` ORDER BY name, ikey, slot`

	// qInstObserveWaiters counts the live waiters of every instance of many
	// semaphores.
	qInstObserveWaiters = `SELECT name, ikey, count(*) FROM semaphore_instance_waiters
WHERE name IN (SELECT value FROM json_each(?)) AND expires_at > ` + nowSQL + ` GROUP BY name, ikey ORDER BY name, ikey`

	// qInstLiveCount counts the live holders of every instance of a
	// semaphore (DeleteSemaphore).
	qInstLiveCount = `SELECT count(*) FROM semaphore_instance_slots WHERE name = ? AND expires_at > ` + nowSQL

	// qInstDeleteSlots and qInstDeleteWaiters remove every instance row of
	// a semaphore (DeleteSemaphore, once no instance has a live holder).
	qInstDeleteSlots   = `DELETE FROM semaphore_instance_slots WHERE name = ?`
	qInstDeleteWaiters = `DELETE FROM semaphore_instance_waiters WHERE name = ?`

	// qInstWaitRenew renews owner's live waiter record, keeping its place.
	qInstWaitRenew = `UPDATE semaphore_instance_waiters SET expires_at = ` + nowSQL + ` + ?
WHERE name = ? AND ikey = ? AND owner = ? AND expires_at > ` + nowSQL

	// qInstWaitCount counts an instance's waiters and finds its highest
	// ticket (run after the sweep: every row is live).
	qInstWaitCount = `SELECT count(*), coalesce(max(seq), 0) FROM semaphore_instance_waiters WHERE name = ? AND ikey = ?`

	// qInstWaitInsert queues owner behind every live waiter of an instance.
	qInstWaitInsert = `INSERT INTO semaphore_instance_waiters (name, ikey, owner, seq, expires_at, host, pid, since)
VALUES (?, ?, ?, ?, ` + nowSQL + ` + ?, ?, ?, ` + nowSQL + `)`

	// qInstWaitLeave removes owner's waiter record.
	qInstWaitLeave = `DELETE FROM semaphore_instance_waiters WHERE name = ? AND ikey = ? AND owner = ?`

	// qInstWaitFirst finds the oldest live waiter of an instance.
	qInstWaitFirst = `SELECT owner FROM semaphore_instance_waiters WHERE name = ? AND ikey = ? AND expires_at > ` + nowSQL + ` ORDER BY seq LIMIT 1`

	// qInstMayAcquire is WaitSemaphore's poll for an instance: true when
	// TryAcquire may succeed for the owner (fewer live holders than the
	// limit, and fewer live waiters ahead of it than slots free). No row:
	// the semaphore is absent. Arguments: owner, key, name.
	qInstMayAcquire = `SELECT (SELECT count(*) FROM semaphore_instance_waiters w
    WHERE w.name = s.name AND w.ikey = i.ikey AND w.expires_at > ` + nowSQL + `
      AND w.seq < coalesce((SELECT x.seq FROM semaphore_instance_waiters x
        WHERE x.name = s.name AND x.ikey = i.ikey AND x.owner = ? AND x.expires_at > ` + nowSQL + `), 9223372036854775807))
  < s.lim - (SELECT count(*) FROM semaphore_instance_slots t WHERE t.name = s.name AND t.ikey = i.ikey AND t.expires_at > ` + nowSQL + `)
FROM semaphores s, (SELECT ? AS ikey) i WHERE s.name = ?`
)

// instSem reads the semaphore an instance obeys and checks that it is
// keyed (ErrNotFound, ErrNotKeyed).
func instSem(ctx context.Context, c conn, name string) (limit, maxWaiting int, err error) {
	var keyed bool
	err = c.QueryRow(ctx, qInstSem, name).Scan(&limit, &maxWaiting, &keyed)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, 0, backends.ErrNotFound
	case err != nil:
		return 0, 0, err
	case !keyed:
		return 0, 0, backends.ErrNotKeyed
	}
	return limit, maxWaiting, nil
}

// sweepInstances deletes the expired holder and waiter rows of every
// instance of semaphore name.
func sweepInstances(ctx context.Context, c conn, name string) error {
	if _, err := c.Exec(ctx, qInstSweepSlots, name); err != nil {
		return err
	}
	_, err := c.Exec(ctx, qInstSweepWaiters, name)
	return err
}

// instAcquire takes a slot of the instance of name for key: in one write
// transaction it sweeps the semaphore's expired instance rows (the reclaim),
// then grants the lowest slot number the instance does not use unless its
// live holders reach the semaphore's limit or the instance's line says it is
// not req.Owner's turn. The grant bumps the semaphore's fencing counter and
// removes req.Owner's waiter record. A refusal still commits the sweep.
func (s *Store) instAcquire(ctx context.Context, name, key string, req backends.AcquireRequest) (backends.Grant, error) {
	var g backends.Grant
	what := backends.DescribeRef(backends.Instance(name, key))
	if err := backends.CheckInstanceKey(key); err != nil {
		return g, fmt.Errorf("acquire %s: %w", what, err)
	}
	if err := backends.CheckAcquire(req); err != nil {
		return g, fmt.Errorf("acquire %s: %w", what, err)
	}
	if req.Owner == "" {
		return g, fmt.Errorf("acquire %s: empty owner", what)
	}
	lease, err := leaseMicros(req.Lease)
	if err != nil {
		return g, fmt.Errorf("acquire %s: %w", what, err)
	}
	var refused error
	err = s.write(ctx, func(c conn) error {
		refused = nil
		limit, _, err := instSem(ctx, c, name)
		if err != nil {
			return err
		}
		if err := sweepInstances(ctx, c, name); err != nil {
			return err
		}
		used, err := instSlots(ctx, c, name, key)
		if err != nil {
			return err
		}
		var ahead int
		var waiting bool
		if err := c.QueryRow(ctx, qInstAhead, req.Owner, req.Owner, name, key).Scan(&ahead, &waiting); err != nil {
			return err
		}
		live := len(used)
		switch {
		case live >= limit:
			refused = fmt.Errorf("%d of %d held: %w", live, limit, backends.ErrNoSlot)
			return nil
		case ahead >= limit-live:
			refused = fmt.Errorf("%d of %d held, %d waiters ahead in line: %w", live, limit, ahead, backends.ErrNoSlot)
			return nil
		}
		slot := slots.LowestUnused(used)
		if err := c.QueryRow(ctx, qSemNextFencing, name).Scan(&g.Fencing); err != nil {
			return err
		}
		var exp int64
		if err := c.QueryRow(ctx, qInstTake, name, key, slot, req.Owner, req.Host, req.PID, g.Fencing, lease).Scan(&exp); err != nil {
			return err
		}
		g.Slot, g.ExpiresAt = slot, fromMicros(exp)
		if waiting {
			_, err = c.Exec(ctx, qInstWaitLeave, name, key, req.Owner)
		}
		return err
	})
	if err == nil {
		err = refused
	}
	if err != nil {
		return backends.Grant{}, fmt.Errorf("acquire %s: %w", what, err)
	}
	return g, nil
}

// instSlots lists the slot numbers an instance uses, in order.
func instSlots(ctx context.Context, c conn, name, key string) ([]int, error) {
	rows, err := c.Query(ctx, qInstSlots, name, key)
	if err != nil {
		return nil, err
	}
	return slots.Numbers(rows)
}

// instExtend renews owner's lease on an instance; ErrLost once it expired.
func (s *Store) instExtend(ctx context.Context, name, key, owner string, lease time.Duration) (time.Time, error) {
	what := backends.DescribeRef(backends.Instance(name, key))
	us, err := leaseMicros(lease)
	if err != nil {
		return time.Time{}, fmt.Errorf("extend %s: %w", what, err)
	}
	var exp int64
	err = s.write(ctx, func(c conn) error {
		err := c.QueryRow(ctx, qInstExtend, us, name, key, owner).Scan(&exp)
		if errors.Is(err, sql.ErrNoRows) {
			return backends.ErrLost
		}
		return err
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("extend %s: %w", what, err)
	}
	return fromMicros(exp), nil
}

// instRelease deletes owner's holder row: the instance is gone with it
// when it was the last row. A lease that had expired (and was not swept
// yet) is deleted too, but the call returns ErrLost.
func (s *Store) instRelease(ctx context.Context, name, key, owner string) error {
	var wasLive bool
	err := s.write(ctx, func(c conn) error {
		err := c.QueryRow(ctx, qInstRelease, name, key, owner).Scan(&wasLive)
		if errors.Is(err, sql.ErrNoRows) {
			return backends.ErrLost
		}
		return err
	})
	if err == nil && !wasLive {
		err = fmt.Errorf("lease had expired: %w", backends.ErrLost)
	}
	if err != nil {
		return fmt.Errorf("release %s: %w", backends.DescribeRef(backends.Instance(name, key)), err)
	}
	return nil
}

// scanInstHolders reads rows of (ikey, slot, owner, host, pid, fencing,
// acquired_at, expires_at).
func scanInstHolders(rows *sql.Rows) ([]backends.Holder, error) {
	defer rows.Close()
	var hs []backends.Holder
	for rows.Next() {
		var h backends.Holder
		var acq, exp int64
		if err := rows.Scan(&h.Key, &h.Slot, &h.Owner, &h.Host, &h.PID, &h.Fencing, &acq, &exp); err != nil {
			return nil, err
		}
		h.AcquiredAt, h.ExpiresAt = fromMicros(acq), fromMicros(exp)
		hs = append(hs, h)
	}
	return hs, rows.Err()
}

// instHolders lists an instance's live holders by slot.
func (s *Store) instHolders(ctx context.Context, name, key string) ([]backends.Holder, error) {
	var hs []backends.Holder
	_, err := s.read(ctx, func(c conn) error {
		rows, err := c.Query(ctx, qInstHolders, name, key)
		if err != nil {
			return err
		}
		hs, err = scanInstHolders(rows)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("holders %s: %w", backends.DescribeRef(backends.Instance(name, key)), err)
	}
	return hs, nil
}

// allInstHolders lists the live holders of every instance of name, by key
// and slot.
func allInstHolders(ctx context.Context, c conn, name string) ([]backends.Holder, error) {
	rows, err := c.Query(ctx, qInstAllHolders, name)
	if err != nil {
		return nil, err
	}
	return scanInstHolders(rows)
}

// observeInstances adds the live instances of the keyed semaphores in out
// (whose names arg lists as JSON) to their states: the holders of every
// instance to Holders, their waiters to Waiters, and each instance to
// Instances. A keyed semaphore's Slots is then what it should be: it has no
// slot row to drift.
func observeInstances(ctx context.Context, c conn, arg string, out map[string]*backends.SemaphoreState) error {
	type ik struct{ name, key string }
	inst := map[ik]*backends.InstanceState{}
	get := func(name, key string) *backends.InstanceState {
		k := ik{name, key}
		if inst[k] == nil {
			inst[k] = &backends.InstanceState{Key: key}
		}
		return inst[k]
	}
	var order []ik
	rows, err := c.Query(ctx, qInstObserveHolders, arg)
	if err != nil {
		return err
	}
	for rows.Next() {
		var name string
		var h backends.Holder
		var acq, exp int64
		if err := rows.Scan(&name, &h.Key, &h.Slot, &h.Owner, &h.Host, &h.PID, &h.Fencing, &acq, &exp); err != nil {
			rows.Close()
			return err
		}
		h.AcquiredAt, h.ExpiresAt = fromMicros(acq), fromMicros(exp)
		if inst[ik{name, h.Key}] == nil {
			order = append(order, ik{name, h.Key})
		}
		is := get(name, h.Key)
		is.Holders = append(is.Holders, h)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	rows, err = c.Query(ctx, qInstObserveWaiters, arg)
	if err != nil {
		return err
	}
	for rows.Next() {
		var name, key string
		var n int
		if err := rows.Scan(&name, &key, &n); err != nil {
			rows.Close()
			return err
		}
		if inst[ik{name, key}] == nil {
			order = append(order, ik{name, key})
		}
		get(name, key).Waiters = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, k := range order {
		st := out[k.name]
		if st == nil {
			continue
		}
		is := inst[k]
		st.Holders = append(st.Holders, is.Holders...)
		st.Waiters += is.Waiters
		st.Instances = append(st.Instances, *is)
	}
	for _, st := range out {
		if st.Config.Keyed {
			backends.SortInstances(st.Instances)
			st.Slots = st.WantSlots()
		}
	}
	return nil
}

// instEnterWait queues owner in the line of the instance of name for key
// (creating the instance), or renews its record; ErrTooManyWaiters when
// the instance's live waiters reach the semaphore's max_waiting.
func (s *Store) instEnterWait(ctx context.Context, name, key string, req backends.AcquireRequest) error {
	owner, lease := req.Owner, req.Lease
	what := backends.DescribeRef(backends.Instance(name, key))
	if err := backends.CheckInstanceKey(key); err != nil {
		return fmt.Errorf("enter wait %s: %w", what, err)
	}
	if owner == "" {
		return fmt.Errorf("enter wait %s: empty owner", what)
	}
	us, err := leaseMicros(lease)
	if err != nil {
		return fmt.Errorf("enter wait %s: %w", what, err)
	}
	err = s.write(ctx, func(c conn) error {
		_, maxWaiting, err := instSem(ctx, c, name)
		if err != nil {
			return err
		}
		if err := sweepInstances(ctx, c, name); err != nil {
			return err
		}
		n, err := affected(c.Exec(ctx, qInstWaitRenew, us, name, key, owner))
		if err != nil || n > 0 {
			return err
		}
		var waiting int
		var last int64
		if err := c.QueryRow(ctx, qInstWaitCount, name, key).Scan(&waiting, &last); err != nil {
			return err
		}
		if maxWaiting >= 0 && waiting >= maxWaiting {
			return fmt.Errorf("%d of %d waiting: %w", waiting, maxWaiting, backends.ErrTooManyWaiters)
		}
		_, err = c.Exec(ctx, qInstWaitInsert, name, key, owner, last+1, us, req.Host, req.PID)
		return err
	})
	if err != nil {
		return fmt.Errorf("enter wait %s as %q: %w", what, owner, err)
	}
	return nil
}

// affected returns the rows a statement changed.
func affected(res sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// instLeaveWait removes owner's waiter record; the instance is gone with it
// when it was the last row. Absent is not an error.
func (s *Store) instLeaveWait(ctx context.Context, name, key, owner string) error {
	err := s.write(ctx, func(c conn) error {
		_, err := c.Exec(ctx, qInstWaitLeave, name, key, owner)
		return err
	})
	if err != nil {
		return fmt.Errorf("leave wait %s as %q: %w", backends.DescribeRef(backends.Instance(name, key)), owner, err)
	}
	return nil
}

// instFirstWaiter returns the head of an instance's line, "" when nobody
// waits.
func (s *Store) instFirstWaiter(ctx context.Context, name, key string) (string, error) {
	var owner string
	_, err := s.read(ctx, func(c conn) error {
		err := c.QueryRow(ctx, qInstWaitFirst, name, key).Scan(&owner)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		return err
	})
	if err != nil {
		return "", fmt.Errorf("first waiter %s: %w", backends.DescribeRef(backends.Instance(name, key)), err)
	}
	return owner, nil
}

// instWait is WaitSemaphore for an instance: the same poll as a
// semaphore's (see WaitSemaphore), with qInstMayAcquire.
func (s *Store) instWait(ctx context.Context, name, key, owner string, maxWait time.Duration) error {
	return s.pollWait(ctx, backends.Instance(name, key), maxWait, func() (may, absent bool, err error) {
		err = s.pool.On(nil).QueryRow(ctx, qInstMayAcquire, owner, key, name).Scan(&may)
		if errors.Is(err, sql.ErrNoRows) {
			return false, true, nil
		}
		return may, false, err
	})
}
