package mysql

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// Session-mode semaphores: seed 000's GET_LOCK slots.
//
// Slot i of a semaphore is the named lock slotLock(name, i), held by the
// holder's dedicated connection (park.go). MySQL frees a named lock when the
// session that holds it ends, so a holder whose process or connection dies
// frees its slot at once, with no lease to run out. Lock names are
// server-wide and at most 64 characters, so they hash the database, the
// table prefix and the semaphore name: "coordd:" + 40 hex digits + ":" + i
// (":wait" and ":check" for the two helper locks).
//
// Acquire is two round trips on the holder's connection. qSessTry reads the
// semaphore row under a shared lock, so a concurrent limit change waits for
// it, and, when the limit it was built for still holds, tries the slot
// locks in one CASE whose first successful GET_LOCK(…, 0) ends it. Then
// qSessGrant, one UPDATE of the semaphore row, bumps the fencing counter and
// records who holds the slot (host, pid, fencing, the connection id) in the
// row's session_holders. Because it runs on the holder's connection, a
// holder whose session died in between cannot finish: no later holder of
// its slot can have a lower number. Release is one RELEASE_LOCK.
//
// The limit: session_slots (the number of slot names that may be held) is
// max(lim, highest held slot + 1). While it equals lim, every holder holds a
// slot below lim, so a free slot below lim is room. When a limit is lowered
// below the holders, session_slots stays above lim until they release;
// meanwhile acquirers serialise on the check lock and count the held slots
// first (acquireDraining), and the first to find none above lim lowers
// session_slots again.
//
// Waiting, for limit 1: the waiter blocks inside GET_LOCK(slot 0, T), in
// the server, which queues the waiters; nobody polls. For limit N >= 2:
//
//   - wake: poll (seed 000's polling variant): a waiter first takes the
//     wait lock, blocking inside GET_LOCK, so only one waiter polls the
//     slots; it releases the wait lock when it gets a slot. Which blocked
//     waiter gets the wait lock next is up to the server (not FIFO).
//   - wake: kill (seed 000's SLEEP/KILL wake-up): a waiter takes the check
//     lock, tries the slots, and when none is free parks in
//     SELECT '<tag>', RELEASE_LOCK(check), SLEEP(d): the release and the
//     sleep start in one statement. A releaser takes the check lock, frees
//     its slot and KILL QUERYs the parked waiter with the lowest ticket (its
//     place in line), then releases the check lock. Holding
//     the check lock, the releaser sees every waiter either parked (visible
//     in the processlist) or not yet past its try (which then finds the free
//     slot), so no wake-up is lost. A releaser that dies before its KILL
//     leaves the waiters to their SLEEP's end (at most sessionSleepMax) or to
//     the repair pass (RepairWakeups), which wakes a parked waiter of
//     every semaphore that has a free slot.
//
// The line: waiters registered with EnterWait are served first come, first
// served, as in mode lease (sem_park.go). A slot lock is taken wherever a
// waiter or newcomer finds one free, but the grant (qSessGrant) records the
// holder only when no live waiter is ahead of it; otherwise grantInLine,
// holding the check lock, counts the free slots (IS_USED_LOCK) and records
// it only while fewer waiters are ahead than slots were free, and else
// gives the slot lock back (waking a parked waiter with wake kill, since a
// waiter may have parked meanwhile) and refuses with ErrNoSlot. A waiter so
// refused backs off (pollMin doubling to pollMax) before it takes a slot
// lock again, so that a waiter ahead that is slow, or crashed and not yet
// expired, does not make it spin. Parked waiters (wake kill) carry their
// ticket in line, so each release wakes the first of the line. With limit 1
// the server queues the waiters blocked in GET_LOCK and grants the lock in
// its queue's order; a waiter that gets it out of turn gives it back to
// the next one queued.
//
// Extend is a ping of the holder's connection: the slot is still ours
// while IS_USED_LOCK(slot) = CONNECTION_ID(). A failed ping means the
// session is gone, and with it the slot: ErrLost at once.

