package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/internal/slots"
)

// liveSQL is true for a slot row whose holder's lease has not expired.
const liveSQL = `(owner IS NOT NULL AND expires_at > ` + nowSQL + `)`

// freeSQL is true for a slot row anyone may take: never held, released or
// expired.
const freeSQL = `(owner IS NULL OR expires_at <= ` + nowSQL + `)`

const (
	// qSemUpsert creates the semaphore or updates its config. It never
	// touches the fencing counter, so fencing keeps increasing across
	// updates.
	//
	// A new semaphore's fencing counter starts at backend now in
	// microseconds (the rule every backend follows), so a semaphore deleted
	// and created again, or replaced from another backend, still hands out
	// numbers above any a holder of the old one can have.
	qSemUpsert = `INSERT INTO semaphores (name, lim, lease_ns, mode, wake, max_waiting, max_hold_ns, keyed, fencing)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ` + nowSQL + `)
ON CONFLICT (name) DO UPDATE SET lim = excluded.lim, lease_ns = excluded.lease_ns, mode = excluded.mode,
  wake = excluded.wake, max_waiting = excluded.max_waiting, max_hold_ns = excluded.max_hold_ns, keyed = excluded.keyed`

	// qSemLimit reads the number of slot rows the semaphore keeps: its
	// limit, 0 when keyed (its instances hold their own rows; slot rows
	// left from before it was keyed retire on release).
	qSemLimit = `SELECT CASE WHEN keyed THEN 0 ELSE lim END FROM semaphores WHERE name = ?`

	// qSemSlotsLive lists a semaphore's slots, each with whether it is live.
	qSemSlotsLive = `SELECT slot, ` + liveSQL + ` FROM semaphore_slots WHERE name = ? ORDER BY slot`

	// qSemDeleteFreeSlots deletes the listed slots (a JSON array) that are
	// free or expired; a live slot is never deleted, whatever the list says.
	qSemDeleteFreeSlots = `DELETE FROM semaphore_slots
WHERE name = ? AND slot IN (SELECT value FROM json_each(?)) AND ` + freeSQL

	// qSemDeleteAllFree deletes every free or expired slot of a semaphore.
	qSemDeleteAllFree = `DELETE FROM semaphore_slots WHERE name = ? AND ` + freeSQL

	// qSemInsertSlots adds free slots with the listed numbers (a JSON array).
	qSemInsertSlots = `INSERT INTO semaphore_slots (name, slot) SELECT ?, value FROM json_each(?)`

	// qSemAcquireState reads, against one instant, everything TryAcquire
	// decides on: the limit, the number of live holders, the lowest free or
	// expired slot, how many live waiters are ahead of the owner in line
	// (lineAheadSQL), whether the owner has a waiter record and whether the
	// semaphore is keyed. No row: the semaphore is absent. Arguments: owner,
	// owner, name.
	qSemAcquireState = `SELECT s.lim,
  (SELECT count(*) FROM semaphore_slots WHERE name = s.name AND ` + liveSQL + `),
  (SELECT min(slot) FROM semaphore_slots WHERE name = s.name AND ` + freeSQL + `),
  ` + lineAheadSQL + `,
  EXISTS (SELECT 1 FROM semaphore_waiters WHERE name = s.name AND owner = ?),
  s.keyed
FROM semaphores s WHERE s.name = ?`

	// lineAheadSQL counts the live waiters ahead of an owner (the argument)
	// in the line of semaphore s: those with a lower ticket, or every live
	// waiter when the owner has no live record (a newcomer joins at the
	// tail). The line's rule (see TryAcquire) compares it with the free slots.
	lineAheadSQL = `(SELECT count(*) FROM semaphore_waiters w WHERE w.name = s.name AND w.expires_at > ` + nowSQL + `
    AND w.seq < coalesce((SELECT x.seq FROM semaphore_waiters x
      WHERE x.name = s.name AND x.owner = ? AND x.expires_at > ` + nowSQL + `), 9223372036854775807))`

	// qSemNextFencing bumps the semaphore's fencing counter and returns it;
	// under the write lock every grant gets a strictly higher number.
	qSemNextFencing = `UPDATE semaphores SET fencing = fencing + 1 WHERE name = ? RETURNING fencing`

	// qSemTakeSlot gives a slot to a new holder, leased from backend now.
	qSemTakeSlot = `UPDATE semaphore_slots
SET owner = ?, host = ?, pid = ?, fencing = ?, acquired_at = ` + nowSQL + `, expires_at = ` + nowSQL + ` + ?
WHERE name = ? AND slot = ? RETURNING expires_at`

	// qSemExtend renews a lease, only for its owner and only while it has
	// not expired.
	qSemExtend = `UPDATE semaphore_slots SET expires_at = ` + nowSQL + ` + ?
WHERE name = ? AND owner = ? AND expires_at > ` + nowSQL + ` RETURNING expires_at`

	// qSemOwned finds owner's slot and whether its lease is still live.
	qSemOwned = `SELECT slot, expires_at > ` + nowSQL + ` FROM semaphore_slots WHERE name = ? AND owner = ?`

	// qSemFree frees owner's slot.
	qSemFree = `UPDATE semaphore_slots SET owner = NULL, host = '', pid = 0, acquired_at = 0, expires_at = 0
WHERE name = ? AND owner = ?`

	// qSemHolders lists live holders by slot.
	qSemHolders = `SELECT slot, owner, host, pid, fencing, acquired_at, expires_at
FROM semaphore_slots WHERE name = ? AND ` + liveSQL + ` ORDER BY slot`

	// qSemLiveCount counts live holders.
	qSemLiveCount = `SELECT count(*) FROM semaphore_slots WHERE name = ? AND ` + liveSQL

	// qSemDrain sets the limit to 0 so that nobody more is admitted.
	qSemDrain = `UPDATE semaphores SET lim = 0 WHERE name = ?`

	// qSemDeleteWaiters, qSemDeleteSlots and qSemDelete remove a semaphore
	// (explicitly, not relying on ON DELETE CASCADE).
	qSemDeleteWaiters = `DELETE FROM semaphore_waiters WHERE name = ?`
	qSemDeleteSlots   = `DELETE FROM semaphore_slots WHERE name = ?`
	qSemDelete        = `DELETE FROM semaphores WHERE name = ?`

	// qSemObserveConfigs reads the configs of many semaphores (a JSON array
	// of names).
	qSemObserveConfigs = `SELECT name, lim, lease_ns, mode, wake, max_waiting, max_hold_ns, keyed
FROM semaphores WHERE name IN (SELECT value FROM json_each(?))`

	// qSemObserveWaiters counts the live waiters of many semaphores.
	qSemObserveWaiters = `SELECT name, count(*) FROM semaphore_waiters
WHERE name IN (SELECT value FROM json_each(?)) AND expires_at > ` + nowSQL + ` GROUP BY name`

	// qSemObserveSlots reads every slot of many semaphores, each with whether
	// it is live, against one instant.
	qSemObserveSlots = `SELECT name, slot, owner, host, pid, fencing, acquired_at, expires_at, ` + liveSQL + `
FROM semaphore_slots WHERE name IN (SELECT value FROM json_each(?)) ORDER BY name, slot`
)

