package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/internal/sqlstore"
	"github.com/coordd/coordd/spec"
)

// Acquire of a session-mode semaphore (see session.go): try the slot locks
// on the holder's connection, then record the grant, or let the line or a
// draining limit decide under the row lock.

// lineAheadOf counts the live waiters ahead of an owner (the argument) in
// the line of semaphore s: those with a lower ticket, every live waiter
// when the owner has none.
const lineAheadOf = `(SELECT count(*) FROM {p}semaphore_waiters w WHERE w.name = s.name AND w.expires_at > {now}
    AND w.seq < coalesce((SELECT x.seq FROM {p}semaphore_waiters x
      WHERE x.name = s.name AND x.owner = ? AND x.expires_at > {now}), 9223372036854775807))`

const (
	// qSessTry reads the semaphore row and, when it is in mode session and
	// no holder remains above its limit, tries the slot locks below the
	// limit, lowest first, stopping at the first it gets: the subquery's
	// LIMIT ends the scan, and a lock the session holds is never asked
	// for. Columns: mode, lim, session_slots, the slot taken (-1: none;
	// NULL: nothing tried). No row: the semaphore is absent. Arguments:
	// the key base, name.
	qSessTry = `SELECT s.mode, s.lim, s.session_slots,
  CASE WHEN s.mode = 'session' AND s.session_slots <= s.lim THEN
    coalesce((SELECT g.i FROM generate_series(0, s.lim - 1) AS g(i)
      WHERE pg_try_advisory_lock(?::bigint + g.i) LIMIT 1), -1)
  END
FROM {p}semaphores s WHERE s.name = ?`

	// qSessGrantSet is the SET of a grant: bump the fencing counter and
	// record the holder under its slot, with the backend pid whose lock
	// makes the record count. Both expressions read the old counter, so
	// they agree. Arguments: slot, owner, host, pid.
	qSessGrantSet = `SET fencing = {next:fencing},
  session_holders = jsonb_set(coalesce(s.session_holders, '{}'::jsonb), ARRAY[?::bigint::text],
    jsonb_build_object('fencing', {next:fencing}, 'pid', pg_backend_pid(), 'owner', ?::text,
      'host', ?::text, 'hpid', ?::bigint, 'at', {now}))`

	// qSessGrant is the grant of the common case, one statement on the
	// holder's connection: only while the slot is below the limit, no
	// holder is left above it and no live waiter is ahead of the owner. It
	// takes the owner out of the line in the same commit and returns the
	// number and the server's now; no row: refused or absent (grantLocked
	// tells). The commit does not wait for the WAL flush (the last
	// column): what a crash could lose is a holder whose session the
	// crash ends anyway, and a counter bump that the clock covers, since
	// every number is at least the server's clock in µs when it is handed
	// out ({next:fencing}), so a number handed out after the restart is
	// above any handed out before it. Arguments: qSessGrantSet's, name,
	// slot, owner, name, owner.
	qSessGrant = `WITH g AS (
  UPDATE {p}semaphores s ` + qSessGrantSet + `
  WHERE s.name = ? AND s.mode = 'session' AND ?::bigint < s.lim AND s.session_slots <= s.lim
    AND ` + lineAheadOf + ` = 0
  RETURNING s.fencing, {now} AS now
), d AS (DELETE FROM {p}semaphore_waiters WHERE name = ? AND owner = ? AND EXISTS (SELECT 1 FROM g))
SELECT fencing, now, set_config('synchronous_commit', 'off', true) FROM g`

	// qSessGrantLocked is the grant grantLocked decided, the row locked.
	// Arguments: qSessGrantSet's, name.
	qSessGrantLocked = `UPDATE {p}semaphores s ` + qSessGrantSet + `
WHERE s.name = ? RETURNING s.fencing, {now}`

	// qSessLockRow locks the semaphore row and reads what grantLocked
	// decides on: mode, lim, session_slots and the live waiters ahead of
	// the owner. Arguments: owner, name.
	qSessLockRow = `SELECT s.mode, s.lim, s.session_slots, ` + lineAheadOf + `
FROM {p}semaphores s WHERE s.name = ? FOR UPDATE`

	// qSessTryBelow tries the slot locks below a limit, lowest first.
	// Arguments: limit, key base.
	qSessTryBelow = `SELECT coalesce((SELECT g.i FROM generate_series(0, ?::bigint - 1) AS g(i)
  WHERE pg_try_advisory_lock(?::bigint + g.i) LIMIT 1), -1)`

	// qSessShrink lowers session_slots to the limit (no holder is left
	// above it). Arguments: name.
	qSessShrink = `UPDATE {p}semaphores SET session_slots = lim WHERE name = ?`

	// qSessGiveBack frees a slot lock taken but not granted, and tells the
	// head of the line: its turn may have come. Arguments: key, channel.
	qSessGiveBack = `SELECT pg_advisory_unlock(?::bigint), pg_notify(?, '')`

	// qWaitLeave removes owner's waiter record (a grant grantLocked made).
	qWaitLeave = `DELETE FROM {p}semaphore_waiters WHERE name = ? AND owner = ?`
)

