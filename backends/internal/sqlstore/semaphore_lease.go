package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/coordd/coordd/backends"
)

// The lease of a slot row, in the Standard flavor: one write transaction
// per call, the semaphore's row locked first. A MySQL store brings its own
// acquire, extend and the common release (one round trip each) and shares
// the rest.
var (
	// qSemRowLock locks the semaphore's row where the store has row locks
	// (lockSemaphoreRow).
	qSemRowLock = Query{SQL: `SELECT lim FROM {p}semaphores WHERE name = ?{lock}`}

	// lineAhead counts the live waiters ahead of an owner (the argument)
	// in the line of semaphore s: those with a lower ticket, or every live
	// waiter when the owner has no live record (a newcomer joins at the
	// tail). The line's rule (see TryAcquire) compares it with the free
	// slots.
	lineAhead = `(SELECT count(*) FROM {p}semaphore_waiters w WHERE w.name = s.name AND w.expires_at > {now}
    AND w.seq < coalesce((SELECT x.seq FROM {p}semaphore_waiters x
      WHERE x.name = s.name AND x.owner = ? AND x.expires_at > {now}), ` + noTicket + `))`

	// qSemAcquireState reads, against one instant, everything TryAcquire
	// decides on: the limit, the live holders, the lowest free slot row
	// (NULL: none), how many live waiters are ahead of the owner in line,
	// whether the owner has a waiter record and whether the semaphore is
	// keyed. No row: the semaphore is absent. Arguments: owner, owner,
	// name.
	qSemAcquireState = slotQuery(`SELECT s.lim,
  (SELECT count(*) FROM {p}semaphore_slots WHERE name = s.name AND {live}),
  (SELECT min(slot) FROM {p}semaphore_slots WHERE name = s.name AND {free}),
  ` + lineAhead + `,
  EXISTS (SELECT 1 FROM {p}semaphore_waiters WHERE name = s.name AND owner = ?),
  s.keyed
FROM {p}semaphores s WHERE s.name = ?`)

	// qSemNextFencing bumps the semaphore's fencing counter and returns
	// the new number: under the row lock, every grant gets a strictly
	// higher one. Standard flavor only (RETURNING).
	qSemNextFencing = Query{SQL: `UPDATE {p}semaphores SET fencing = {next:fencing} WHERE name = ? RETURNING fencing`}

	// qSemTake gives a free slot row to a new holder, leased from the
	// store's now, and returns the expiry; no row when the row is no
	// longer free. Arguments: owner, host, pid, fencing, lease µs, name,
	// slot.
	qSemTake = slotQuery(`UPDATE {p}semaphore_slots
SET {held}owner = ?, host = ?, pid = ?, fencing = ?, acquired_at = {now}, expires_at = {now} + ?
WHERE name = ? AND slot = ? AND {free} RETURNING expires_at`)

	// qSemExtend renews a lease, only for its owner and only while it has
	// not expired. Arguments: lease µs, name, owner.
	qSemExtend = Query{SQL: `UPDATE {p}semaphore_slots SET expires_at = {now} + ?
WHERE name = ? AND owner = ? AND expires_at > {now} RETURNING expires_at`}

	// qSemOwned finds (and locks) owner's slot row and whether its lease
	// is still live.
	qSemOwned = slotQuery(`SELECT slot, {live} FROM {p}semaphore_slots WHERE name = ? AND owner = ?{lock}`)

	// qSemFree frees owner's slot row.
	qSemFree = slotQuery(`UPDATE {p}semaphore_slots SET {freed}owner = NULL, host = '', pid = 0, acquired_at = 0, expires_at = 0
WHERE name = ? AND owner = ?`)

	// qSemHolders lists a semaphore's live holders by slot.
	qSemHolders = slotQuery(`SELECT slot, owner, host, pid, fencing, acquired_at, expires_at
FROM {p}semaphore_slots WHERE name = ? AND {live} ORDER BY slot`)
)

// noTicket stands for "not in line" where a waiter's ticket is compared:
// above every ticket, so every live waiter is ahead.
const noTicket = "9223372036854775807"

