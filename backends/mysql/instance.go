package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/internal/slots"
)

// Instances of keyed semaphores (backends/instance.go), mode lease only. An
// instance is its rows in semaphore_instance_slots (one per holder, none
// free) and semaphore_instance_waiters, keyed by (name, ikey); the
// semaphore's row holds the config and the fencing counter. Every
// transaction that adds to an instance (acquire, enter wait) takes the
// semaphore's row lock first, reads the config under it, and then counts,
// sweeps and writes the instance's rows: so the instances of one semaphore
// change one at a time, an instance is created and removed with the call
// that does it, and a limit change (which takes the same lock) reaches them
// between two calls. Release and leave wait share-lock the row, as a
// semaphore's release does, so that a waiter that registers after a
// release's count of the waiters sees the freed slot. Waiters park in the
// server as a lease-mode semaphore's do (sem_park.go), on a channel of
// their instance.

const (
	// qInstLock reads and locks the semaphore an instance obeys, with
	// backend now: its limit, max_waiting and whether it is keyed.
	qInstLock = "SELECT lim, max_waiting, keyed, " + nowSQL + " FROM `{p}semaphores` WHERE name = ? FOR UPDATE"

	// qInstShare share-locks the semaphore (release, leave wait); no row
	// when it is gone, which does not stop a release.
	qInstShare = "SELECT lim FROM `{p}semaphores` WHERE name = ? LOCK IN SHARE MODE"

	// qInstSweepSlots and qInstSweepWaiters delete the rows of every
	// instance of a semaphore whose lease expired: a holder or waiter that
	// crashed. An expired holder's slot is free to take anyway: deleting its
	// row is the reclaim, and leaves nothing of an instance nobody uses.
	qInstSweepSlots   = "DELETE FROM `{p}semaphore_instance_slots` WHERE name = ? AND expires_at <= ?"
	qInstSweepWaiters = "DELETE FROM `{p}semaphore_instance_waiters` WHERE name = ? AND expires_at <= ?"

	// qInstSlots lists an instance's slot numbers (after a sweep, every row
	// is a live holder).
	qInstSlots = "SELECT slot FROM `{p}semaphore_instance_slots` WHERE name = ? AND ikey = ? ORDER BY slot"

	// qInstAhead counts the live waiters ahead of an owner in an instance's
	// line (every one when the owner has no live record) and tells whether
	// it has a record. Arguments: name, key, now, name, key, owner, now,
	// name, key, owner.
	qInstAhead = "SELECT (SELECT count(*) FROM `{p}semaphore_instance_waiters` w WHERE w.name = ? AND w.ikey = ? AND w.expires_at > ?\n" +
		"    AND w.seq < COALESCE((SELECT x.seq FROM `{p}semaphore_instance_waiters` x\n" +
		"      WHERE x.name = ? AND x.ikey = ? AND x.owner = ? AND x.expires_at > ?), " + noTicket + ")),\n" +
		"  EXISTS (SELECT 1 FROM `{p}semaphore_instance_waiters` WHERE name = ? AND ikey = ? AND owner = ?)"

	// qInstNextFencing bumps the semaphore's fencing counter, returning the
	// new number in the OK packet.
	qInstNextFencing = "UPDATE `{p}semaphores` SET fencing = LAST_INSERT_ID(" + nextFencing + ") WHERE name = ?"

	// qInstTake records a new holder.
	qInstTake = "INSERT INTO `{p}semaphore_instance_slots` (name, ikey, slot, owner, host, pid, fencing, acquired_at, expires_at)\n" +
		"VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"

	// qInstExtend renews a live lease of its owner in one autocommit
	// statement; the new expiry comes back in the OK packet. Arguments:
	// lease, name, key, owner.
	qInstExtend = "UPDATE `{p}semaphore_instance_slots` SET expires_at = LAST_INSERT_ID(" + nowSQL + " + ?)\n" +
		"WHERE name = ? AND ikey = ? AND owner = ? AND expires_at > " + nowSQL

	// qInstOwned finds (and locks) owner's holder row and whether its lease
	// is live.
	qInstOwned = "SELECT expires_at > " + nowSQL + " FROM `{p}semaphore_instance_slots` WHERE name = ? AND ikey = ? AND owner = ? FOR UPDATE"

	// qInstFree deletes owner's holder row.
	qInstFree = "DELETE FROM `{p}semaphore_instance_slots` WHERE name = ? AND ikey = ? AND owner = ?"

	// qInstWaiting counts an instance's live waiters.
	qInstWaiting = "SELECT count(*) FROM `{p}semaphore_instance_waiters` WHERE name = ? AND ikey = ? AND expires_at > " + nowSQL

	// qInstHolders lists an instance's live holders.
	qInstHolders = "SELECT ikey, slot, owner, host, pid, fencing, acquired_at, expires_at FROM `{p}semaphore_instance_slots`\n" +
		"WHERE name = ? AND ikey = ? AND expires_at > " + nowSQL + " ORDER BY slot"

	// qInstObserveHoldersHead and qInstObserveWaitersHead read the live
	// holders, and count the live waiters, of every instance of many
	// semaphores; the names follow, bound, in IN (...).
	qInstObserveHoldersHead = "SELECT name, ikey, slot, owner, host, pid, fencing, acquired_at, expires_at FROM `{p}semaphore_instance_slots`\n" +
		"WHERE expires_at > " + nowSQL + " AND name IN ("
	qInstObserveHoldersTail = ") ORDER BY name, ikey, slot"
	qInstObserveWaitersHead = "SELECT name, ikey, count(*) FROM `{p}semaphore_instance_waiters` WHERE expires_at > " + nowSQL + " AND name IN ("
	qInstObserveWaitersTail = ") GROUP BY name, ikey ORDER BY name, ikey"

	// qInstLiveCount counts the live holders of every instance of a
	// semaphore (DeleteSemaphore).
	qInstLiveCount = "SELECT count(*) FROM `{p}semaphore_instance_slots` WHERE name = ? AND expires_at > " + nowSQL

	// qInstLiveHolders counts an instance's live holders (the repair pass).
	qInstLiveHolders = "SELECT count(*) FROM `{p}semaphore_instance_slots` WHERE name = ? AND ikey = ? AND expires_at > " + nowSQL

	// qInstWaitingKeys lists the instances of a semaphore that have live
	// waiters (PutSemaphore wakes them).
	qInstWaitingKeys = "SELECT DISTINCT ikey FROM `{p}semaphore_instance_waiters` WHERE name = ? AND expires_at > " + nowSQL

	// qInstDeleteSlots and qInstDeleteWaiters remove every instance row of
	// a semaphore (DeleteSemaphore, once no instance has a live holder).
	qInstDeleteSlots   = "DELETE FROM `{p}semaphore_instance_slots` WHERE name = ?"
	qInstDeleteWaiters = "DELETE FROM `{p}semaphore_instance_waiters` WHERE name = ?"

	// qInstWaitRenew renews owner's live waiter record (keeping its place).
	qInstWaitRenew = "UPDATE `{p}semaphore_instance_waiters` SET expires_at = " + nowSQL + " + ?\n" +
		"WHERE name = ? AND ikey = ? AND owner = ? AND expires_at > " + nowSQL

	// qInstWaitSeq reads owner's ticket.
	qInstWaitSeq = "SELECT seq FROM `{p}semaphore_instance_waiters` WHERE name = ? AND ikey = ? AND owner = ?"

	// qInstWaitCount counts an instance's waiters and finds its highest
	// ticket (after the sweep, every row is live).
	qInstWaitCount = "SELECT count(*), coalesce(max(seq), 0) FROM `{p}semaphore_instance_waiters` WHERE name = ? AND ikey = ?"

	// qInstWaitInsert queues owner behind every live waiter of an instance.
	qInstWaitInsert = "INSERT INTO `{p}semaphore_instance_waiters` (name, ikey, owner, seq, expires_at, host, pid, since)\n" +
		"VALUES (?, ?, ?, ?, " + nowSQL + " + ?, ?, ?, " + nowSQL + ")"

	// qInstWaitLeave removes owner's waiter record.
	qInstWaitLeave = "DELETE FROM `{p}semaphore_instance_waiters` WHERE name = ? AND ikey = ? AND owner = ?"

	// qInstWaitFirst finds the oldest live waiter of an instance.
	qInstWaitFirst = "SELECT owner FROM `{p}semaphore_instance_waiters` WHERE name = ? AND ikey = ? AND expires_at > " + nowSQL + " ORDER BY seq LIMIT 1"

	// qInstPark is the parked statement of an instance's waiter after the
	// tag column, as qSemPark is a semaphore's: d, the seconds it sleeps;
	// may, true when it is the owner's turn (fewer live holders than the
	// limit, and fewer live waiters ahead than slots free), d then 0; then
	// SLEEP(d). No row: the semaphore is absent. Arguments: left (seconds),
	// key, key, owner, key, key, key, owner, name.
	qInstPark = "p.d, p.may, SLEEP(p.d) FROM (\n" +
		"  SELECT c.may, IF(c.may, 0, GREATEST(0.001, LEAST(c.lft, GREATEST(0, LEAST(c.hexp, c.wexp) - c.now) / 1000000))) AS d\n" +
		"  FROM (SELECT ? AS lft, " + nowSQL + " AS now,\n" +
		"      (SELECT count(*) FROM `{p}semaphore_instance_waiters` w WHERE w.name = s.name AND w.ikey = ? AND w.expires_at > " + nowSQL + "\n" +
		"          AND w.seq < COALESCE((SELECT x.seq FROM `{p}semaphore_instance_waiters` x\n" +
		"            WHERE x.name = s.name AND x.ikey = ? AND x.owner = ? AND x.expires_at > " + nowSQL + "), " + noTicket + "))\n" +
		"        < s.lim - (SELECT count(*) FROM `{p}semaphore_instance_slots` t WHERE t.name = s.name AND t.ikey = ? AND t.expires_at > " + nowSQL + ") AS may,\n" +
		"      COALESCE((SELECT MIN(t.expires_at) FROM `{p}semaphore_instance_slots` t\n" +
		"        WHERE t.name = s.name AND t.ikey = ? AND t.expires_at > " + nowSQL + "), " + farFuture + ") AS hexp,\n" +
		"      COALESCE((SELECT MIN(w.expires_at) FROM `{p}semaphore_instance_waiters` w\n" +
		"        WHERE w.name = s.name AND w.ikey = ? AND w.owner <> ? AND w.expires_at > " + nowSQL + "), " + farFuture + ") AS wexp\n" +
		"    FROM `{p}semaphores` s WHERE s.name = ?) c\n" +
		") p"
)

