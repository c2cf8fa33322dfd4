package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// Acquire of a session-mode semaphore (see session.go): try the slot
// locks on the holder's connection, then record the grant, or let the line
// or a draining limit refuse it.

const (
	// qSessTryHead reads the semaphore row and, when the limit is the one
	// the CASE was built for (first argument) and no holder remains above
	// it, tries the CASE's slot locks. The columns: connection id, mode,
	// lim, session_slots, wake, backend now, then the slot taken (-1: none;
	// NULL: the CASE did not run). The CASE and the name argument follow.
	qSessTryHead = "SELECT CONNECTION_ID(), s.mode, s.lim, s.session_slots, s.wake, " + nowSQL + ",\n" +
		"  IF(s.mode = 'session' AND s.lim = ? AND s.session_slots <= s.lim, "
	qSessTryTail = ", NULL)\nFROM `{p}semaphores` s WHERE s.name = ? LOCK IN SHARE MODE"

	// qSessConfig reads the row as qSessTryHead does, without trying a slot.
	qSessConfig = "SELECT CONNECTION_ID(), mode, lim, session_slots, wake, " + nowSQL + "\n" +
		"FROM `{p}semaphores` WHERE name = ? LOCK IN SHARE MODE"

	// qSessGrant bumps the fencing counter, returning the new number in
	// the OK packet (LAST_INSERT_ID(expr)), and records the holder under its
	// slot in session_holders: one statement on one row, so one round trip
	// and one commit. The record is assigned first and computes the number
	// (nextFencing: the server's clock is constant within a statement)
	// itself, so the statement means the same whether the server assigns
	// left to right (MySQL, MariaDB) or simultaneously (MariaDB's
	// SIMULTANEOUS_ASSIGNMENT). No row: the semaphore is gone.
	// Arguments: slot, owner, host, pid, name.
	qSessGrant = "UPDATE `{p}semaphores` SET\n" +
		"  session_holders = JSON_SET(COALESCE(session_holders, '{}'), CONCAT('$.\"', ?, '\"'),\n" +
		"    JSON_OBJECT('fencing', " + nextFencing + ", 'conn', CONNECTION_ID(), 'owner', ?, 'host', ?, 'pid', ?, 'at', " + nowSQL + ")),\n" +
		"  fencing = LAST_INSERT_ID(" + nextFencing + ")\n" +
		"WHERE name = ?"

	// qSessGrantFirst is qSessGrant when no live waiter is ahead of the
	// owner in line (every live waiter when the owner is not in line). No
	// row: the semaphore is gone, or waiters are ahead (grantInLine tells).
	// Arguments: slot, owner, host, pid, name, name, name, owner.
	qSessGrantFirst = qSessGrant + " AND NOT EXISTS (SELECT 1 FROM `{p}semaphore_waiters` w\n" +
		"  WHERE w.name = ? AND w.expires_at > " + nowSQL + " AND w.seq < COALESCE((SELECT x.seq FROM `{p}semaphore_waiters` x\n" +
		"    WHERE x.name = ? AND x.owner = ? AND x.expires_at > " + nowSQL + "), " + noTicket + "))"

	// qSessAhead counts the live waiters ahead of an owner in line; NULL
	// when the semaphore is gone. Arguments: name, owner, name.
	qSessAhead = "SELECT IF(EXISTS (SELECT 1 FROM `{p}semaphores` WHERE name = ?),\n" +
		"  (SELECT count(*) FROM `{p}semaphore_waiters` w WHERE w.name = s.n AND w.expires_at > " + nowSQL + "\n" +
		"    AND w.seq < COALESCE((SELECT x.seq FROM `{p}semaphore_waiters` x\n" +
		"      WHERE x.name = s.n AND x.owner = ? AND x.expires_at > " + nowSQL + "), " + noTicket + ")), NULL)\n" +
		"FROM (SELECT ? AS n) s"

	// qSessShrink lowers session_slots to the limit once no holder remains
	// above it, only if neither changed meanwhile.
	qSessShrink = "UPDATE `{p}semaphores` SET session_slots = lim WHERE name = ? AND lim = ? AND session_slots = ?"
)