// CheckAcquireRequest checks what every acquire needs and returns the
// lease in microseconds; what names the semaphore or instance in errors.
func CheckAcquireRequest(what string, req backends.AcquireRequest) (int64, error) {
	if err := backends.CheckAcquire(req); err != nil {
		return 0, fmt.Errorf("acquire %s: %w", what, err)
	}
	if req.Owner == "" {
		return 0, fmt.Errorf("acquire %s: empty owner", what)
	}
	us, err := LeaseMicros(req.Lease)
	if err != nil {
		return 0, fmt.Errorf("acquire %s: %w", what, err)
	}
	return us, nil
}

// Refusal is the line's and the limit's answer to an acquire: nil when a
// slot may go to the caller, else why not (ErrNoSlot). A slot goes to an
// owner only while the live holders are below the limit (the guard that
// keeps a lowered limit safe) and fewer live waiters are ahead of it in
// line than slots are free, so a newcomer (and a --no-wait caller), who has
// every live waiter ahead of it, never takes a slot a waiter is entitled
// to. free reports a free slot row (for a keyed instance, always true: it
// has no free rows to run out of).
func Refusal(live, limit, ahead int64, free bool) error {
	switch {
	case live >= limit:
		return fmt.Errorf("%d of %d held: %w", live, limit, backends.ErrNoSlot)
	case ahead >= limit-live:
		return fmt.Errorf("%d of %d held, %d waiters ahead in line: %w", live, limit, ahead, backends.ErrNoSlot)
	case !free:
		// Fewer slot rows than the limit: drift until PutSemaphore repairs it.
		return fmt.Errorf("%d of %d held, no free slot row: %w", live, limit, backends.ErrNoSlot)
	}
	return nil
}

// lockSemaphoreRow locks the semaphore's row, so that the statements
// after it read what the previous holder of the lock committed. On a
// store without row locks ({lock} is empty: SQLite, whose write
// transaction holds the whole file) it sends nothing.
func lockSemaphoreRow(ctx context.Context, c Conn, d *Dialect, name string) error {
	if d.Lock == "" {
		return nil
	}
	var lim int
	if err := c.QueryRow(ctx, d.Text(qSemRowLock), name).Scan(&lim); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	return nil
}

// TryAcquire takes the lowest free slot row, unless Refusal says no, in a
// write transaction that locks the semaphore's row before it counts. The
// grant bumps the fencing counter and deletes the owner's waiter record in
// the same transaction: the line moves on at once. An instance reference
// acquires a slot of the instance (instance.go).
func (s *Core) TryAcquire(ctx context.Context, ref backends.SemRef, req backends.AcquireRequest) (backends.Grant, error) {
	name := ref.Name
	if ref.IsInstance() {
		return s.acquireInstance(ctx, name, ref.Key, req)
	}
	lease, err := CheckAcquireRequest(ref.String(), req)
	if err != nil {
		return backends.Grant{}, err
	}
	d := s.DB.Dialect()
	var g backends.Grant
	err = s.DB.Write(ctx, func(c Conn) error {
		if err := lockSemaphoreRow(ctx, c, d, name); err != nil {
			return err
		}
		var limit, live, ahead int64
		var slot sql.NullInt64
		var waiting, keyed bool
		err := c.QueryRow(ctx, d.Text(qSemAcquireState), req.Owner, req.Owner, name).Scan(&limit, &live, &slot, &ahead, &waiting, &keyed)
		if errors.Is(err, sql.ErrNoRows) {
			return backends.ErrNotFound
		}
		if err != nil {
			return err
		}
		if keyed {
			return backends.ErrKeyRequired
		}
		if err := Refusal(live, limit, ahead, slot.Valid); err != nil {
			return err
		}
		if err := c.QueryRow(ctx, d.Text(qSemNextFencing), name).Scan(&g.Fencing); err != nil {
			return err
		}
		var exp int64
		err = c.QueryRow(ctx, d.Text(qSemTake), req.Owner, req.Host, req.PID, g.Fencing, lease, name, slot.Int64).Scan(&exp)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrRetry // never overwrite a row that is no longer free: decide again
		}
		if err != nil {
			return err
		}
		g.Slot, g.ExpiresAt = int(slot.Int64), FromMicros(exp)
		if waiting {
			_, err = c.Exec(ctx, d.Text(qWaitLeave), name, req.Owner)
		}
		return err
	})
	if err != nil {
		return backends.Grant{}, fmt.Errorf("acquire %q: %w", name, err)
	}
	return g, nil
}

