package mysql

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/coordd/coordd/spec"
)

// Session-mode semaphores: slots that are GET_LOCK named locks. This file
// holds what the phases share (lock names, the sessions a store keeps, the
// statements on a dedicated connection); session_acquire.go,
// session_wait.go, session_release.go and session_repair.go the phases.
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
//   - wake: poll (the polling variant): a waiter first takes the
//     wait lock, blocking inside GET_LOCK, so only one waiter polls the
//     slots; it releases the wait lock when it gets a slot. Which blocked
//     waiter gets the wait lock next is up to the server (not FIFO).
//   - wake: kill (the SLEEP/KILL wake-up): a waiter takes the check
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
	// qSessRelease frees a slot lock: 1 released, 0 held by another
	// session, NULL not held.
	qSessRelease = "SELECT RELEASE_LOCK(?)"

	// qSessGetLock takes a named lock, waiting up to a timeout in seconds
	// (never negative: MariaDB refuses negative timeouts).
	qSessGetLock = "SELECT GET_LOCK(?, ?)"
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
	err = s.on(nil).QueryRow(ctx, qSessMode, name).Scan(&i.mode, &i.limit, &i.slots, &i.wake)
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

// dexec and dint run one statement on a dedicated connection, interrupted
// (not disconnected) when ctx ends.
func (s *Store) dexec(ctx context.Context, d *dedicated, query string, args ...any) (sql.Result, error) {
	s.pool.CountTrip()
	var res sql.Result
	err := s.interruptible(ctx, d, noDeadline, func(rctx context.Context) error {
		var err error
		res, err = d.conn.ExecContext(rctx, s.q(query), args...)
		return err
	})
	return res, err
}

func (s *Store) dint(ctx context.Context, d *dedicated, limit time.Duration, query string, args ...any) (sql.NullInt64, error) {
	s.pool.CountTrip()
	var v sql.NullInt64
	err := s.interruptible(ctx, d, limit, func(rctx context.Context) error {
		return d.conn.QueryRowContext(rctx, query, args...).Scan(&v)
	})
	return v, err
}

// dropSession closes s's connection, which frees every lock it held.
func (s *Store) dropSession(w *session) {
	if w.d != nil {
		w.d.discard()
		w.d = nil
	}
	w.slot, w.waitLock = -1, false
}
