package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/internal/sqlstore"
	"github.com/coordd/coordd/spec"
)

// Semaphores of mode lease are the shared SQL store's (sqlstore, the
// Standard flavor's statements in MySQL's syntax), but for three calls
// that MySQL makes in one round trip each: the acquire and the common
// release as scripts (several statements in one request on a dedicated
// connection), and the extend as one autocommit UPDATE that returns the
// new expiry in its OK packet. Mode session (session*.go) and the parked
// waiters' wake-ups (sem_park.go) are MySQL's own.

// liveSQL is true for a slot row whose holder's lease has not expired.
const liveSQL = `(state = 'LOCK' AND expires_at > ` + nowSQL + `)`

// freeSQL is true for a slot row anyone may take: never held, released or
// expired. It is the exact complement of liveSQL.
const freeSQL = `(state = 'FREE' OR expires_at <= ` + nowSQL + `)`

const (
	// liveT and freeT are liveSQL and freeSQL for the slot row aliased t in
	// qSemAcquire's SELECT, which joins semaphores (s) and slots (t).
	liveT = `(t.state = 'LOCK' AND t.expires_at > ` + nowSQL + `)`
	freeT = `(t.state = 'FREE' OR t.expires_at <= ` + nowSQL + `)`

	// qSemAcquire is an acquire: a script sent in one round trip on a
	// dedicated connection (see runScript), one transaction and one commit.
	// Its SELECT locks the semaphore row and then every slot row of the
	// semaphore (a locking read of both tables, in that order, as every
	// writer of the semaphore's slots takes them) and keeps, against one
	// instant, the limit, the fencing counter, the mode, backend now, the live
	// holders and the lowest free or expired slot (NULL: none) in session
	// variables. The UPDATE gives that slot to the new holder only if the
	// mode is lease and the live holders are below the limit (the guard that
	// keeps a lowered limit safe), re-checking that the slot is free against
	// its own instant, so a live slot is never overwritten; it leases the
	// slot from the SELECT's instant, so the grant's expiry is known without
	// reading it back.
	//
	// The line: the second SELECT counts the live waiters ahead of the owner
	// (those with a lower ticket, every one when the owner is not in line),
	// and the UPDATE takes the slot only while they are fewer than the free
	// slots (limit minus live holders), so a newcomer never takes a slot a
	// waiter is entitled to. It reads after the semaphore row is locked:
	// EnterWait takes that lock too, so the count is that of the latest line.
	// The grant deletes the owner's waiter record, so the line moves on in
	// the same commit. The fencing counter is bumped in the same
	// transaction, only if the slot was taken. The last row returns the
	// variables; the caller tells absent, session mode, full, the line and
	// drift apart from them; a keyed semaphore (whose instances hold the
	// slots) is never granted. Arguments: name, name, name, owner, owner,
	// host, pid, lease, name, name, name, owner.
	qSemAcquire = "SET @coordd_lim = NULL, @coordd_fencing = NULL, @coordd_mode = NULL, @coordd_now = NULL,\n" +
		"  @coordd_live = NULL, @coordd_slot = NULL, @coordd_n = 0, @coordd_ahead = 0, @coordd_keyed = 0;\n" +
		"START TRANSACTION;\n" +
		"SELECT s.lim, s.fencing, s.mode, " + nowSQL + ",\n" +
		"  count(CASE WHEN " + liveT + " THEN 1 END), min(CASE WHEN " + freeT + " THEN t.slot END), s.keyed\n" +
		"  INTO @coordd_lim, @coordd_fencing, @coordd_mode, @coordd_now, @coordd_live, @coordd_slot, @coordd_keyed\n" +
		"  FROM `{p}semaphores` s LEFT JOIN `{p}semaphore_slots` t ON t.name = s.name\n" +
		"  WHERE s.name = ? GROUP BY s.name FOR UPDATE;\n" +
		"SELECT count(*) INTO @coordd_ahead FROM `{p}semaphore_waiters` w\n" +
		"  WHERE w.name = ? AND w.expires_at > @coordd_now AND w.seq < COALESCE((SELECT x.seq FROM `{p}semaphore_waiters` x\n" +
		"    WHERE x.name = ? AND x.owner = ? AND x.expires_at > @coordd_now), " + noTicket + ");\n" +
		"UPDATE `{p}semaphore_slots` SET state = 'LOCK', owner = ?, host = ?, pid = ?, fencing = GREATEST(@coordd_fencing + 1, @coordd_now),\n" +
		"    acquired_at = @coordd_now, expires_at = @coordd_now + ?\n" +
		"  WHERE name = ? AND slot = @coordd_slot AND @coordd_mode <> 'session' AND @coordd_keyed = 0 AND @coordd_live < @coordd_lim\n" +
		"    AND @coordd_ahead < @coordd_lim - @coordd_live AND " + freeSQL + ";\n" +
		"SET @coordd_n = ROW_COUNT();\n" +
		"UPDATE `{p}semaphores` SET fencing = GREATEST(fencing + 1, @coordd_now) WHERE name = ? AND @coordd_n > 0;\n" +
		"DELETE FROM `{p}semaphore_waiters` WHERE name = ? AND owner = ? AND @coordd_n > 0;\n" +
		"COMMIT;\n" +
		"SELECT @coordd_lim, @coordd_fencing, @coordd_mode, @coordd_now, @coordd_live, @coordd_slot, @coordd_n, @coordd_ahead, @coordd_keyed"

	// noTicket stands for "not in line" where a waiter's ticket is compared:
	// above every ticket, so every live waiter is ahead.
	noTicket = "9223372036854775807"

	// qSemExtend renews a lease, only for its owner and only while it has
	// not expired, in one autocommit statement. The new expiry comes back in
	// the OK packet (LAST_INSERT_ID(expr) sets it), so nothing is read back.
	// It does not lock the semaphore row: a deadlock with a concurrent
	// acquire (possible on the owner index) rolls it back and autocommit
	// sends it again. Arguments: lease, name, owner.
	qSemExtend = "UPDATE `{p}semaphore_slots` SET expires_at = LAST_INSERT_ID(" + nowSQL + " + ?)\n" +
		"WHERE name = ? AND owner = ? AND " + liveSQL

	// qSemReleaseFast frees owner's live slot when nothing is left to
	// retire, in one script (one round trip, one commit): it share-locks the
	// semaphore row first (so that it queues behind an acquire, a
	// PutSemaphore or a retirement instead of deadlocking with them, and so
	// that neither the limit nor the slots at or above it can grow until it
	// commits), then checks that the semaphore is not in mode session and has
	// no slot numbered at or above its limit (a semaphore with more slots
	// than its limit always has one, since slot numbers are distinct), and
	// only then frees the slot. It also counts the live waiters, so that
	// the releaser wakes a parked one only when somebody waits (no extra
	// round trip otherwise): a waiter registers (EnterWait, under the
	// semaphore row lock, which this share lock excludes) before it parks,
	// so one that is not counted here registers after this commit and its
	// next try sees the free slot. The last row says whether it freed the
	// slot and how many wait; when it did not free it (not the owner, lease
	// expired, slots to retire, session mode, no semaphore row)
	// leaseRelease takes the transactional path. A keyed semaphore's own
	// slots (left from before it was keyed) all retire: its limit counts
	// as 0 here. Arguments: name, name, name, owner, name.
	qSemReleaseFast = "SET @coordd_lim = NULL, @coordd_mode = NULL, @coordd_hi = 1, @coordd_n = 0, @coordd_w = 0;\n" +
		"START TRANSACTION;\n" +
		"SELECT IF(keyed, 0, lim), mode INTO @coordd_lim, @coordd_mode FROM `{p}semaphores` WHERE name = ? LOCK IN SHARE MODE;\n" +
		"SELECT EXISTS (SELECT 1 FROM `{p}semaphore_slots` WHERE name = ? AND slot >= @coordd_lim) INTO @coordd_hi;\n" +
		"UPDATE `{p}semaphore_slots` SET state = 'FREE', owner = NULL, host = '', pid = 0, acquired_at = 0, expires_at = 0\n" +
		"  WHERE name = ? AND owner = ? AND " + liveSQL + " AND @coordd_mode <> 'session' AND @coordd_hi = 0;\n" +
		"SET @coordd_n = ROW_COUNT();\n" +
		"SELECT count(*) INTO @coordd_w FROM `{p}semaphore_waiters` WHERE name = ? AND @coordd_n > 0 AND expires_at > " + nowSQL + ";\n" +
		"COMMIT;\n" +
		"SELECT @coordd_n, @coordd_w"
)

