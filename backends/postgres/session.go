package postgres

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/coordd/coordd/backends/internal/sqlstore"
	"github.com/coordd/coordd/spec"
)

// Session-mode semaphores: slots that are session-level advisory locks,
// the PostgreSQL form of MySQL's GET_LOCK slots. This file holds what the
// phases share (the lock keys, the dedicated connections, the holders and
// waiters a store keeps); session_acquire.go, session_wait.go and
// session_release.go the phases.
//
// Slot i of a semaphore is the advisory lock slotKey(name, i), taken with
// pg_try_advisory_lock on the holder's own connection (a pgx connection
// opened for it, never one of the statement pool, whose next user would
// inherit the lock). The server frees a session's advisory locks when the
// session ends, so a holder whose process or connection dies frees its
// slot at once, with no lease to run out.
//
// Keys. Advisory locks live in one int8 key space per database, shared
// with every other application there. A semaphore's keys are a block of
// 2^16 consecutive numbers: the first 8 bytes of
// sha256(database, schema, prefix, name), top bit and low 16 bits cleared,
// plus the slot number (below maxSessionLimit); the block's last number is
// the line lock. Two semaphores collide only when 47 bits of their hashes
// agree (for a thousand semaphores, about 4e-9), and a collision with
// another application needs it to use the one-key form in that block. A
// collision never admits more than a limit: a lock is held by one session
// at a time whoever takes it, so a colliding lock held elsewhere only makes
// a slot look taken (fewer admitted), and status lists its holder as
// unknown ("?") since no record of the semaphore names its backend pid.
//
// Acquire is two statements on the holder's connection: qSessTry tries the
// slot locks below the row's limit in one statement, lowest first, and
// stops at the first it gets; qSessGrant then bumps the fencing counter and
// records the holder (host, pid, fencing, backend pid) in the row's
// session_holders, only while the slot is below the limit, no holder is
// left above it and no live waiter is ahead in line. Because the grant
// runs on the holder's own connection, a holder whose session died after
// its try cannot finish: the server frees its lock only when the session
// ends, after its last statement, so any later holder of the slot is
// granted after it and gets a higher number. When the grant is refused,
// grantLocked decides under the semaphore's row lock (see there).
//
// The limit: session_slots is max(lim, highest held slot + 1), so a limit
// lowered below the holders leaves it above lim until they release.
// Meanwhile the fast path is closed (qSessTry tries nothing, qSessGrant
// matches nothing) and acquirers count the held slots under the row lock
// (grantLocked), the first to find none above lim lowering session_slots.
//
// Waiting (session_wait.go): waiters queue in the server on the line lock,
// which PostgreSQL grants to waiting sessions in the order they asked. The
// head of the line LISTENs on the semaphore's channel, tries the slots and,
// when none is free, waits for the NOTIFY a releaser sends after freeing
// its slot; notifyFallback bounds a wait for a lost notification.
//
// Extend is a check on the holder's connection that its backend still
// holds the slot's lock; a failed one means the session is gone, and the
// slot with it: ErrLost at once.

// maxSessionLimit bounds the limit of a session-mode semaphore: its slot
// keys and its line lock share one block of 2^16 keys.
const maxSessionLimit = 1<<16 - 1

// lineSlot is the key offset of the line lock in a semaphore's block.
const lineSlot = 1<<16 - 1

// pingDeadline bounds a holder's check: a server that stops answering must
// not keep the holder from learning that its slot may be gone.
const pingDeadline = 30 * time.Second

// lockBase is the first key of a semaphore's block of advisory lock keys.
func (s *Store) lockBase(name string) int64 {
	h := sha256.Sum256([]byte(s.database + "\x00" + s.schema + "\x00" + s.prefix + "\x00" + name))
	return int64(binary.BigEndian.Uint64(h[:8]) & 0x7fff_ffff_ffff_0000)
}

// sessChannel is the NOTIFY channel of a semaphore's releases: a hash, so
// that it fits an identifier whatever the name.
func (s *Store) sessChannel(name string) string {
	h := sha256.Sum256([]byte(s.database + "\x00" + s.schema + "\x00" + s.prefix + "\x00" + name))
	return "coordd_sem_" + hex.EncodeToString(h[:12])
}

// dedicated is one connection of its own for a holder or a waiter.
type dedicated struct {
	conn *pgx.Conn
	pid  int64 // the backend's pid: the session holders report
	// listening is the channel the connection LISTENs on ("" none).
	listening string
	created   time.Time
}

// session is one session-mode holder or waiter: its connection and the
// locks it holds.
type session struct {
	mu    sync.Mutex
	name  string
	owner string
	d     *dedicated
	slot  int // the slot lock held, -1 none
	// line: the connection holds the line lock (it heads the line).
	line bool
	// behind is the back-off of a waiter whose last grant the line refused
	// (0: none).
	behind time.Duration
}

// sessions is what a Store keeps of mode session: free connections,
// holders and waiters by owner token, and each semaphore's mode.
type sessions struct {
	mu      sync.Mutex
	free    []*dedicated
	held    map[string]*session
	waiting map[string]*session
	modes   sync.Map // name -> modeEntry
}