// sessionSleepMax bounds a parked waiter's SLEEP and a blocking GET_LOCK:
// the longest a lost wake-up can delay a waiter.
const sessionSleepMax = 10 * time.Second

// helperLockWait bounds a wait for the check lock, which is only ever held
// for a statement or two.
const helperLockWait = 5 * time.Second

// noDeadline runs a short statement on a dedicated connection without a
// deadline of its own (as the statement pool runs the caller's): a context
// with a deadline makes the driver watch each statement from a second
// goroutine, which costs more than the statement on a busy host. ctx's end
// still interrupts it (interruptible). Statements that block on purpose, and
// the holder's ping, have deadlines.
const noDeadline = 0

// pingDeadline bounds a holder's ping: a server that stops answering must
// not keep the holder from learning that its slot may be gone.
const pingDeadline = 30 * time.Second

// caseChunk is how many slot locks one CASE tries.
const caseChunk = 128

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
	// itself, so the statement means the same whether the
	// server assigns left to right (MySQL, MariaDB) or simultaneously
	// (MariaDB's SIMULTANEOUS_ASSIGNMENT). No row: the semaphore is gone.
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

	// qSessPing checks that the connection still holds its slot lock.
	qSessPing = "SELECT IS_USED_LOCK(?) = CONNECTION_ID(), " + nowSQL

	// qSessRelease frees a slot lock: 1 released, 0 held by another
	// session, NULL not held.
	qSessRelease = "SELECT RELEASE_LOCK(?)"

	// qSessReleaseWake takes the check lock and frees the slot, in this
	// order, before the releaser wakes a parked waiter.
	qSessReleaseWake = "SELECT GET_LOCK(?, ?), RELEASE_LOCK(?)"

	// qSessReleaseAll frees every named lock of the session (a waiter that
	// gives up).
	qSessReleaseAll = "SELECT RELEASE_ALL_LOCKS()"

	// qSessGetLock takes a named lock, waiting up to a timeout in seconds
	// (never negative: MariaDB refuses negative timeouts).
	qSessGetLock = "SELECT GET_LOCK(?, ?)"

	// qSessParkBody is a parked waiter's statement after its tag: release
	// the check lock and sleep, in one statement.
	qSessParkBody = "RELEASE_LOCK(?), SLEEP(?)"

	// qSessShrink lowers session_slots to the limit once no holder remains
	// above it, only if neither changed meanwhile.
	qSessShrink = "UPDATE `{p}semaphores` SET session_slots = lim WHERE name = ? AND lim = ? AND session_slots = ?"

	// qSessSetSlots stores session_slots (PutSemaphore).
	qSessSetSlots = "UPDATE `{p}semaphores` SET session_slots = ? WHERE name = ?"

	// qSessRecords reads the holder records of a semaphore.
	qSessRecords = "SELECT session_holders FROM `{p}semaphores` WHERE name = ?"

	// qSessSlotsOf reads session_slots and lim of one semaphore.
	qSessSlotsOf = "SELECT lim, session_slots FROM `{p}semaphores` WHERE name = ?"
)

// lockBase is the hashed name of a semaphore's locks, without the suffix.
func (s *Store) lockBase(name string) string {
	h := sha256.Sum256([]byte(s.dbName + "\x00" + s.prefix + "\x00" + name))
	return "coordd:" + hex.EncodeToString(h[:20])
}

func (s *Store) slotLock(name string, i int) string { return s.lockBase(name) + ":" + strconv.Itoa(i) }
func (s *Store) waitLock(name string) string        { return s.lockBase(name) + ":wait" }
func (s *Store) checkLock(name string) string       { return s.lockBase(name) + ":check" }