// PutSemaphore creates or updates the semaphore and repairs its slots to
// max(limit, live holders).
func (s *Store) PutSemaphore(ctx context.Context, cfg backends.SemaphoreConfig) error {
	if cfg.Name == "" {
		return errors.New("put semaphore: empty name")
	}
	if cfg.Limit < 0 {
		return fmt.Errorf("put semaphore %q: negative limit %d", cfg.Name, cfg.Limit)
	}
	maxWaiting := cfg.MaxWaiting
	if maxWaiting < 0 {
		maxWaiting = -1
	}
	err := s.write(ctx, func(c conn) error {
		if _, err := c.Exec(ctx, qSemUpsert, cfg.Name, cfg.Limit, int64(cfg.Lease), cfg.Mode, cfg.Wake, maxWaiting, int64(cfg.MaxHold), cfg.Keyed); err != nil {
			return err
		}
		// A keyed semaphore keeps slot rows only for holders left from
		// before it was keyed: they retire on release.
		rowLimit := cfg.Limit
		if cfg.Keyed {
			rowLimit = 0
		}
		return repairSlots(ctx, c, cfg.Name, rowLimit, true)
	})
	if err != nil {
		return fmt.Errorf("put semaphore %q: %w", cfg.Name, err)
	}
	return nil
}