// instLock locks and reads the semaphore an instance obeys (ErrNotFound,
// ErrNotKeyed), with backend now.
func instLock(ctx context.Context, c conn, name string) (limit, maxWaiting int, now int64, err error) {
	var keyed bool
	err = c.row(ctx, qInstLock, name).Scan(&limit, &maxWaiting, &keyed, &now)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, 0, 0, backends.ErrNotFound
	case err != nil:
		return 0, 0, 0, err
	case !keyed:
		return 0, 0, 0, backends.ErrNotKeyed
	}
	return limit, maxWaiting, now, nil
}

// sweepInstances deletes the rows of every instance of name whose lease
// expired by now.
func sweepInstances(ctx context.Context, c conn, name string, now int64) error {
	if _, err := c.exec(ctx, qInstSweepSlots, name, now); err != nil {
		return err
	}
	_, err := c.exec(ctx, qInstSweepWaiters, name, now)
	return err
}

func instWhat(name, key string) string { return backends.DescribeRef(backends.Instance(name, key)) }

// instAcquire takes a slot of the instance of name for key, in one
// transaction holding the semaphore's row lock: it sweeps the semaphore's
// expired instance rows (the reclaim), then grants the lowest slot number
// the instance does not use unless its live holders reach the limit or the
// line says it is not req.Owner's turn. The grant bumps the semaphore's
// fencing counter and removes req.Owner's waiter record. A refusal still
// commits the sweep.
func (s *Store) instAcquire(ctx context.Context, name, key string, req backends.AcquireRequest) (backends.Grant, error) {
	var g backends.Grant
	if err := backends.CheckInstanceKey(key); err != nil {
		return g, fmt.Errorf("acquire %s: %w", instWhat(name, key), err)
	}
	if err := backends.CheckAcquire(req); err != nil {
		return g, fmt.Errorf("acquire %s: %w", instWhat(name, key), err)
	}
	if req.Owner == "" {
		return g, fmt.Errorf("acquire %s: empty owner", instWhat(name, key))
	}
	lease, err := leaseMicros(req.Lease)
	if err != nil {
		return g, fmt.Errorf("acquire %s: %w", instWhat(name, key), err)
	}
	var refused error
	err = s.write(ctx, func(c conn) error {
		refused, g = nil, backends.Grant{}
		limit, _, now, err := instLock(ctx, c, name)
		if err != nil {
			return err
		}
		if err := sweepInstances(ctx, c, name, now); err != nil {
			return err
		}
		used, err := instSlots(ctx, c, name, key)
		if err != nil {
			return err
		}
		var ahead int
		var waiting bool
		err = c.row(ctx, qInstAhead, name, key, now, name, key, req.Owner, now, name, key, req.Owner).Scan(&ahead, &waiting)
		if err != nil {
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
		res, err := c.exec(ctx, qInstNextFencing, name)
		if err != nil {
			return err
		}
		if g.Fencing, err = res.LastInsertId(); err != nil {
			return err
		}
		g.Slot, g.ExpiresAt = slots.LowestUnused(used), fromMicros(now+lease)
		if _, err := c.exec(ctx, qInstTake, name, key, g.Slot, req.Owner, req.Host, req.PID, g.Fencing, now, now+lease); err != nil {
			return err
		}
		if waiting {
			_, err = c.exec(ctx, qInstWaitLeave, name, key, req.Owner)
		}
		return err
	})
	if err == nil {
		err = refused
	}
	if err != nil {
		return backends.Grant{}, fmt.Errorf("acquire %s: %w", instWhat(name, key), err)
	}
	s.sess.forgetTicket(backends.Instance(name, key), req.Owner)
	return g, nil
}

// instSlots lists the slot numbers an instance uses, in order.
func instSlots(ctx context.Context, c conn, name, key string) ([]int, error) {
	rows, err := c.query(ctx, qInstSlots, name, key)
	if err != nil {
		return nil, err
	}
	return slots.Numbers(rows)
}

// instExtend renews owner's lease on an instance in one autocommit
// statement; ErrLost once it expired.
func (s *Store) instExtend(ctx context.Context, name, key, owner string, lease time.Duration) (time.Time, error) {
	us, err := leaseMicros(lease)
	if err != nil {
		return time.Time{}, fmt.Errorf("extend %s: %w", instWhat(name, key), err)
	}
	res, err := s.autocommit(ctx, qInstExtend, us, name, key, owner)
	var exp int64
	if err == nil {
		var n int64
		if n, err = res.RowsAffected(); err == nil && n == 0 {
			err = backends.ErrLost
		}
	}
	if err == nil {
		exp, err = res.LastInsertId()
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("extend %s: %w", instWhat(name, key), err)
	}
	return fromMicros(exp), nil
}

// instRelease deletes owner's holder row (the instance is gone with it
// when it was the last row) and wakes the first parked waiter of the
// instance when anybody waits. A lease that had expired and was not swept
// yet is deleted too, but the call returns ErrLost.
func (s *Store) instRelease(ctx context.Context, name, key, owner string) error {
	var wasLive bool
	var waiting int
	err := s.write(ctx, func(c conn) error {
		var lim int
		if err := c.row(ctx, qInstShare, name).Scan(&lim); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		err := c.row(ctx, qInstOwned, name, key, owner).Scan(&wasLive)
		if errors.Is(err, sql.ErrNoRows) {
			return backends.ErrLost
		}
		if err != nil {
			return err
		}
		if _, err := c.exec(ctx, qInstFree, name, key, owner); err != nil {
			return err
		}
		return c.row(ctx, qInstWaiting, name, key).Scan(&waiting)
	})
	if err == nil && waiting > 0 {
		s.wakeSemaphore(ctx, backends.Instance(name, key), 1)
	}
	if err == nil && !wasLive {
		err = fmt.Errorf("lease had expired: %w", backends.ErrLost)
	}
	if err != nil {
		return fmt.Errorf("release %s: %w", instWhat(name, key), err)
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
		rows, err := c.query(ctx, qInstHolders, name, key)
		if err != nil {
			return err
		}
		hs, err = scanInstHolders(rows)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("holders %s: %w", instWhat(name, key), err)
	}
	return hs, nil
}

// observeInstances adds the live instances of the semaphores named to
// their states in out: every instance's holders to Holders, its waiters to
// Waiters, and the instance to Instances. A keyed semaphore's Slots is then
// what it should be: it has no slot row to drift.
func observeInstances(ctx context.Context, c conn, names []string, out map[string]*backends.SemaphoreState) error {
	args := anys(names)
	in := placeholders(len(names))
	type ik struct{ name, key string }
	inst := map[ik]*backends.InstanceState{}
	var order []ik
	get := func(name, key string) *backends.InstanceState {
		k := ik{name, key}
		if inst[k] == nil {
			inst[k] = &backends.InstanceState{Key: key}
			order = append(order, k)
		}
		return inst[k]
	}
	rows, err := c.query(ctx, qInstObserveHoldersHead+in+qInstObserveHoldersTail, args...)
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
		is := get(name, h.Key)
		is.Holders = append(is.Holders, h)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	rows, err = c.query(ctx, qInstObserveWaitersHead+in+qInstObserveWaitersTail, args...)
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
		get(name, key).Waiters = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, k := range order {
		if st := out[k.name]; st != nil {
			is := inst[k]
			st.Holders = append(st.Holders, is.Holders...)
			st.Waiters += is.Waiters
			st.Instances = append(st.Instances, *is)
		}
	}
	for _, n := range names {
		if st := out[n]; st != nil && st.Config.Keyed {
			backends.SortInstances(st.Instances)
			st.Slots = st.WantSlots()
		}
	}
	return nil
}

// instEnterWait queues owner in the line of the instance of name for key
// (creating the instance) or renews its record; ErrTooManyWaiters when the
// instance's live waiters reach the semaphore's max_waiting.
func (s *Store) instEnterWait(ctx context.Context, name, key string, req backends.AcquireRequest) error {
	owner, lease := req.Owner, req.Lease
	if err := backends.CheckInstanceKey(key); err != nil {
		return fmt.Errorf("enter wait %s: %w", instWhat(name, key), err)
	}
	if owner == "" {
		return fmt.Errorf("enter wait %s: empty owner", instWhat(name, key))
	}
	us, err := leaseMicros(lease)
	if err != nil {
		return fmt.Errorf("enter wait %s: %w", instWhat(name, key), err)
	}
	ref := backends.Instance(name, key)
	if s.sess.ticket(ref, owner) != unregisteredTicket {
		// A renewal changes neither the count nor the order: no lock.
		n, err := affected(s.autocommit(ctx, qInstWaitRenew, us, name, key, owner))
		if err != nil {
			return fmt.Errorf("enter wait %s as %q: %w", instWhat(name, key), owner, err)
		}
		if n > 0 {
			return nil
		}
		s.sess.forgetTicket(ref, owner) // expired: it queues again, at the tail
	}
	var seq int64
	err = s.write(ctx, func(c conn) error {
		_, maxWaiting, now, err := instLock(ctx, c, name)
		if err != nil {
			return err
		}
		if err := sweepInstances(ctx, c, name, now); err != nil {
			return err
		}
		n, err := affected(c.exec(ctx, qInstWaitRenew, us, name, key, owner))
		if err != nil {
			return err
		}
		if n > 0 {
			return c.row(ctx, qInstWaitSeq, name, key, owner).Scan(&seq)
		}
		var waiting int
		var last int64
		if err := c.row(ctx, qInstWaitCount, name, key).Scan(&waiting, &last); err != nil {
			return err
		}
		if maxWaiting >= 0 && waiting >= maxWaiting {
			return fmt.Errorf("%d of %d waiting: %w", waiting, maxWaiting, backends.ErrTooManyWaiters)
		}
		seq = last + 1
		_, err = c.exec(ctx, qInstWaitInsert, name, key, owner, seq, us, req.Host, req.PID)
		return err
	})
	if err != nil {
		return fmt.Errorf("enter wait %s as %q: %w", instWhat(name, key), owner, err)
	}
	s.sess.rememberTicket(ref, owner, seq)
	return nil
}

// instLeaveWait removes owner's waiter record (the instance is gone with it
// when it was the last row) and wakes the first parked waiter, whose turn
// it may have made. Absent is not an error.
func (s *Store) instLeaveWait(ctx context.Context, name, key, owner string) error {
	ref := backends.Instance(name, key)
	s.sess.forgetTicket(ref, owner)
	var n int64
	err := s.write(ctx, func(c conn) error {
		var lim int
		if err := c.row(ctx, qInstShare, name).Scan(&lim); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		var err error
		n, err = affected(c.exec(ctx, qInstWaitLeave, name, key, owner))
		return err
	})
	if err != nil {
		return fmt.Errorf("leave wait %s as %q: %w", instWhat(name, key), owner, err)
	}
	if n > 0 {
		s.wakeSemaphore(ctx, ref, 1)
	}
	return nil
}

// instFirstWaiter returns the head of an instance's line, "" when nobody
// waits.
func (s *Store) instFirstWaiter(ctx context.Context, name, key string) (string, error) {
	var owner string
	_, err := s.read(ctx, func(c conn) error {
		owner = ""
		err := c.row(ctx, qInstWaitFirst, name, key).Scan(&owner)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		return err
	})
	if err != nil {
		return "", fmt.Errorf("first waiter %s: %w", instWhat(name, key), err)
	}
	return owner, nil
}

// instWait parks owner, a waiter of an instance, until it may be its turn,
// maxWait elapsed or ctx ended, as leaseWait does for a semaphore.
func (s *Store) instWait(ctx context.Context, name, key, owner string, maxWait time.Duration) error {
	return s.parkWait(ctx, backends.Instance(name, key), owner, maxWait, qInstPark, func(left time.Duration) []any {
		return []any{sleepSeconds(left), key, key, owner, key, key, key, owner, name}
	})
}

// wakeInstances wakes, for each instance of name with live waiters, up to n
// parked waiters (a higher limit may make it their turn).
func (s *Store) wakeInstances(ctx context.Context, name string, n int) {
	if n < 1 {
		return
	}
	var keys []string
	_, err := s.read(ctx, func(c conn) error {
		keys = keys[:0]
		rows, err := c.query(ctx, qInstWaitingKeys, name)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				return err
			}
			keys = append(keys, k)
		}
		return rows.Err()
	})
	if err != nil {
		return // the waiters look again at their next event
	}
	for _, k := range keys {
		s.wakeSemaphore(ctx, backends.Instance(name, k), min(n, maxWake))
	}
}

// repairInstance is RepairWakeups for an instance: it wakes its parked
// waiters, one per free slot.
func (s *Store) repairInstance(ctx context.Context, ref string, parked map[string]bool) (int, error) {
	name, key, _ := backends.SplitInstance(ref)
	ch := s.channel("semaphore", ref)
	if !parked[ch] {
		return 0, nil
	}
	var lim, held int
	err := s.on(nil).row(ctx, "SELECT lim FROM `{p}semaphores` WHERE name = ?", name).Scan(&lim)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if err := s.on(nil).row(ctx, qInstLiveHolders, name, key).Scan(&held); err != nil {
		return 0, err
	}
	if held >= lim {
		return 0, nil
	}
	return s.wakeParked(ctx, ch, lim-held)
}
