package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/internal/sqlstore"
)

// Instances of keyed semaphores (mode lease only) are sqlstore's
// (instance.go there): an acquire or a wait is one transaction that locks
// the semaphore's row, sweeps, counts and writes. MySQL adds its one-round-
// trip extend, and release and leave wait share-lock the semaphore's row,
// as a semaphore's release does, so that a waiter that registers after a
// release's count of the waiters sees the freed slot. Waiters park in the
// server as a lease-mode semaphore's do (sem_park.go), on a channel of
// their instance.

const (
	// qInstShare share-locks the semaphore (release, leave wait); no row
	// when it is gone, which does not stop a release.
	qInstShare = "SELECT lim FROM `{p}semaphores` WHERE name = ? LOCK IN SHARE MODE"

	// qInstExtend renews a live lease of its owner in one autocommit
	// statement; the new expiry comes back in the OK packet. The index hint
	// keeps it on the owner's row: on a small table the optimizer reads the
	// instance's primary key range instead and locks every holder's row.
	// Arguments: lease, name, key, owner.
	qInstExtend = "UPDATE `{p}semaphore_instance_slots` FORCE INDEX (semaphore_instance_slots_owner) SET expires_at = LAST_INSERT_ID(" + nowSQL + " + ?)\n" +
		"WHERE name = ? AND ikey = ? AND owner = ? AND expires_at > " + nowSQL

	// qInstOwned finds (and locks) owner's holder row: its slot and whether
	// its lease is live.
	qInstOwned = "SELECT slot, expires_at > " + nowSQL + " FROM `{p}semaphore_instance_slots` FORCE INDEX (semaphore_instance_slots_owner) WHERE name = ? AND ikey = ? AND owner = ? FOR UPDATE"

	// qInstFree deletes a holder row by its primary key. Deleting by owner
	// would read the instance's primary key range (the optimizer's choice
	// on a small table) and wait for the rows other releases locked through
	// the owner index: two releases of one instance would deadlock.
	// Arguments: name, key, slot.
	qInstFree = "DELETE FROM `{p}semaphore_instance_slots` WHERE name = ? AND ikey = ? AND slot = ?"

	// qInstWaiting counts an instance's live waiters.
	qInstWaiting = "SELECT count(*) FROM `{p}semaphore_instance_waiters` WHERE name = ? AND ikey = ? AND expires_at > " + nowSQL

	// qInstLiveHolders counts an instance's live holders (the repair pass).
	qInstLiveHolders = "SELECT count(*) FROM `{p}semaphore_instance_slots` WHERE name = ? AND ikey = ? AND expires_at > " + nowSQL

	// qInstWaitingKeys lists the instances of a semaphore that have live
	// waiters (PutSemaphore wakes them).
	qInstWaitingKeys = "SELECT DISTINCT ikey FROM `{p}semaphore_instance_waiters` WHERE name = ? AND expires_at > " + nowSQL

	// qInstWaitRenew renews owner's live waiter record (keeping its place):
	// the renewal of a waiter this store registered, in autocommit.
	qInstWaitRenew = "UPDATE `{p}semaphore_instance_waiters` SET expires_at = " + nowSQL + " + ?\n" +
		"WHERE name = ? AND ikey = ? AND owner = ? AND expires_at > " + nowSQL

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

func instWhat(name, key string) string { return backends.SemRef{Name: name, Key: key}.String() }

// instAcquire takes a slot of the instance of name for key in one
// transaction (sqlstore.TakeInstanceSlot).
func (s *Store) instAcquire(ctx context.Context, name, key string, req backends.AcquireRequest) (backends.Grant, error) {
	lease, err := sqlstore.CheckInstanceAcquire(name, key, req)
	if err != nil {
		return backends.Grant{}, err
	}
	var g backends.Grant
	var refused error
	err = s.write(ctx, func(c conn) (err error) {
		g, refused, err = sqlstore.TakeInstanceSlot(ctx, c, s.dialect, name, key, req, lease)
		return err
	})
	if err == nil {
		err = refused
	}
	if err != nil {
		return backends.Grant{}, fmt.Errorf("acquire %s: %w", instWhat(name, key), err)
	}
	s.sess.forgetTicket(parkRef(backends.SemRef{Name: name, Key: key}), req.Owner)
	return g, nil
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
		if err := c.QueryRow(ctx, qInstShare, name).Scan(&lim); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		var slot int
		err := c.QueryRow(ctx, qInstOwned, name, key, owner).Scan(&slot, &wasLive)
		if errors.Is(err, sql.ErrNoRows) {
			return backends.ErrLost
		}
		if err != nil {
			return err
		}
		if _, err := c.Exec(ctx, qInstFree, name, key, slot); err != nil {
			return err
		}
		return c.QueryRow(ctx, qInstWaiting, name, key).Scan(&waiting)
	})
	if err == nil && waiting > 0 {
		s.wakeSemaphore(ctx, parkRef(backends.SemRef{Name: name, Key: key}), 1)
	}
	if err == nil && !wasLive {
		err = fmt.Errorf("lease had expired: %w", backends.ErrLost)
	}
	if err != nil {
		return fmt.Errorf("release %s: %w", instWhat(name, key), err)
	}
	return nil
}