// PutSemaphore creates or updates the semaphore, repairs its slot rows to
// max(limit, live holders) and its named-lock slots (mode session), and
// wakes parked waiters whose turn a higher limit may make.
func (s *Store) PutSemaphore(ctx context.Context, cfg backends.SemaphoreConfig) error {
	if err := sqlstore.CheckSemaphore(cfg); err != nil {
		return err
	}
	if cfg.Keyed && cfg.Mode == spec.ModeSession {
		// A session slot is a named lock that no row records: an
		// instance's holders could be neither listed nor drained.
		return fmt.Errorf("put semaphore %q: keyed in mode session: %w", cfg.Name, backends.ErrUnsupported)
	}
	err := s.write(ctx, func(c conn) error {
		if err := sqlstore.PutSemaphoreRow(ctx, c, s.dialect, cfg); err != nil {
			return err
		}
		if err := s.repairSessionSlots(ctx, c, cfg.Name, cfg.Mode, cfg.Limit); err != nil {
			return err
		}
		return sqlstore.RepairSlots(ctx, c, s.dialect, cfg.Name, sqlstore.SlotRows(cfg.Limit, cfg.Mode, cfg.Keyed), true)
	})
	if err != nil {
		return fmt.Errorf("put semaphore %q: %w", cfg.Name, err)
	}
	s.sess.setMode(cfg.Name, cfg.Mode)
	if cfg.Keyed {
		s.wakeInstances(ctx, cfg.Name, cfg.Limit)
		return nil
	}
	s.wakeSemaphore(ctx, cfg.Name, min(cfg.Limit, maxWake))
	return nil
}