// modeEntry is a semaphore's mode as last read. A lease-mode entry is read
// again after modeTTL, so that a semaphore another host switched to mode
// session is found (the lease path cannot tell it from a full one); a
// session-mode entry is corrected by the session path, which reads the
// mode with every try.
type modeEntry struct {
	mode string
	at   time.Time
}

const modeTTL = 10 * time.Second

// maxFreeDedicated bounds the idle dedicated connections kept for reuse;
// maxDedicatedAge retires old ones.
const (
	maxFreeDedicated = 8
	maxDedicatedAge  = 30 * time.Minute
)

func newSessions() *sessions {
	return &sessions{held: map[string]*session{}, waiting: map[string]*session{}}
}

// mode is name's cached mode, "" when unknown or stale.
func (ss *sessions) mode(name string) string {
	v, ok := ss.modes.Load(name)
	if !ok {
		return ""
	}
	e := v.(modeEntry)
	if e.mode != spec.ModeSession && time.Since(e.at) > modeTTL {
		return ""
	}
	return e.mode
}

func (ss *sessions) setMode(name, mode string) {
	ss.modes.Store(name, modeEntry{mode: mode, at: time.Now()})
}

// holder returns owner's session-mode hold, nil when owner holds none here.
func (ss *sessions) holder(owner string) *session {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.held[owner]
}

// takeWaiter removes and returns owner's waiter state (nil: none).
func (ss *sessions) takeWaiter(owner string) *session {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	w := ss.waiting[owner]
	delete(ss.waiting, owner)
	return w
}

func (ss *sessions) putWaiter(w *session) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.waiting[w.owner] = w
}

// dedicate returns a free dedicated connection, or opens one. A free one
// holds no lock and listens on nothing.
func (s *Store) dedicate(ctx context.Context) (*dedicated, error) {
	ss := s.sess
	ss.mu.Lock()
	for len(ss.free) > 0 {
		d := ss.free[len(ss.free)-1]
		ss.free = ss.free[:len(ss.free)-1]
		if d.conn.IsClosed() || time.Since(d.created) > maxDedicatedAge {
			d.discard()
			continue
		}
		ss.mu.Unlock()
		return d, nil
	}
	ss.mu.Unlock()
	s.pool.CountTrip()
	c, err := pgx.ConnectConfig(ctx, s.listen.cfg.Copy())
	if err != nil {
		return nil, err
	}
	return &dedicated{conn: c, pid: int64(c.PgConn().PID()), created: time.Now()}, nil
}

// undedicate puts d back for reuse: call it only when d holds no lock and
// runs nothing.
func (s *Store) undedicate(d *dedicated) {
	if d.listening != "" || d.conn.IsClosed() {
		d.discard()
		return
	}
	ss := s.sess
	ss.mu.Lock()
	if len(ss.free) < maxFreeDedicated {
		ss.free = append(ss.free, d)
		d = nil
	}
	ss.mu.Unlock()
	if d != nil {
		d.discard()
	}
}

// discard closes the connection: the server ends its session and frees
// every advisory lock it held.
func (d *dedicated) discard() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = d.conn.Close(ctx)
}

// dropSession closes w's connection, which frees every lock it held.
func (w *session) drop() {
	if w.d != nil {
		w.d.discard()
		w.d = nil
	}
	w.slot, w.line = -1, false
}

// closeAll closes every dedicated connection (Close).
func (ss *sessions) closeAll() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for _, d := range ss.free {
		d.discard()
	}
	ss.free = nil
	for owner, h := range ss.held {
		h.drop()
		delete(ss.held, owner)
	}
	for owner, w := range ss.waiting {
		w.drop()
		delete(ss.waiting, owner)
	}
}

// dq renders a statement of this file's family for the dedicated
// connections, which speak pgx directly.
func (s *Store) dq(q string) string { return s.dialect.Text(sqlstore.Query{SQL: q}) }

// dexec runs one statement on a dedicated connection.
func (s *Store) dexec(ctx context.Context, d *dedicated, q string, args ...any) (int64, error) {
	s.pool.CountTrip()
	tag, err := d.conn.Exec(ctx, s.dq(q), args...)
	return tag.RowsAffected(), err
}

// drow runs one single-row query on a dedicated connection; pgx.ErrNoRows
// is returned as is.
func (s *Store) drow(ctx context.Context, d *dedicated, q string, args []any, dest ...any) error {
	s.pool.CountTrip()
	return d.conn.QueryRow(ctx, s.dq(q), args...).Scan(dest...)
}

// qSessMode reads a semaphore's mode (isSessionMode).
const qSessMode = `SELECT mode FROM {p}semaphores WHERE name = ?`

// isSessionMode reports whether name is in mode session, from the cache or,
// on a miss, from the row (false when absent).
func (s *Store) isSessionMode(ctx context.Context, name string) (bool, error) {
	if m := s.sess.mode(name); m != "" {
		return m == spec.ModeSession, nil
	}
	ok, err := s.pool.HasSchema(ctx)
	if err != nil || !ok {
		return false, err
	}
	var mode string
	s.pool.CountTrip()
	err = s.db.QueryRowContext(ctx, s.dq(qSessMode), name).Scan(&mode)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	s.sess.setMode(name, mode)
	return mode == spec.ModeSession, nil
}