// trySlots runs qSessTry on d for the slots [from, from+caseChunk) below
// the expected limit.
func (s *Store) trySlots(ctx context.Context, d *dedicated, name string, limit, from int) (sessionTry, error) {
	r := sessionTry{slot: -1}
	var b strings.Builder
	b.WriteString(qSessTryHead)
	args := []any{limit}
	to := min(limit, from+caseChunk)
	if from >= to {
		b.WriteString("-1")
	} else {
		b.WriteString("CASE")
		for i := from; i < to; i++ {
			fmt.Fprintf(&b, " WHEN GET_LOCK(?, 0) THEN %d", i)
			args = append(args, s.slotLock(name, i))
		}
		b.WriteString(" ELSE -1 END")
	}
	b.WriteString(qSessTryTail)
	args = append(args, name)
	var got sql.NullInt64
	s.pool.CountTrip()
	err := s.interruptible(ctx, d, noDeadline, func(rctx context.Context) error {
		return d.conn.QueryRowContext(rctx, s.q(b.String()), args...).Scan(&r.connID, &r.mode, &r.limit, &r.slots, &r.wake, &r.now, &got)
	})
	if errors.Is(err, sql.ErrNoRows) {
		r.notFound = true
		return r, nil
	}
	if err != nil {
		return r, err
	}
	if got.Valid {
		r.tried, r.slot = true, int(got.Int64)
	}
	s.sess.remember(r, name)
	return r, nil
}

// readConfig runs qSessConfig on d.
func (s *Store) readConfig(ctx context.Context, d *dedicated, name string) (sessionTry, error) {
	r := sessionTry{slot: -1}
	s.pool.CountTrip()
	err := s.interruptible(ctx, d, noDeadline, func(rctx context.Context) error {
		return d.conn.QueryRowContext(rctx, s.q(qSessConfig), name).Scan(&r.connID, &r.mode, &r.limit, &r.slots, &r.wake, &r.now)
	})
	if errors.Is(err, sql.ErrNoRows) {
		r.notFound = true
		return r, nil
	}
	if err == nil {
		s.sess.remember(r, name)
	}
	return r, err
}

// takeSlot tries every slot below the limit, chunk by chunk, starting with
// the limit the store last saw, and follows a changed limit a few times.
// The result has tried false when the semaphore is draining (session_slots
// above the limit).
func (s *Store) takeSlot(ctx context.Context, d *dedicated, name string) (sessionTry, error) {
	limit := s.sess.info(name).limit
	for attempt := 0; ; attempt++ {
		r, err := s.trySlots(ctx, d, name, limit, 0)
		if err != nil || r.notFound || r.mode != spec.ModeSession {
			return r, err
		}
		if !r.tried {
			if r.slots > r.limit || attempt >= 3 {
				return r, nil
			}
			limit = r.limit // the remembered limit was stale
			continue
		}
		for from := caseChunk; r.tried && r.slot < 0 && from < r.limit; from += caseChunk {
			if r, err = s.trySlots(ctx, d, name, r.limit, from); err != nil {
				return r, err
			}
		}
		return r, nil
	}
}

// sessionAcquire takes a slot of a session-mode semaphore for req.Owner,
// on the connection of owner's wait when it waits (which may have taken
// the slot already), else on a free dedicated connection.
func (s *Store) sessionAcquire(ctx context.Context, name string, req backends.AcquireRequest) (backends.Grant, error) {
	if req.Owner == "" {
		return backends.Grant{}, fmt.Errorf("acquire %q: empty owner", name)
	}
	w := s.sess.takeWaiter(req.Owner)
	waiting := w != nil
	if w == nil {
		w = &session{name: name, owner: req.Owner, slot: -1}
	}
	if w.d == nil {
		d, err := s.dedicate(ctx)
		if err != nil {
			if waiting {
				s.sess.putWaiter(w)
			}
			return backends.Grant{}, fmt.Errorf("acquire %q: %w", name, err)
		}
		w.d = d
	}
	g, err := s.sessionAcquireOn(ctx, w, req)
	if errors.Is(err, errInterruptedStmt) && !waiting {
		// A stray wake-up (see sessionExtend) ended a statement: whatever
		// it left is freed with the connection; try once more on another.
		s.dropSession(w)
		if w.d, err = s.dedicate(ctx); err != nil {
			return backends.Grant{}, fmt.Errorf("acquire %q: %w", name, err)
		}
		w.slot = -1
		g, err = s.sessionAcquireOn(ctx, w, req)
	}
	switch {
	case err == nil:
		s.sess.mu.Lock()
		s.sess.held[req.Owner] = w
		s.sess.mu.Unlock()
		return g, nil
	case errors.Is(err, backends.ErrNoSlot) || errors.Is(err, backends.ErrNotFound) || errors.Is(err, errLeaseMode):
		// The connection holds no slot lock: a waiter keeps it (with its
		// wait lock), anyone else returns it.
		if waiting {
			s.sess.putWaiter(w)
		} else {
			s.undedicate(w.d)
		}
	default:
		s.dropSession(w)
		if waiting {
			s.sess.putWaiter(w)
		}
	}
	if errors.Is(err, errLeaseMode) {
		return s.leaseAcquire(ctx, name, req)
	}
	return backends.Grant{}, fmt.Errorf("acquire %q: %w", name, err)
}