// instEnterWait queues owner in the line of the instance of name for key
// (creating the instance) or renews its record (sqlstore.EnterInstanceLine):
// one autocommit statement when this store registered it.
func (s *Store) instEnterWait(ctx context.Context, name, key string, req backends.AcquireRequest, us int64) error {
	owner := req.Owner
	ref := parkRef(backends.SemRef{Name: name, Key: key})
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
	err := s.write(ctx, func(c conn) (err error) {
		seq, err = sqlstore.EnterInstanceLine(ctx, c, s.dialect, name, key, req, us, true)
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
	ref := backends.SemRef{Name: name, Key: key}
	s.sess.forgetTicket(parkRef(ref), owner)
	var left bool
	err := s.write(ctx, func(c conn) error {
		var lim int
		if err := c.QueryRow(ctx, qInstShare, name).Scan(&lim); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		var err error
		left, err = sqlstore.LeaveLine(ctx, c, s.dialect, ref, owner)
		return err
	})
	if err != nil {
		return fmt.Errorf("leave wait %s as %q: %w", instWhat(name, key), owner, err)
	}
	if left {
		s.wakeSemaphore(ctx, parkRef(ref), 1)
	}
	return nil
}

// instWait parks owner, a waiter of an instance, until it may be its turn,
// maxWait elapsed or ctx ended, as leaseWait does for a semaphore.
func (s *Store) instWait(ctx context.Context, name, key, owner string, maxWait time.Duration) error {
	return s.parkWait(ctx, parkRef(backends.SemRef{Name: name, Key: key}), owner, maxWait, qInstPark, func(left time.Duration) []any {
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
		rows, err := c.Query(ctx, qInstWaitingKeys, name)
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
		s.wakeSemaphore(ctx, parkRef(backends.SemRef{Name: name, Key: k}), min(n, maxWake))
	}
}

// repairInstance is RepairWakeups for an instance: it wakes its parked
// waiters, one per free slot.
func (s *Store) repairInstance(ctx context.Context, ref backends.SemRef, parked map[string]bool) (int, error) {
	name, key := ref.Name, ref.Key
	ch := s.channel("semaphore", parkRef(ref))
	if !parked[ch] {
		return 0, nil
	}
	var lim, held int
	err := s.on(nil).QueryRow(ctx, "SELECT lim FROM `{p}semaphores` WHERE name = ?", name).Scan(&lim)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if err := s.on(nil).QueryRow(ctx, qInstLiveHolders, name, key).Scan(&held); err != nil {
		return 0, err
	}
	if held >= lim {
		return 0, nil
	}
	return s.wakeParked(ctx, ch, lim-held)
}