// Extend renews owner's lease to now+lease; ErrLost once it has expired.
func (s *Core) Extend(ctx context.Context, ref backends.SemRef, owner string, lease time.Duration) (time.Time, error) {
	name := ref.Name
	if ref.IsInstance() {
		return s.extendInstance(ctx, name, ref.Key, owner, lease)
	}
	us, err := LeaseMicros(lease)
	if err != nil {
		return time.Time{}, fmt.Errorf("extend %q: %w", name, err)
	}
	d := s.DB.Dialect()
	var exp int64
	err = s.DB.Write(ctx, func(c Conn) error {
		// An extend waits for an acquire that is counting holders, and an
		// acquire for an extend: a lease renewed just as it expired is
		// never counted free by an acquire that then takes another row.
		if err := lockSemaphoreRow(ctx, c, d, name); err != nil {
			return err
		}
		err := c.QueryRow(ctx, d.Text(qSemExtend), us, name, owner).Scan(&exp)
		if errors.Is(err, sql.ErrNoRows) {
			return backends.ErrLost
		}
		return err
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("extend %q: %w", name, err)
	}
	return FromMicros(exp), nil
}

// FreeSlot frees owner's slot row, or retires it when the semaphore has
// more rows than max(limit, live holders), holding the semaphore's row
// lock. It reports whether the lease was still live; ErrLost when owner
// holds no row.
func FreeSlot(ctx context.Context, c Conn, d *Dialect, name, owner string) (wasLive bool, err error) {
	r, _, err := LockSemaphore(ctx, c, d, name)
	if err != nil {
		return false, err
	}
	var slot int
	err = c.QueryRow(ctx, d.Text(qSemOwned), name, owner).Scan(&slot, &wasLive)
	if errors.Is(err, sql.ErrNoRows) {
		return false, backends.ErrLost
	}
	if err != nil {
		return false, err
	}
	if _, err := c.Exec(ctx, d.Text(qSemFree), name, owner); err != nil {
		return false, err
	}
	return wasLive, RepairSlots(ctx, c, d, name, SlotRows(r.Limit, r.Mode, r.Keyed), false)
}

// Release frees owner's slot row (FreeSlot). A row whose lease had expired
// is still cleared, but the call returns ErrLost: the caller's hold was not
// exclusive to the end.
func (s *Core) Release(ctx context.Context, ref backends.SemRef, owner string) error {
	name := ref.Name
	if ref.IsInstance() {
		return s.releaseInstance(ctx, name, ref.Key, owner)
	}
	wasLive := false
	err := s.DB.Write(ctx, func(c Conn) (err error) {
		wasLive, err = FreeSlot(ctx, c, s.DB.Dialect(), name, owner)
		return err
	})
	if err == nil && !wasLive {
		err = fmt.Errorf("lease had expired: %w", backends.ErrLost)
	}
	if err != nil {
		return fmt.Errorf("release %q: %w", name, err)
	}
	return nil
}

// Holders lists live holders by slot; an absent semaphore has none. Those
// of a keyed semaphore's instances follow, by key and slot; an instance
// reference lists the instance's.
func (s *Core) Holders(ctx context.Context, ref backends.SemRef) ([]backends.Holder, error) {
	name := ref.Name
	d := s.DB.Dialect()
	var hs []backends.Holder
	_, err := s.DB.Read(ctx, func(c Conn) error {
		var err error
		if ref.IsInstance() {
			hs, err = instanceHolders(ctx, c, d, qInstHolders, name, ref.Key)
			return err
		}
		rows, err := c.Query(ctx, d.Text(qSemHolders), name)
		if err != nil {
			return err
		}
		defer rows.Close()
		hs = nil
		for rows.Next() {
			var h backends.Holder
			var acq, exp int64
			if err := rows.Scan(&h.Slot, &h.Owner, &h.Host, &h.PID, &h.Fencing, &acq, &exp); err != nil {
				return err
			}
			h.AcquiredAt, h.ExpiresAt = FromMicros(acq), FromMicros(exp)
			hs = append(hs, h)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows.Close()
		ih, err := instanceHolders(ctx, c, d, qInstAllHolders, name)
		hs = append(hs, ih...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("holders %s: %w", ref, err)
	}
	return hs, nil
}