// sessionTry is the outcome of one qSessTry.
type sessionTry struct {
	mode     string
	limit    int
	slots    int  // session_slots
	slot     int  // the slot taken, -1 none
	tried    bool // the slots were tried (mode session, not draining)
	notFound bool
}

// trySlots runs qSessTry on d.
func (s *Store) trySlots(ctx context.Context, d *dedicated, name string) (sessionTry, error) {
	r := sessionTry{slot: -1}
	var got *int64
	err := s.drow(ctx, d, qSessTry, []any{s.lockBase(name), name}, &r.mode, &r.limit, &r.slots, &got)
	if errors.Is(err, pgx.ErrNoRows) {
		r.notFound = true
		return r, nil
	}
	if err != nil {
		return r, err
	}
	s.sess.setMode(name, r.mode)
	if got != nil {
		r.tried, r.slot = true, int(*got)
	}
	return r, nil
}

// errLeaseMode: the session path found a semaphore that is not in mode
// session.
var errLeaseMode = errors.New("semaphore is not in mode session")

// errBehindLine: a grant that the line refused; the slot lock went back.
var errBehindLine = errors.New("waiters ahead in line")

// Back-off of a waiter whose grant the line refused, so that a waiter
// ahead that is slow (or crashed, its record not yet expired) does not
// make it spin.
const (
	behindMin = 10 * time.Millisecond
	behindMax = 250 * time.Millisecond
)

// sessionAcquire takes a slot of a session-mode semaphore for req.Owner,
// on the connection of owner's wait when it waits (which may have taken
// the slot already), else on a free dedicated connection.
func (s *Store) sessionAcquire(ctx context.Context, name string, req backends.AcquireRequest) (backends.Grant, error) {
	if _, err := sqlstore.CheckAcquireRequest(fmt.Sprintf("%q", name), req); err != nil {
		return backends.Grant{}, err
	}
	w := s.sess.takeWaiter(req.Owner)
	if w != nil && w.name != name {
		w.drop()
		w = nil
	}
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
	switch {
	case err == nil:
		s.sess.mu.Lock()
		s.sess.held[req.Owner] = w
		s.sess.mu.Unlock()
		return g, nil
	case errors.Is(err, backends.ErrNoSlot) || errors.Is(err, backends.ErrNotFound) || errors.Is(err, errLeaseMode):
		// The connection holds no slot lock: a waiter keeps it (with the
		// line lock, if it heads the line), anyone else returns it.
		if waiting {
			s.sess.putWaiter(w)
		} else {
			s.undedicate(w.d)
		}
	default:
		w.drop()
		if waiting {
			s.sess.putWaiter(w)
		}
	}
	if errors.Is(err, errLeaseMode) {
		return s.Core.TryAcquire(ctx, backends.SemRef{Name: name}, req)
	}
	return backends.Grant{}, fmt.Errorf("acquire %q: %w", name, err)
}

// sessionAcquireOn takes (or completes) a slot on w's connection. On an
// expected refusal the connection holds no slot lock; on any other error
// the caller drops the connection, which frees whatever it held.
func (s *Store) sessionAcquireOn(ctx context.Context, w *session, req backends.AcquireRequest) (backends.Grant, error) {
	behind := w.behind
	w.behind = 0
	if w.slot < 0 {
		r, err := s.trySlots(ctx, w.d, w.name)
		switch {
		case err != nil:
			return backends.Grant{}, err
		case r.notFound:
			return backends.Grant{}, backends.ErrNotFound
		case r.mode != spec.ModeSession:
			return backends.Grant{}, errLeaseMode
		case !r.tried:
			return s.grantLocked(ctx, w, req, behind)
		case r.slot < 0:
			return backends.Grant{}, fmt.Errorf("%d slots held: %w", r.limit, backends.ErrNoSlot)
		}
		w.slot = r.slot
	}
	var fencing, now int64
	err := s.drow(ctx, w.d, qSessGrant, []any{w.slot, req.Owner, req.Host, req.PID, w.name, w.slot, req.Owner, w.name, req.Owner}, &fencing, &now, new(string))
	if errors.Is(err, pgx.ErrNoRows) {
		return s.grantLocked(ctx, w, req, behind)
	}
	if err != nil {
		return backends.Grant{}, err
	}
	return backends.Grant{Slot: w.slot, Fencing: fencing, ExpiresAt: sqlstore.FromMicros(now + req.Lease.Microseconds())}, nil
}