// DeleteSemaphore removes the semaphore when nobody holds it, else drains
// it (ErrHeld), as sqlstore's does; the holders of its named-lock slots
// count too, and a drain lowers those slots to the holders'. Parked
// waiters learn at once that the semaphore is gone.
func (s *Store) DeleteSemaphore(ctx context.Context, name string) error {
	held := 0
	err := s.write(ctx, func(c conn) error {
		r, exists, err := sqlstore.LockSemaphore(ctx, c, s.dialect, name)
		if err != nil {
			return err
		}
		if held, err = sqlstore.LiveHolders(ctx, c, s.dialect, name); err != nil {
			return err
		}
		if exists {
			// Session holders count too (slot locks, not rows).
			var lim, sessSlots int
			if err := c.QueryRow(ctx, qSessSlotsOf, name).Scan(&lim, &sessSlots); err != nil {
				return err
			}
			used, err := s.usedSlots(ctx, c, nil, name, sessSlots)
			if err != nil {
				return err
			}
			held += len(used)
		}
		if held == 0 {
			return sqlstore.DropSemaphore(ctx, c, s.dialect, name)
		}
		if err := sqlstore.DrainSemaphore(ctx, c, s.dialect, name); err != nil {
			return err
		}
		return s.repairSessionSlots(ctx, c, name, r.Mode, 0)
	})
	if err != nil {
		return fmt.Errorf("delete semaphore %q: %w", name, err)
	}
	if held > 0 {
		return fmt.Errorf("delete semaphore %q: %d live holders: %w", name, held, backends.ErrHeld)
	}
	s.wakeSemaphore(ctx, name, maxWake)
	return nil
}

// TryAcquire takes a slot of a lease-mode semaphore (leaseAcquire) or of a
// session-mode one (sessionAcquire, session.go). The mode is cached per
// name; a stale cache costs one wasted statement, since each path checks
// the stored mode.
func (s *Store) TryAcquire(ctx context.Context, ref backends.SemRef, req backends.AcquireRequest) (backends.Grant, error) {
	name := ref.Name
	if ref.IsInstance() {
		return s.instAcquire(ctx, name, ref.Key, req)
	}
	if err := backends.CheckAcquire(req); err != nil {
		return backends.Grant{}, fmt.Errorf("acquire %q: %w", name, err)
	}
	if s.sess.isSession(name) {
		return s.sessionAcquire(ctx, name, req)
	}
	g, err := s.leaseAcquire(ctx, name, req)
	if errors.Is(err, errSessionMode) {
		return s.sessionAcquire(ctx, name, req)
	}
	return g, err
}

