package postgres

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/internal/sqlstore"
	"github.com/coordd/coordd/spec"
)

// What a session-mode semaphore holds, as the store observes and repairs
// it: the slot locks in use (pg_locks), the holders' records and
// session_slots.

const (
	// qSessLocks lists the slot locks of one semaphore held by any session
	// of this database, by slot, with the holding backend's pid. A key of
	// the one-key form shows in pg_locks as classid (high 32 bits) and
	// objid (low 32 bits) with objsubid 1. Arguments: low word of the
	// base, high word, low word, low word + lineSlot.
	qSessLocks = `SELECT l.objid::bigint - ?::bigint, l.pid FROM pg_locks l
WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.classid::bigint = ?::bigint AND l.objid::bigint >= ?::bigint AND l.objid::bigint < ?::bigint
ORDER BY 1`

	// qSessRecords reads session_slots and the holder records.
	qSessRecords = `SELECT session_slots, session_holders FROM {p}semaphores WHERE name = ?`

	// qSessSetSlots stores session_slots. Arguments: value, name.
	qSessSetSlots = `UPDATE {p}semaphores SET session_slots = ? WHERE name = ?`

	// qSessNotify wakes the head of a semaphore's line after a change that
	// may make room (a higher limit, a deletion). Arguments: channel.
	qSessNotify = `SELECT pg_notify(?, '')`
)

// slotLock is one held slot lock.
type slotLock struct {
	slot int
	pid  int64
}

// locksArgs are qSessLocks' arguments for name.
func (s *Store) locksArgs(name string) []any {
	base := s.lockBase(name)
	lo, hi := base&0xffff_ffff, base>>32
	return []any{lo, hi, lo, lo + lineSlot}
}

// slotLocksConn lists name's held slot locks through c.
func (s *Store) slotLocksConn(ctx context.Context, c sqlstore.Conn, name string) ([]slotLock, error) {
	rows, err := c.Query(ctx, s.dq(qSessLocks), s.locksArgs(name)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return scanSlotLocks(rows)
}

// slotLocksTx lists name's held slot locks in tx.
func (s *Store) slotLocksTx(ctx context.Context, tx pgx.Tx, name string) ([]slotLock, error) {
	s.pool.CountTrip()
	rows, err := tx.Query(ctx, s.dq(qSessLocks), s.locksArgs(name)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return scanSlotLocks(rows)
}

// scanSlotLocks reads qSessLocks's rows, from a pooled connection or a
// transaction alike.
func scanSlotLocks(rows interface {
	Next() bool
	Scan(...any) error
	Err() error
}) ([]slotLock, error) {
	var out []slotLock
	for rows.Next() {
		var l slotLock
		if err := rows.Scan(&l.slot, &l.pid); err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, rows.Err()
}

// holderRecord is one entry of session_holders.
type holderRecord struct {
	Fencing int64  `json:"fencing"`
	PID     int64  `json:"pid"` // the backend's, whose lock makes the record count
	Owner   string `json:"owner"`
	Host    string `json:"host"`
	HPID    int    `json:"hpid"` // the holder process's
	At      int64  `json:"at"`
}

// sessionState adds a semaphore's session holders (its held slot locks)
// to st through c, and returns session_slots as stored and the value a
// consistent semaphore has: max(limit, highest held slot + 1). A lock
// whose backend no record names (a colliding key) is listed with host
// "?".
func (s *Store) sessionState(ctx context.Context, c sqlstore.Conn, st *backends.SemaphoreState) (stored, want int, err error) {
	name := st.Config.Name
	var doc sql.NullString
	if err := c.QueryRow(ctx, s.dq(qSessRecords), name).Scan(&stored, &doc); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, 0, err
	}
	recs := map[string]holderRecord{}
	if doc.Valid {
		if err := json.Unmarshal([]byte(doc.String), &recs); err != nil {
			return 0, 0, fmt.Errorf("session_holders of %q: %w", name, err)
		}
	}
	locks, err := s.slotLocksConn(ctx, c, name)
	if err != nil {
		return 0, 0, err
	}
	want = st.Config.Limit
	for _, l := range locks {
		h := backends.Holder{Slot: l.slot, Host: "?", Session: l.pid}
		if r, ok := recs[strconv.Itoa(l.slot)]; ok && r.PID == l.pid {
			h = backends.Holder{Slot: l.slot, Owner: r.Owner, Host: r.Host, PID: r.HPID, Fencing: r.Fencing, AcquiredAt: sqlstore.FromMicros(r.At), Session: l.pid}
		}
		st.Holders = append(st.Holders, h)
		want = max(want, l.slot+1)
	}
	return stored, want, nil
}

// repairSessionSlots sets session_slots to max(limit, highest held slot +
// 1) in mode session, and to the highest held slot + 1 (0 when none) for
// a semaphore that left mode session with holders left. Run it holding
// the semaphore's row lock.
func (s *Store) repairSessionSlots(ctx context.Context, c sqlstore.Conn, name, mode string, limit int) error {
	var stored int
	var doc sql.NullString
	if err := c.QueryRow(ctx, s.dq(qSessRecords), name).Scan(&stored, &doc); err != nil {
		return err
	}
	if stored == 0 && mode != spec.ModeSession {
		return nil
	}
	want := 0
	if mode == spec.ModeSession {
		want = limit
	}
	locks, err := s.slotLocksConn(ctx, c, name)
	if err != nil {
		return err
	}
	for _, l := range locks {
		want = max(want, l.slot+1)
	}
	if want != stored {
		_, err = c.Exec(ctx, s.dq(qSessSetSlots), want, name)
	}
	return err
}

// notifySession wakes the head of name's line after a committed change;
// a failure only leaves it to its fallback.
func (s *Store) notifySession(ctx context.Context, name string) {
	s.pool.CountTrip()
	_, _ = s.db.ExecContext(context.WithoutCancel(ctx), s.dq(qSessNotify), s.sessChannel(name))
}