// errLeaseMode: the session path found a semaphore that is not in mode
// session.
var errLeaseMode = errors.New("semaphore is not in mode session")

// sessionAcquireOn takes (or completes) a slot on w's connection. On error
// the connection holds no slot lock unless the error is unexpected, which
// the caller answers by dropping the connection.
func (s *Store) sessionAcquireOn(ctx context.Context, w *session, req backends.AcquireRequest) (backends.Grant, error) {
	// The back-off lasts only while the line refuses grant after grant.
	behind := w.behind
	w.behind = 0
	var r sessionTry
	var err error
	if w.slot >= 0 {
		// Taken while waiting: check that it is still within the limit.
		if r, err = s.readConfig(ctx, w.d, w.name); err != nil {
			return backends.Grant{}, err
		}
		r.slot, r.tried = w.slot, true
		if !r.notFound && (r.mode != spec.ModeSession || w.slot >= r.limit || r.slots > r.limit) {
			if err := s.releaseSlot(ctx, w); err != nil {
				return backends.Grant{}, err
			}
			r.slot = -1
			if r.mode == spec.ModeSession && r.slots > r.limit {
				r.tried = false
			}
		}
	} else if r, err = s.takeSlot(ctx, w.d, w.name); err != nil {
		return backends.Grant{}, err
	}
	switch {
	case r.notFound:
		if w.slot >= 0 {
			if err := s.releaseSlot(ctx, w); err != nil {
				return backends.Grant{}, err
			}
		}
		return backends.Grant{}, backends.ErrNotFound
	case r.mode != spec.ModeSession:
		return backends.Grant{}, errLeaseMode
	case !r.tried:
		if r, err = s.acquireDraining(ctx, w); err != nil {
			return backends.Grant{}, err
		}
	}
	w.d.id, w.wake, w.limit = r.connID, r.wake, r.limit
	if r.slot < 0 {
		return backends.Grant{}, fmt.Errorf("%d slots held: %w", r.limit, backends.ErrNoSlot)
	}
	w.slot = r.slot
	if w.waitLock {
		if _, err := s.dint(ctx, w.d, noDeadline, qSessRelease, s.waitLock(w.name)); err != nil {
			return backends.Grant{}, err
		}
		w.waitLock = false
	}
	fencing, err := s.recordGrant(ctx, w, req, r.limit)
	if errors.Is(err, errBehindLine) {
		w.behind = min(max(2*behind, pollMin), pollMax)
		return backends.Grant{}, fmt.Errorf("%w: %w", err, backends.ErrNoSlot)
	}
	if errors.Is(err, backends.ErrNotFound) {
		if err := s.releaseSlot(ctx, w); err != nil {
			return backends.Grant{}, err
		}
		return backends.Grant{}, backends.ErrNotFound
	}
	if err != nil {
		return backends.Grant{}, err
	}
	return backends.Grant{Slot: w.slot, Fencing: fencing, ExpiresAt: fromMicros(r.now + req.Lease.Microseconds())}, nil
}

// recordGrant bumps the fencing counter and records the holder
// (qSessGrantFirst, qSessGrant), on the holder's connection: nothing is
// written for a holder whose session died after taking the slot. With
// waiters ahead of the owner in line it leaves the decision to grantInLine.
// ErrNotFound: the semaphore row is gone. errBehindLine: the line refused
// the grant and the slot lock was given back. The grant removes the owner's
// waiter record.
func (s *Store) recordGrant(ctx context.Context, w *session, req backends.AcquireRequest, limit int) (int64, error) {
	fencing, err := lastID(s.dexec(ctx, w.d, qSessGrantFirst, w.slot, req.Owner, req.Host, req.PID, w.name, w.name, w.name, req.Owner))
	if errors.Is(err, backends.ErrNotFound) {
		fencing, err = s.grantInLine(ctx, w, req, limit)
	}
	if err == nil && s.sess.ticket(w.name, w.owner) != unregisteredTicket {
		s.sess.forgetTicket(w.name, w.owner)
		_, err = s.dexec(ctx, w.d, qWaitLeave, w.name, w.owner)
	}
	return fencing, err
}

// errBehindLine: a session-mode grant that the line refused.
var errBehindLine = errors.New("waiters ahead in line")