// grantLocked decides a grant the common path could not make, in one
// transaction on w's connection that holds the semaphore's row lock, so
// that two such decisions never count the same free slots: the semaphore
// is absent or left mode session (the slot lock goes back), a holder is
// left above a lowered limit (draining), or waiters are ahead of the owner
// in line. It counts the slot locks held by anyone (pg_locks) and admits
// the owner only while fewer than the limit are held by others and fewer
// live waiters are ahead of it than that leaves free; a slot at or above
// the limit goes back first. With none left above the limit, it lowers
// session_slots, which opens the common path again. A refused owner gives
// its slot lock back, with a NOTIFY for the head of the line.
func (s *Store) grantLocked(ctx context.Context, w *session, req backends.AcquireRequest, behind time.Duration) (backends.Grant, error) {
	s.pool.CountTrip()
	tx, err := w.d.conn.Begin(ctx)
	if err != nil {
		return backends.Grant{}, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var mode string
	var limit, stored int
	var ahead int64
	s.pool.CountTrip()
	err = tx.QueryRow(ctx, s.dq(qSessLockRow), req.Owner, w.name).Scan(&mode, &limit, &stored, &ahead)
	notFound := errors.Is(err, pgx.ErrNoRows)
	if err != nil && !notFound {
		return backends.Grant{}, err
	}
	held, err := s.slotLocksTx(ctx, tx, w.name)
	if err != nil {
		return backends.Grant{}, err
	}
	others, above := 0, 0
	for _, l := range held {
		if l.pid == w.d.pid {
			continue // this connection's own (it holds at most one slot)
		}
		others++
		if l.slot >= limit {
			above++
		}
	}
	if w.slot >= 0 && (notFound || mode != spec.ModeSession || w.slot >= limit) {
		if err := s.giveBack(ctx, w); err != nil {
			return backends.Grant{}, err
		}
	}
	switch {
	case notFound:
		return backends.Grant{}, backends.ErrNotFound
	case mode != spec.ModeSession:
		return backends.Grant{}, errLeaseMode
	}
	if above == 0 && stored > limit {
		if _, err := s.txExec(ctx, tx, qSessShrink, w.name); err != nil {
			return backends.Grant{}, err
		}
	}
	if free := int64(limit - others); free <= 0 || ahead >= free {
		if w.slot >= 0 {
			if err := s.giveBack(ctx, w); err != nil {
				return backends.Grant{}, err
			}
		}
		if err := tx.Commit(ctx); err != nil {
			return backends.Grant{}, err
		}
		if free <= 0 {
			return backends.Grant{}, fmt.Errorf("%d of %d held: %w", others, limit, backends.ErrNoSlot)
		}
		w.behind = min(max(2*behind, behindMin), behindMax)
		return backends.Grant{}, fmt.Errorf("%d %w: %w", ahead, errBehindLine, backends.ErrNoSlot)
	}
	if w.slot < 0 {
		var got int
		s.pool.CountTrip()
		if err := tx.QueryRow(ctx, s.dq(qSessTryBelow), limit, s.lockBase(w.name)).Scan(&got); err != nil {
			return backends.Grant{}, err
		}
		if got < 0 {
			if err := tx.Commit(ctx); err != nil {
				return backends.Grant{}, err
			}
			return backends.Grant{}, fmt.Errorf("%d slots held: %w", limit, backends.ErrNoSlot)
		}
		w.slot = got
	}
	var fencing, now int64
	s.pool.CountTrip()
	if err := tx.QueryRow(ctx, s.dq(qSessGrantLocked), w.slot, req.Owner, req.Host, req.PID, w.name).Scan(&fencing, &now); err != nil {
		return backends.Grant{}, err
	}
	if _, err := s.txExec(ctx, tx, qWaitLeave, w.name, req.Owner); err != nil {
		return backends.Grant{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return backends.Grant{}, err
	}
	return backends.Grant{Slot: w.slot, Fencing: fencing, ExpiresAt: sqlstore.FromMicros(now + req.Lease.Microseconds())}, nil
}

// giveBack frees w's slot lock, taken but not granted, and notifies the
// semaphore's channel (qSessGiveBack).
func (s *Store) giveBack(ctx context.Context, w *session) error {
	var freed bool
	var notified string
	err := s.drow(ctx, w.d, qSessGiveBack, []any{s.lockBase(w.name) + int64(w.slot), s.sessChannel(w.name)}, &freed, &notified)
	if err != nil {
		return err
	}
	w.slot = -1
	return nil
}

// txExec runs one statement in tx.
func (s *Store) txExec(ctx context.Context, tx pgx.Tx, q string, args ...any) (int64, error) {
	s.pool.CountTrip()
	tag, err := tx.Exec(ctx, s.dq(q), args...)
	return tag.RowsAffected(), err
}