// errSessionMode: leaseAcquire found a session-mode semaphore.
var errSessionMode = errors.New("semaphore is in mode session")

// leaseAcquire takes the lowest free or expired slot, unless the live
// holders already reach the limit (the guard that keeps a lowered limit
// safe): one transaction holding the semaphore row lock, sent as one
// script (qSemAcquire).
func (s *Store) leaseAcquire(ctx context.Context, name string, req backends.AcquireRequest) (backends.Grant, error) {
	var g backends.Grant
	if req.Owner == "" {
		return g, fmt.Errorf("acquire %q: empty owner", name)
	}
	lease, err := leaseMicros(req.Lease)
	if err != nil {
		return g, fmt.Errorf("acquire %q: %w", name, err)
	}
	var limit, fencing, now, live, slot sql.NullInt64
	var mode sql.NullString
	var n, ahead, keyed int64
	args := []any{name, name, name, req.Owner, req.Owner, req.Host, req.PID, lease, name, name, name, req.Owner}
	err = s.runScript(ctx, qSemAcquire, args, func(_ int, rows *sql.Rows) error {
		return rows.Scan(&limit, &fencing, &mode, &now, &live, &slot, &n, &ahead, &keyed)
	})
	if err == nil && mode.Valid {
		s.sess.setMode(name, mode.String)
	}
	switch {
	case err != nil:
	case !limit.Valid:
		err = backends.ErrNotFound
	case mode.String == spec.ModeSession:
		err = errSessionMode
	case keyed != 0:
		err = backends.ErrKeyRequired
	default:
		err = sqlstore.Refusal(live.Int64, limit.Int64, ahead, slot.Valid)
		if err == nil && n == 0 {
			// Cannot happen while the slot rows are locked; never overwrite.
			err = fmt.Errorf("slot %d is no longer free: %w", slot.Int64, backends.ErrNoSlot)
		}
	}
	if err != nil {
		return backends.Grant{}, fmt.Errorf("acquire %q: %w", name, err)
	}
	s.sess.forgetTicket(name, req.Owner)
	return backends.Grant{Slot: int(slot.Int64), Fencing: max(fencing.Int64+1, now.Int64), ExpiresAt: fromMicros(now.Int64 + lease)}, nil
}

// Extend renews owner's lease to now+lease; ErrLost once it has expired.
// A session-mode holder's slot has no expiry: Extend checks that its
// connection still holds the lock (sessionExtend).
func (s *Store) Extend(ctx context.Context, ref backends.SemRef, owner string, lease time.Duration) (time.Time, error) {
	name := ref.Name
	if ref.IsInstance() {
		return s.instExtend(ctx, name, ref.Key, owner, lease)
	}
	if h := s.sess.holder(owner); h != nil {
		return s.sessionExtend(ctx, h, lease)
	}
	return s.leaseExtend(ctx, name, owner, lease)
}

// leaseExtend renews owner's lease in one autocommit statement.
func (s *Store) leaseExtend(ctx context.Context, name, owner string, lease time.Duration) (time.Time, error) {
	us, err := leaseMicros(lease)
	if err != nil {
		return time.Time{}, fmt.Errorf("extend %q: %w", name, err)
	}
	res, err := s.autocommit(ctx, qSemExtend, us, name, owner)
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
		return time.Time{}, fmt.Errorf("extend %q: %w", name, err)
	}
	return fromMicros(exp), nil
}

// Release frees owner's slot: the lock of a session-mode holder
// (sessionRelease), else its slot row (leaseRelease).
func (s *Store) Release(ctx context.Context, ref backends.SemRef, owner string) error {
	name := ref.Name
	if ref.IsInstance() {
		return s.instRelease(ctx, name, ref.Key, owner)
	}
	if h := s.sess.holder(owner); h != nil {
		return s.sessionRelease(ctx, h)
	}
	return s.leaseRelease(ctx, name, owner)
}