// session is one session-mode holder or waiter: its dedicated connection
// and the named locks it holds.
type session struct {
	mu    sync.Mutex
	name  string
	owner string
	d     *dedicated
	slot  int // the slot lock held, -1 none
	// waitLock: the connection holds the wait lock (wake: poll).
	waitLock bool
	// behind is the back-off of a waiter whose last grant the line refused
	// (0: none).
	behind time.Duration
	// wake and limit as read at the last try: Release wakes waiters only
	// with wake kill and a limit above 1.
	wake  string
	limit int
}

// modeInfo is what the store remembers of a semaphore between calls, as
// read by its last acquire: it picks the path of the next one, and how a
// waiter waits.
type modeInfo struct {
	mode  string
	limit int
	slots int // session_slots
	wake  string
}

func (ss *sessions) info(name string) modeInfo {
	if v, ok := ss.modes.Load(name); ok {
		return v.(modeInfo)
	}
	return modeInfo{}
}

func (ss *sessions) isSession(name string) bool { return ss.info(name).mode == spec.ModeSession }

func (ss *sessions) setMode(name, mode string) {
	i := ss.info(name)
	i.mode = mode
	ss.modes.Store(name, i)
}

func (ss *sessions) remember(r sessionTry, name string) {
	ss.modes.Store(name, modeInfo{mode: r.mode, limit: r.limit, slots: r.slots, wake: r.wake})
}

// qSessMode reads what modeInfo caches.
const qSessMode = "SELECT mode, lim, session_slots, wake FROM `{p}semaphores` WHERE name = ?"