// repairSlots makes the slot count max(limit, live holders): it deletes free
// or expired slots, highest first, while above, and (when grow) inserts the
// lowest unused numbers while below. Run it under the write lock.
func repairSlots(ctx context.Context, c conn, name string, limit int, grow bool) error {
	rows, err := c.Query(ctx, qSemSlotsLive, name)
	if err != nil {
		return err
	}
	var have []slots.Slot
	for rows.Next() {
		var s slots.Slot
		if err := rows.Scan(&s.N, &s.Live); err != nil {
			rows.Close()
			return err
		}
		have = append(have, s)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	drop, add := slots.Repair(have, limit, grow)
	switch {
	case len(drop) > 0:
		b, _ := json.Marshal(drop)
		_, err = c.Exec(ctx, qSemDeleteFreeSlots, name, string(b))
	case len(add) > 0:
		b, _ := json.Marshal(add)
		_, err = c.Exec(ctx, qSemInsertSlots, name, string(b))
	}
	return err
}

// DeleteSemaphore removes the semaphore when nobody holds it. Otherwise it
// drains it: limit 0, free slots gone, ErrHeld; held slots retire on release.
// The live holders of a keyed semaphore's instances count as its holders;
// they keep their rows until they release, and the instances admit nobody
// meanwhile (the limit they read is 0).
func (s *Store) DeleteSemaphore(ctx context.Context, name string) error {
	held := 0
	err := s.write(ctx, func(c conn) error {
		var inst int
		if err := c.QueryRow(ctx, qSemLiveCount, name).Scan(&held); err != nil {
			return err
		}
		if err := c.QueryRow(ctx, qInstLiveCount, name).Scan(&inst); err != nil {
			return err
		}
		held += inst
		if held > 0 {
			if _, err := c.Exec(ctx, qSemDrain, name); err != nil {
				return err
			}
			_, err := c.Exec(ctx, qSemDeleteAllFree, name)
			return err
		}
		for _, q := range []string{qInstDeleteWaiters, qInstDeleteSlots, qSemDeleteWaiters, qSemDeleteSlots, qSemDelete} {
			if _, err := c.Exec(ctx, q, name); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("delete semaphore %q: %w", name, err)
	}
	if held > 0 {
		return fmt.Errorf("delete semaphore %q: %d live holders: %w", name, held, backends.ErrHeld)
	}
	return nil
}

// TryAcquire takes the lowest free or expired slot, unless the live holders
// already reach the limit (the guard that keeps a lowered limit safe) or
// the line says it is not req.Owner's turn: a slot goes to an owner only
// while fewer live waiters are ahead of it in line than slots are free, so
// a newcomer (and a --no-wait caller), who has every live waiter ahead of
// it, never takes a slot a waiter is entitled to. The grant deletes the
// owner's waiter record in the same transaction: the line moves on at once.
func (s *Store) TryAcquire(ctx context.Context, name string, req backends.AcquireRequest) (backends.Grant, error) {
	if parent, key, ok := backends.SplitInstance(name); ok {
		return s.instAcquire(ctx, parent, key, req)
	}
	var g backends.Grant
	if err := backends.CheckAcquire(req); err != nil {
		return g, fmt.Errorf("acquire %q: %w", name, err)
	}
	if req.Owner == "" {
		return g, fmt.Errorf("acquire %q: empty owner", name)
	}
	lease, err := leaseMicros(req.Lease)
	if err != nil {
		return g, fmt.Errorf("acquire %q: %w", name, err)
	}
	err = s.write(ctx, func(c conn) error {
		var limit, live, ahead int
		var slot sql.NullInt64
		var waiting, keyed bool
		err := c.QueryRow(ctx, qSemAcquireState, req.Owner, req.Owner, name).Scan(&limit, &live, &slot, &ahead, &waiting, &keyed)
		if errors.Is(err, sql.ErrNoRows) {
			return backends.ErrNotFound
		}
		if err != nil {
			return err
		}
		if keyed {
			return backends.ErrKeyRequired
		}
		if live >= limit {
			return fmt.Errorf("%d of %d held: %w", live, limit, backends.ErrNoSlot)
		}
		if ahead >= limit-live {
			return fmt.Errorf("%d of %d held, %d waiters ahead in line: %w", live, limit, ahead, backends.ErrNoSlot)
		}
		if !slot.Valid {
			// Fewer slot rows than the limit: drift until PutSemaphore repairs it.
			return fmt.Errorf("%d of %d held, no free slot row: %w", live, limit, backends.ErrNoSlot)
		}
		if err := c.QueryRow(ctx, qSemNextFencing, name).Scan(&g.Fencing); err != nil {
			return err
		}
		var exp int64
		if err := c.QueryRow(ctx, qSemTakeSlot, req.Owner, req.Host, req.PID, g.Fencing, lease, name, slot.Int64).Scan(&exp); err != nil {
			return err
		}
		g.Slot, g.ExpiresAt = int(slot.Int64), fromMicros(exp)
		if waiting {
			_, err = c.Exec(ctx, qWaitLeave, name, req.Owner)
		}
		return err
	})
	if err != nil {
		return backends.Grant{}, fmt.Errorf("acquire %q: %w", name, err)
	}
	return g, nil
}

// Extend renews owner's lease to now+lease; ErrLost once it has expired.
func (s *Store) Extend(ctx context.Context, name, owner string, lease time.Duration) (time.Time, error) {
	if parent, key, ok := backends.SplitInstance(name); ok {
		return s.instExtend(ctx, parent, key, owner, lease)
	}
	us, err := leaseMicros(lease)
	if err != nil {
		return time.Time{}, fmt.Errorf("extend %q: %w", name, err)
	}
	var exp int64
	err = s.write(ctx, func(c conn) error {
		err := c.QueryRow(ctx, qSemExtend, us, name, owner).Scan(&exp)
		if errors.Is(err, sql.ErrNoRows) {
			return backends.ErrLost
		}
		return err
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("extend %q: %w", name, err)
	}
	return fromMicros(exp), nil
}

// Release frees owner's slot, or retires it when the semaphore has more
// slots than max(limit, live holders). A slot whose lease had expired is
// still cleared, but the call returns ErrLost: the caller's hold was not
// exclusive to the end.
func (s *Store) Release(ctx context.Context, name, owner string) error {
	if parent, key, ok := backends.SplitInstance(name); ok {
		return s.instRelease(ctx, parent, key, owner)
	}
	wasLive := false
	err := s.write(ctx, func(c conn) error {
		var slot int
		err := c.QueryRow(ctx, qSemOwned, name, owner).Scan(&slot, &wasLive)
		if errors.Is(err, sql.ErrNoRows) {
			return backends.ErrLost
		}
		if err != nil {
			return err
		}
		if _, err := c.Exec(ctx, qSemFree, name, owner); err != nil {
			return err
		}
		var limit int
		if err := c.QueryRow(ctx, qSemLimit, name).Scan(&limit); err != nil {
			return err
		}
		return repairSlots(ctx, c, name, limit, false)
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
func (s *Store) Holders(ctx context.Context, name string) ([]backends.Holder, error) {
	if parent, key, ok := backends.SplitInstance(name); ok {
		return s.instHolders(ctx, parent, key)
	}
	var hs []backends.Holder
	_, err := s.read(ctx, func(c conn) error {
		rows, err := c.Query(ctx, qSemHolders, name)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var h backends.Holder
			var acq, exp int64
			if err := rows.Scan(&h.Slot, &h.Owner, &h.Host, &h.PID, &h.Fencing, &acq, &exp); err != nil {
				return err
			}
			h.AcquiredAt, h.ExpiresAt = fromMicros(acq), fromMicros(exp)
			hs = append(hs, h)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows.Close()
		inst, err := allInstHolders(ctx, c, name)
		hs = append(hs, inst...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("holders %q: %w", name, err)
	}
	return hs, nil
}

// ObserveSemaphores reads many semaphores in one snapshot: one statement
// each for the configs, the slots, the waiters and, for keyed semaphores,
// their instances' holders and waiters.
func (s *Store) ObserveSemaphores(ctx context.Context, names []string) (map[string]*backends.SemaphoreState, error) {
	out := make(map[string]*backends.SemaphoreState, len(names))
	if len(names) == 0 {
		return out, nil
	}
	arg, err := namesJSON(names)
	if err != nil {
		return nil, fmt.Errorf("observe semaphores: %w", err)
	}
	_, err = s.read(ctx, func(c conn) error {
		rows, err := c.Query(ctx, qSemObserveConfigs, arg)
		if err != nil {
			return err
		}
		for rows.Next() {
			var cfg backends.SemaphoreConfig
			var lease, maxHold int64
			if err := rows.Scan(&cfg.Name, &cfg.Limit, &lease, &cfg.Mode, &cfg.Wake, &cfg.MaxWaiting, &maxHold, &cfg.Keyed); err != nil {
				rows.Close()
				return err
			}
			cfg.Lease, cfg.MaxHold = time.Duration(lease), time.Duration(maxHold)
			out[cfg.Name] = &backends.SemaphoreState{Config: cfg}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		rows, err = c.Query(ctx, qSemObserveSlots, arg)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var name string
			var h backends.Holder
			var owner sql.NullString
			var acq, exp int64
			var live bool
			if err := rows.Scan(&name, &h.Slot, &owner, &h.Host, &h.PID, &h.Fencing, &acq, &exp, &live); err != nil {
				return err
			}
			st := out[name]
			if st == nil {
				continue // slot rows of a semaphore row that is gone
			}
			st.Slots++
			switch {
			case live:
				h.Owner, h.AcquiredAt, h.ExpiresAt = owner.String, fromMicros(acq), fromMicros(exp)
				st.Holders = append(st.Holders, h)
			case owner.Valid:
				st.Expired++
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		wrows, err := c.Query(ctx, qSemObserveWaiters, arg)
		if err != nil {
			return err
		}
		defer wrows.Close()
		for wrows.Next() {
			var name string
			var n int
			if err := wrows.Scan(&name, &n); err != nil {
				return err
			}
			if st := out[name]; st != nil {
				st.Waiters = n
			}
		}
		if err := wrows.Err(); err != nil {
			return err
		}
		return observeInstances(ctx, c, arg, out)
	})
	if err != nil {
		return nil, fmt.Errorf("observe semaphores: %w", err)
	}
	return out, nil
}