// leaseRelease frees owner's slot row, or retires it when the semaphore has
// more slots than max(limit, live holders). A slot whose lease had expired
// is still cleared, but the call returns ErrLost: the caller's hold was not
// exclusive to the end.
//
// The common case, a live slot of a semaphore with nothing to retire, is
// one script (qSemReleaseFast): one round trip. Everything else (not the
// owner, an expired lease, slots to retire, a lease holder left in a
// session-mode semaphore) takes one transaction that holds the semaphore
// row lock, frees the slot and repairs the slot count.
func (s *Store) leaseRelease(ctx context.Context, name, owner string) error {
	var n, waiting int64
	err := s.runScript(ctx, qSemReleaseFast, []any{name, name, name, owner, name}, func(_ int, rows *sql.Rows) error { return rows.Scan(&n, &waiting) })
	if err != nil {
		return fmt.Errorf("release %q: %w", name, err)
	}
	if n > 0 {
		if waiting > 0 {
			s.wakeSemaphore(ctx, name, 1)
		}
		return nil
	}
	wasLive := false
	err = s.write(ctx, func(c conn) (err error) {
		wasLive, err = sqlstore.FreeSlot(ctx, c, s.dialect, name, owner)
		return err
	})
	if err == nil {
		// Rare: wake without counting the waiters first.
		s.wakeSemaphore(ctx, name, 1)
	}
	if err == nil && !wasLive {
		err = fmt.Errorf("lease had expired: %w", backends.ErrLost)
	}
	if err != nil {
		return fmt.Errorf("release %q: %w", name, err)
	}
	return nil
}

// Holders lists live holders by slot, lease rows and session locks alike;
// an absent semaphore has none. Those of a keyed semaphore's instances
// follow; an instance reference lists the instance's.
func (s *Store) Holders(ctx context.Context, ref backends.SemRef) ([]backends.Holder, error) {
	name := ref.Name
	if ref.IsInstance() {
		return s.Core.Holders(ctx, ref)
	}
	m, err := s.ObserveSemaphores(ctx, []string{name})
	if err != nil {
		return nil, fmt.Errorf("holders %q: %w", name, err)
	}
	if st := m[name]; st != nil {
		slices.SortStableFunc(st.Holders, func(a, b backends.Holder) int {
			if a.Key != b.Key {
				return strings.Compare(a.Key, b.Key)
			}
			return a.Slot - b.Slot
		})
		return st.Holders, nil
	}
	return nil, nil
}

// ObserveSemaphores reads many semaphores in one snapshot: per list of
// inChunk names, the rows sqlstore reads, then the slot locks of those that
// have named-lock slots, then their instances.
func (s *Store) ObserveSemaphores(ctx context.Context, names []string) (map[string]*backends.SemaphoreState, error) {
	out := make(map[string]*backends.SemaphoreState, len(names))
	if len(names) == 0 {
		return out, nil
	}
	_, err := s.read(ctx, func(c conn) error {
		clear(out)
		for _, l := range sqlstore.ListChunks(s.dialect, names) {
			if err := s.observeList(ctx, c, l, out); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("observe semaphores: %w", err)
	}
	return out, nil
}

// observeList observes one list of semaphores.
func (s *Store) observeList(ctx context.Context, c conn, names []string, out map[string]*backends.SemaphoreState) error {
	sessSlots, err := sqlstore.ObserveSemaphoreRows(ctx, c, s.dialect, names, out)
	if err != nil {
		return err
	}
	for name, stored := range sessSlots {
		st := out[name]
		want, err := s.sessionState(ctx, c, st, stored)
		if err != nil {
			return err
		}
		// session_slots may stay above what the holders need until an
		// acquirer lowers it; only one too low (behind coordd's back) is
		// drift, so a consistent semaphore reports the slots it should have.
		if stored >= want {
			st.Slots = max(st.Config.Limit, len(st.Holders))
		} else {
			st.Slots += stored
		}
	}
	return sqlstore.ObserveInstances(ctx, c, s.dialect, names, out)
}