// isSessionMode reports whether name is in mode session, from the cache or,
// on a miss, from the semaphore row (false when absent).
func (s *Store) isSessionMode(ctx context.Context, name string) (bool, error) {
	if i := s.sess.info(name); i.mode != "" {
		return i.mode == spec.ModeSession, nil
	}
	ok, err := s.hasSchema(ctx)
	if err != nil || !ok {
		return false, err
	}
	var i modeInfo
	err = s.on(nil).row(ctx, qSessMode, name).Scan(&i.mode, &i.limit, &i.slots, &i.wake)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	s.sess.modes.Store(name, i)
	return i.mode == spec.ModeSession, nil
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

// sessionTry is the outcome of one qSessTry.
type sessionTry struct {
	connID   int64
	mode     string
	limit    int
	slots    int // session_slots
	wake     string
	now      int64
	slot     int  // taken slot, -1 none
	tried    bool // the CASE ran
	notFound bool
}

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
	s.trips.Add(1)
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
	s.trips.Add(1)
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

// dexec and dint run one statement on a dedicated connection, interrupted
// (not disconnected) when ctx ends.
func (s *Store) dexec(ctx context.Context, d *dedicated, query string, args ...any) (sql.Result, error) {
	s.trips.Add(1)
	var res sql.Result
	err := s.interruptible(ctx, d, noDeadline, func(rctx context.Context) error {
		var err error
		res, err = d.conn.ExecContext(rctx, s.q(query), args...)
		return err
	})
	return res, err
}

func (s *Store) dint(ctx context.Context, d *dedicated, limit time.Duration, query string, args ...any) (sql.NullInt64, error) {
	s.trips.Add(1)
	var v sql.NullInt64
	err := s.interruptible(ctx, d, limit, func(rctx context.Context) error {
		return d.conn.QueryRowContext(rctx, query, args...).Scan(&v)
	})
	return v, err
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
	used, err := s.usedSlots(ctx, conn{s: s}, w.d, w.name, limit)
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
		used, err = s.usedSlots(ctx, conn{s: s}, w.d, w.name, max(r.slots, r.limit))
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

// usedSlots lists the slots in [0, n) whose lock is held by anyone, with
// IS_USED_LOCK, in statements of up to inChunk locks. It runs on d when d
// is not nil, else through c.
func (s *Store) usedSlots(ctx context.Context, c conn, d *dedicated, name string, n int) ([]int, error) {
	ids, err := s.slotHolders(ctx, c, d, name, n)
	if err != nil {
		return nil, err
	}
	var used []int
	for i, id := range ids {
		if id.Valid {
			used = append(used, i)
		}
	}
	return used, nil
}

// slotHolders returns, for each slot in [0, n), the connection id holding
// its lock (NULL: free).
func (s *Store) slotHolders(ctx context.Context, c conn, d *dedicated, name string, n int) ([]sql.NullInt64, error) {
	out := make([]sql.NullInt64, 0, n)
	for from := 0; from < n; from += inChunk {
		to := min(n, from+inChunk)
		var b strings.Builder
		b.WriteString("SELECT ")
		args := make([]any, 0, to-from)
		dest := make([]any, 0, to-from)
		vals := make([]sql.NullInt64, to-from)
		for i := from; i < to; i++ {
			if i > from {
				b.WriteString(", ")
			}
			b.WriteString("IS_USED_LOCK(?)")
			args = append(args, s.slotLock(name, i))
			dest = append(dest, &vals[i-from])
		}
		var err error
		if d != nil {
			s.trips.Add(1)
			err = s.interruptible(ctx, d, noDeadline, func(rctx context.Context) error {
				return d.conn.QueryRowContext(rctx, b.String(), args...).Scan(dest...)
			})
		} else {
			err = c.row(ctx, b.String(), args...).Scan(dest...)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, vals...)
	}
	return out, nil
}

// releaseSlot frees w's slot lock (ErrLost when the connection no longer
// held it).
func (s *Store) releaseSlot(ctx context.Context, w *session) error {
	v, err := s.dint(ctx, w.d, noDeadline, qSessRelease, s.slotLock(w.name, w.slot))
	if err != nil {
		return err
	}
	w.slot = -1
	if v.Int64 != 1 {
		return backends.ErrLost
	}
	return nil
}

// dropSession closes s's connection, which frees every lock it held.
func (s *Store) dropSession(w *session) {
	if w.d != nil {
		w.d.discard()
		w.d = nil
	}
	w.slot, w.waitLock = -1, false
}

// sessionExtend pings the holder's connection: the slot is still held while
// the connection holds its lock. The lease only says when the holder must
// ping again.
func (s *Store) sessionExtend(ctx context.Context, h *session, lease time.Duration) (time.Time, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.d == nil || h.slot < 0 {
		return time.Time{}, fmt.Errorf("extend %q: %w", h.name, backends.ErrLost)
	}
	var ok sql.NullBool
	var now int64
	var err error
	// A KILL QUERY meant for a statement this connection ran while it was
	// parked (a waker that read the processlist just before the park ended;
	// possible on MySQL, which has no KILL QUERY ID) can end the ping. It
	// frees no lock, so the ping is simply sent again.
	for try := 0; try < 3; try++ {
		s.trips.Add(1)
		err = s.interruptible(ctx, h.d, pingDeadline, func(rctx context.Context) error {
			return h.d.conn.QueryRowContext(rctx, qSessPing, s.slotLock(h.name, h.slot)).Scan(&ok, &now)
		})
		if !errors.Is(err, errInterruptedStmt) {
			break
		}
	}
	if ctx.Err() != nil {
		return time.Time{}, fmt.Errorf("extend %q: %w", h.name, ctx.Err())
	}
	if err != nil || !ok.Bool {
		// The session is gone (and the slot with it), or the lock is not
		// ours: either way this hold is over.
		s.forget(h)
		cause := "the slot lock is held by another session"
		if err != nil {
			cause = "connection lost: " + err.Error()
		}
		return time.Time{}, fmt.Errorf("extend %q: %s: %w", h.name, cause, backends.ErrLost)
	}
	return fromMicros(now + lease.Microseconds()), nil
}

// forget drops a hold whose session is gone.
func (s *Store) forget(h *session) {
	s.sess.mu.Lock()
	if s.sess.held[h.owner] == h {
		delete(s.sess.held, h.owner)
	}
	s.sess.mu.Unlock()
	s.dropSession(h)
}

// sessionRelease frees the holder's slot lock and returns its connection.
// With wake kill and a limit above 1 it wakes the oldest parked waiter,
// holding the check lock (see the package comment above).
func (s *Store) sessionRelease(ctx context.Context, h *session) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	s.sess.mu.Lock()
	if s.sess.held[h.owner] == h {
		delete(s.sess.held, h.owner)
	}
	s.sess.mu.Unlock()
	if h.d == nil || h.slot < 0 {
		return fmt.Errorf("release %q: %w", h.name, backends.ErrLost)
	}
	slot := s.slotLock(h.name, h.slot)
	var released sql.NullInt64
	var err error
	if h.wake == spec.WakeKill && h.limit > 1 {
		check := s.checkLock(h.name)
		var got sql.NullInt64
		s.trips.Add(1)
		err = s.interruptible(ctx, h.d, helperLockWait+time.Minute, func(rctx context.Context) error {
			return h.d.conn.QueryRowContext(rctx, qSessReleaseWake, check, sleepSeconds(helperLockWait), slot).Scan(&got, &released)
		})
		if err == nil && got.Int64 == 1 {
			// A failed wake-up leaves the waiter to its SLEEP's end.
			_, _ = s.wakeParked(ctx, s.channel("semaphore", h.name), 1)
			_, err = s.dint(ctx, h.d, noDeadline, qSessRelease, check)
		}
	} else {
		released, err = s.dint(ctx, h.d, noDeadline, qSessRelease, slot)
	}
	h.slot = -1
	if err != nil {
		s.dropSession(h)
		return fmt.Errorf("release %q: %w", h.name, err)
	}
	s.undedicate(h.d)
	h.d = nil
	if released.Int64 != 1 {
		return fmt.Errorf("release %q: the slot lock was no longer held: %w", h.name, backends.ErrLost)
	}
	return nil
}

// sessionWait blocks owner until a slot of a session-mode semaphore may be
// free, maxWait elapsed or ctx ended; it may take the slot already (see the
// package comment), which owner's next TryAcquire completes. The wait's
// connection and locks stay with owner until its TryAcquire succeeds or
// LeaveWait.
func (s *Store) sessionWait(ctx context.Context, name, owner string, maxWait time.Duration) error {
	w := s.sess.takeWaiter(owner)
	if w != nil && w.name != name {
		s.dropSession(w)
		w = nil
	}
	if w == nil {
		w = &session{name: name, owner: owner, slot: -1}
	}
	defer s.sess.putWaiter(w)
	if w.d == nil {
		d, err := s.dedicate(ctx)
		if err != nil {
			return s.waitErr(ctx, name, err)
		}
		w.d = d
	}
	if err := s.sessionWaitOn(ctx, w, maxWait); err != nil {
		if ctx.Err() == nil {
			s.dropSession(w)
		}
		return s.waitErr(ctx, name, err)
	}
	return ctx.Err()
}

func (s *Store) sessionWaitOn(ctx context.Context, w *session, maxWait time.Duration) error {
	if w.slot >= 0 {
		return nil
	}
	if w.behind > 0 {
		// The line refused the last grant: let the waiters ahead take
		// their slots before taking one again.
		return sleepCtx(ctx, min(w.behind, maxWait))
	}
	deadline := time.Now().Add(maxWait)
	block := min(maxWait, sessionSleepMax)
	info := s.sess.info(w.name)
	switch {
	case info.limit == 0 || info.slots > info.limit:
		// Deleted, replaced or draining after a lower limit: nothing to
		// block on until holders leave; look again after a short while.
		return sleepCtx(ctx, min(block, pollMax))

	case info.limit == 1:
		// Limit 1: a plain GET_LOCK that waits in the server.
		got, err := s.dint(ctx, w.d, block+time.Minute, qSessGetLock, s.slotLock(w.name, 0), sleepSeconds(block))
		if err == nil && got.Int64 == 1 {
			w.slot = 0
		}
		return err

	case info.wake == spec.WakeKill:
		check := s.checkLock(w.name)
		got, err := s.dint(ctx, w.d, block+time.Minute, qSessGetLock, check, sleepSeconds(block))
		if err != nil || got.Int64 != 1 {
			return err
		}
		r, err := s.takeSlot(ctx, w.d, w.name)
		if err != nil {
			return err
		}
		if r.slot >= 0 || !r.tried || r.notFound || r.mode != spec.ModeSession {
			w.slot = r.slot
			_, err := s.dint(ctx, w.d, noDeadline, qSessRelease, check)
			return err
		}
		sleep := min(max(time.Until(deadline), 0), sessionSleepMax)
		// The ticket in line orders parked waiters: the first is woken first.
		return s.park(ctx, w.d, parkTag(s.channel("semaphore", w.name), s.sess.ticket(w.name, w.owner)), qSessParkBody, sleep, check, sleepSeconds(sleep))

	default:
		// wake poll: only the holder of the wait lock polls.
		if !w.waitLock {
			got, err := s.dint(ctx, w.d, block+time.Minute, qSessGetLock, s.waitLock(w.name), sleepSeconds(block))
			if err != nil || got.Int64 != 1 {
				return err
			}
			w.waitLock = true
		}
		for backoff := pollMin; ; backoff = min(2*backoff, pollMax) {
			r, err := s.takeSlot(ctx, w.d, w.name)
			if err != nil {
				return err
			}
			if r.slot >= 0 || !r.tried || r.notFound || r.mode != spec.ModeSession || r.wake != spec.WakePoll {
				w.slot = r.slot
				if w.slot >= 0 {
					if _, err := s.dint(ctx, w.d, noDeadline, qSessRelease, s.waitLock(w.name)); err != nil {
						return err
					}
					w.waitLock = false
				}
				return nil
			}
			left := time.Until(deadline)
			if left <= 0 {
				return nil
			}
			if err := sleepCtx(ctx, min(backoff, left)); err != nil {
				return nil
			}
		}
	}
}

// sleepCtx sleeps d or until ctx ends (its error).
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Poll backoff of the wait-lock holder (wake poll).
const (
	pollMin = 10 * time.Millisecond
	pollMax = 250 * time.Millisecond
)

// sessionEnter registers owner's wait on a session-mode semaphore: its
// connection is taken at the first try or wait.
func (s *Store) sessionEnter(name, owner string) {
	s.sess.mu.Lock()
	defer s.sess.mu.Unlock()
	if _, ok := s.sess.waiting[owner]; !ok {
		s.sess.waiting[owner] = &session{name: name, owner: owner, slot: -1}
	}
}

// sessionLeave releases what owner's wait holds (the wait lock, or a slot
// taken while waiting that TryAcquire never completed).
func (s *Store) sessionLeave(ctx context.Context, owner string) {
	w := s.sess.takeWaiter(owner)
	if w == nil || w.d == nil {
		return
	}
	if w.slot < 0 && !w.waitLock {
		s.undedicate(w.d)
		return
	}
	if _, err := s.dint(ctx, w.d, noDeadline, qSessReleaseAll); err != nil {
		s.dropSession(w)
		return
	}
	s.undedicate(w.d)
}

// sessionState adds a semaphore's session holders (slots in [0,
// session_slots) whose lock is held) to st, through c, and returns the
// session_slots value a consistent semaphore has: max(limit, highest held
// slot + 1).
func (s *Store) sessionState(ctx context.Context, c conn, st *backends.SemaphoreState, stored int) (int, error) {
	name := st.Config.Name
	ids, err := s.slotHolders(ctx, c, nil, name, stored)
	if err != nil {
		return 0, err
	}
	var doc sql.NullString
	if err := c.row(ctx, qSessRecords, name).Scan(&doc); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, err
	}
	type record struct {
		Fencing int64  `json:"fencing"`
		Conn    int64  `json:"conn"`
		Owner   string `json:"owner"`
		Host    string `json:"host"`
		PID     int    `json:"pid"`
		At      int64  `json:"at"`
	}
	recs := map[string]record{}
	if doc.Valid {
		if err := json.Unmarshal([]byte(doc.String), &recs); err != nil {
			return 0, fmt.Errorf("session_holders of %q: %w", name, err)
		}
	}
	want := st.Config.Limit
	for i, id := range ids {
		if !id.Valid {
			continue
		}
		h := backends.Holder{Slot: i, Host: "?", Session: id.Int64}
		if r, ok := recs[strconv.Itoa(i)]; ok && r.Conn == id.Int64 {
			h = backends.Holder{Slot: i, Owner: r.Owner, Host: r.Host, PID: r.PID, Fencing: r.Fencing, AcquiredAt: fromMicros(r.At), Session: id.Int64}
		}
		st.Holders = append(st.Holders, h)
		want = max(want, i+1)
	}
	return want, nil
}