// grantInLine decides a grant that has live waiters ahead of its owner,
// holding the check lock so that two such decisions do not count the same
// free slots: the owner keeps its slot lock while fewer waiters are ahead
// of it than slots were free when it took it (its own included). Otherwise
// it gives the slot lock back, wakes the first parked waiter (wake kill:
// one may have parked while the lock was taken), and returns errBehindLine.
func (s *Store) grantInLine(ctx context.Context, w *session, req backends.AcquireRequest, limit int) (int64, error) {
	check := s.checkLock(w.name)
	got, err := s.dint(ctx, w.d, helperLockWait+time.Minute, qSessGetLock, check, sleepSeconds(helperLockWait))
	if err != nil {
		return 0, err
	}
	if got.Int64 != 1 {
		return 0, fmt.Errorf("check lock busy: %w", backends.ErrNoSlot)
	}
	fencing, err := s.grantInLineLocked(ctx, w, req, limit)
	if _, rerr := s.dint(ctx, w.d, noDeadline, qSessRelease, check); rerr != nil && err == nil {
		err = rerr
	}
	return fencing, err
}

func (s *Store) grantInLineLocked(ctx context.Context, w *session, req backends.AcquireRequest, limit int) (int64, error) {
	ahead, err := s.dint(ctx, w.d, noDeadline, s.q(qSessAhead), w.name, req.Owner, w.name)
	if err != nil {
		return 0, err
	}
	if !ahead.Valid {
		return 0, backends.ErrNotFound
	}
	used, err := s.usedSlots(ctx, s.on(nil), w.d, w.name, limit)
	if err != nil {
		return 0, err
	}
	if free := limit - len(used) + 1; ahead.Int64 < int64(free) {
		return lastID(s.dexec(ctx, w.d, qSessGrant, w.slot, req.Owner, req.Host, req.PID, w.name))
	}
	if err := s.releaseSlot(ctx, w); err != nil {
		return 0, err
	}
	if w.wake == spec.WakeKill && limit > 1 {
		_, _ = s.wakeParked(ctx, s.channel("semaphore", w.name), 1)
	}
	return 0, fmt.Errorf("%d %w", ahead.Int64, errBehindLine)
}

// acquireDraining is acquire while holders admitted under a higher limit
// remain (session_slots > lim): under the check lock, it counts the held
// slots and takes one below the limit only while fewer than the limit are
// held; when none is held at or above the limit it lowers session_slots.
func (s *Store) acquireDraining(ctx context.Context, w *session) (sessionTry, error) {
	check := s.checkLock(w.name)
	got, err := s.dint(ctx, w.d, helperLockWait+time.Minute, qSessGetLock, check, sleepSeconds(helperLockWait))
	if err != nil {
		return sessionTry{}, err
	}
	if got.Int64 != 1 {
		return sessionTry{}, fmt.Errorf("check lock busy: %w", backends.ErrNoSlot)
	}
	r, err := s.readConfig(ctx, w.d, w.name)
	if err == nil && !r.notFound && r.mode == spec.ModeSession {
		r.slot = -1
		var used []int
		used, err = s.usedSlots(ctx, s.on(nil), w.d, w.name, max(r.slots, r.limit))
		if err == nil {
			above := 0
			for _, u := range used {
				if u >= r.limit {
					above++
				}
			}
			if above == 0 && r.slots > r.limit {
				_, err = s.dexec(ctx, w.d, qSessShrink, w.name, r.limit, r.slots)
			}
			if err == nil && len(used) < r.limit {
				var t sessionTry
				t, err = s.trySlotsPlain(ctx, w.d, w.name, r.limit)
				r.slot = t.slot
			}
		}
	}
	if _, rerr := s.dint(ctx, w.d, noDeadline, qSessRelease, check); rerr != nil && err == nil {
		err = rerr
	}
	return r, err
}

// trySlotsPlain tries the slots below limit without reading the row (the
// caller holds the check lock and has read it).
func (s *Store) trySlotsPlain(ctx context.Context, d *dedicated, name string, limit int) (sessionTry, error) {
	r := sessionTry{slot: -1}
	for from := 0; from < limit; from += caseChunk {
		var b strings.Builder
		b.WriteString("SELECT CASE")
		var args []any
		for i := from; i < min(limit, from+caseChunk); i++ {
			fmt.Fprintf(&b, " WHEN GET_LOCK(?, 0) THEN %d", i)
			args = append(args, s.slotLock(name, i))
		}
		b.WriteString(" ELSE -1 END")
		v, err := s.dint(ctx, d, noDeadline, b.String(), args...)
		if err != nil {
			return r, err
		}
		if v.Int64 >= 0 {
			r.slot = int(v.Int64)
			return r, nil
		}
	}
	return r, nil
}