// repairSessionSlots sets session_slots to max(limit, highest held slot +
// 1) for mode session, and to the highest held slot + 1 (0 when none) for a
// semaphore that left mode session while holders remained. Run it holding
// the semaphore row lock.
func (s *Store) repairSessionSlots(ctx context.Context, c conn, name, mode string, limit int) error {
	var lim, stored int
	if err := c.row(ctx, qSessSlotsOf, name).Scan(&lim, &stored); err != nil {
		return err
	}
	if stored == 0 && mode != spec.ModeSession {
		return nil
	}
	want, n := 0, stored
	if mode == spec.ModeSession {
		want, n = limit, max(stored, limit)
	}
	used, err := s.usedSlots(ctx, c, nil, name, n)
	if err != nil {
		return err
	}
	for _, u := range used {
		want = max(want, u+1)
	}
	if want != stored {
		_, err = c.exec(ctx, qSessSetSlots, want, name)
	}
	return err
}

// RepairWakeups is the repair pass of parked waiters
// (backends.WakeRepairer): for each named semaphore in mode lease, or in
// mode session with wake kill, that has free slots, it wakes its first
// parked waiters in line, one per free slot. A releaser that died between
// freeing its slot and its KILL, or a session holder whose connection died
// (MySQL frees the slot, and nobody sends a KILL), leaves waiters parked
// until their SLEEP ends; the semaphore package runs this pass when a
// caller starts waiting, and the daemon's leader at start-up and then
// periodically. With nobody parked it costs one processlist query.
func (s *Store) RepairWakeups(ctx context.Context, names []string) (int, error) {
	ok, err := s.hasSchema(ctx)
	if err != nil || !ok {
		return 0, err
	}
	parked, err := s.parkedChannels(ctx)
	if err != nil || len(parked) == 0 {
		return 0, err
	}
	woken := 0
	for _, name := range names {
		if _, _, ok := backends.SplitInstance(name); ok {
			n, err := s.repairInstance(ctx, name, parked)
			woken += n
			if err != nil {
				return woken, err
			}
			continue
		}
		ch := s.channel("semaphore", name)
		if !parked[ch] {
			continue
		}
		var lim, stored int
		var mode, wake string
		err := s.on(nil).row(ctx, qSessMode, name).Scan(&mode, &lim, &stored, &wake)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return woken, err
		}
		var held int
		switch {
		case mode != spec.ModeSession:
			// Lease mode: a parked waiter checks its turn itself.
			err = s.on(nil).row(ctx, qSemLiveHolders, name).Scan(&held)
		case wake == spec.WakeKill:
			var used []int
			used, err = s.usedSlots(ctx, s.on(nil), nil, name, max(stored, lim))
			held = len(used)
		default:
			continue
		}
		if err != nil {
			return woken, err
		}
		if held >= lim {
			continue
		}
		n, err := s.wakeParked(ctx, ch, lim-held)
		woken += n
		if err != nil {
			return woken, err
		}
	}
	return woken, nil
}
