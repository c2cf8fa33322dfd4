package mysql

import (
	"context"
	"crypto/sha256"
	"database/sql"
	sqldriver "database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	driver "github.com/go-sql-driver/mysql"

	"github.com/coordd/coordd/backends"
	mysqldsn "github.com/coordd/coordd/backends/mysql/dsn"
)

// Dedicated connections and parking: the MySQL semaphore design's wake-up,
// a waiter in SLEEP woken by KILL QUERY.
//
// Some work must stay on one connection for longer than a statement: a
// GET_LOCK slot belongs to the session that took it, and a parked waiter
// sleeps inside a statement until somebody kills it. Such work takes a
// dedicated connection from a pool of its own (sessions), never one from
// the statement pool, where the next user of the connection would inherit
// the lock and where the pool's own housekeeping would close it and drop
// the lock. There is no bound on how many are open: each is one holder, one
// waiter or one idle worker, and bounding them would make waiters wait for
// each other's connections.
//
// A parked connection runs one statement whose first column is its tag:
//
//	SELECT 'coordd-park:<channel>:<ticket>', ..., SLEEP(d)
//
// The channel names what it waits for (a semaphore, a queue) as a hash of
// the database, the table prefix, the kind and the name, since processlists
// are server-wide. The ticket is a 20-digit number, so that sorting the
// statements' text sorts them by ticket: the oldest waiter first. A waker
// reads information_schema.processlist and KILL QUERYs the first parked
// statement of the channel; SLEEP then ends at once (error 1317), and the
// connection lives on. Nobody polls: an idle waiter costs one statement per
// park, and d bounds how long a lost wake-up (a waker that died between its
// change and its KILL) can delay it.
//
// Seeing other connections in the processlist and killing their statements
// needs no privilege when every host connects as the same MySQL user. With
// different users it needs PROCESS (to see them) and CONNECTION ADMIN on
// MariaDB 10.5+ or MySQL 8 (SUPER on older servers) to kill them. Without
// them a waker finds nobody or gets error 1095, and waiters wake when their
// SLEEP ends: a bounded poll.

// parkPrefix starts every parked statement's tag.
const parkPrefix = "coordd-park:"

// qParked lists the connections parked on one channel, oldest ticket first,
// with the id of the statement each runs (0 on MySQL, which has none). The
// argument is the LIKE pattern "SELECT 'coordd-park:<channel>:%"; the scan's
// own text starts differently, so it never matches itself.
const (
	qParked = `SELECT id, 0 FROM information_schema.processlist
WHERE command = 'Query' AND info LIKE ? ORDER BY info LIMIT ?`
	qParkedMariaDB = `SELECT id, query_id FROM information_schema.processlist
WHERE command = 'Query' AND info LIKE ? ORDER BY info LIMIT ?`
)

// qKillQuery ends the statement running on a connection (a parked SLEEP),
// leaving the connection open. qKillQueryID (MariaDB) ends one statement by
// its id: a waker whose parked statement ended meanwhile cannot hit the
// connection's next statement by mistake, as KILL QUERY of the connection
// can on MySQL (where such a spurious interruption is retried).
const (
	qKillQuery   = `KILL QUERY ?`
	qKillQueryID = `KILL QUERY ID ?`
)

// qConnID reads the connection's processlist id.
const qConnID = `SELECT CONNECTION_ID()`

// ErrKillDenied is returned by a wake-up that found a parked waiter but may
// not kill it (error 1095, or 1979 for KILL QUERY ID on MariaDB: another
// user's connection without CONNECTION ADMIN or SUPER). The waiter wakes at
// the end of its SLEEP instead.
var ErrKillDenied = errors.New("KILL QUERY denied: waiters wake at the end of their SLEEP")

// parkRef is the form of a semaphore reference that park channels hash
// (channel) and waiter tickets are keyed by: the name, or for an instance
// the name, a unit separator and the key (a separator that neither may
// hold: spec.CheckKey). Every coordd version hashes this same form, so that
// one wakes the waiters another parked: it must never change.
func parkRef(r backends.SemRef) string {
	if r.IsInstance() {
		return r.Name + "\x1f" + r.Key
	}
	return r.Name
}

// channel names what parked connections wait for, unique per database,
// prefix, kind and name, in 24 hex digits.
func (s *Store) channel(kind, name string) string {
	h := sha256.Sum256([]byte(s.dbName + "\x00" + s.prefix + "\x00" + kind + "\x00" + name))
	return hex.EncodeToString(h[:12])
}

// parkTag is the first column of a parked statement.
func parkTag(channel string, ticket int64) string {
	return fmt.Sprintf("%s%s:%020d", parkPrefix, channel, max(ticket, 0))
}

// parkPattern matches the text of the statements parked on channel, as the
// driver sends them (parameters interpolated, strings single-quoted).
func parkPattern(channel string) string {
	return "SELECT '" + parkPrefix + channel + ":%"
}

// dedicated is one connection out of the session pool.
type dedicated struct {
	conn    *sql.Conn
	id      int64     // CONNECTION_ID()
	created time.Time // monotonic
	idle    time.Time // when it was last put back
}

// sessions is the pool of dedicated connections. database/sql's pooling is
// not used for them: a dedicated connection is checked out of sql.DB for its
// whole life, and sessions keeps the free ones with their ids, so reusing
// one costs no round trip.
type sessions struct {
	db   *sql.DB
	pool mysqldsn.Pool

	mu   sync.Mutex
	free []*dedicated
	// held and waiting are the session-mode holders and waiters by owner
	// token (session.go).
	held    map[string]*session
	waiting map[string]*session
	// modes caches each semaphore's mode and limit (session.go).
	modes sync.Map
	// tickets maps a semaphore and a waiter this store registered to its
	// ticket in line, which orders parked waiters (sem_park.go).
	tickets sync.Map
}

// maxFreeDedicated bounds the idle dedicated connections kept for reuse.
const maxFreeDedicated = 8

func newSessions(db *sql.DB, pool mysqldsn.Pool) *sessions {
	db.SetMaxIdleConns(0) // sessions keeps its own free list
	db.SetConnMaxLifetime(0)
	return &sessions{db: db, pool: pool, held: map[string]*session{}, waiting: map[string]*session{}}
}

// dedicate returns a free dedicated connection that is still alive, or
// opens one.
func (s *Store) dedicate(ctx context.Context) (*dedicated, error) {
	ss := s.sess
	ss.mu.Lock()
	for len(ss.free) > 0 {
		d := ss.free[len(ss.free)-1]
		ss.free = ss.free[:len(ss.free)-1]
		if ss.pool.ConnMaxIdleTime > 0 && time.Since(d.idle) > ss.pool.ConnMaxIdleTime {
			_ = d.conn.Close()
			continue
		}
		ss.mu.Unlock()
		if alive(ctx, d) {
			return d, nil
		}
		d.discard()
		ss.mu.Lock()
	}
	ss.mu.Unlock()
	c, err := ss.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	d := &dedicated{conn: c, created: time.Now()}
	s.pool.CountTrip()
	if err := c.QueryRowContext(ctx, qConnID).Scan(&d.id); err != nil {
		d.discard()
		return nil, err
	}
	return d, nil
}

// alive checks, without a round trip, that a free connection was not closed
// by the server while it sat unused (a restart, wait_timeout): the driver's
// session reset reads the socket without blocking, as database/sql does
// for connections it hands out.
func alive(ctx context.Context, d *dedicated) bool {
	err := d.conn.Raw(func(dc any) error {
		if r, ok := dc.(sqldriver.SessionResetter); ok {
			return r.ResetSession(ctx)
		}
		return nil
	})
	return err == nil
}

// undedicate puts d back for reuse. Call it only when d holds no named lock
// and runs nothing; otherwise discard it.
func (s *Store) undedicate(d *dedicated) {
	ss := s.sess
	if ss.pool.ConnMaxLifetime > 0 && time.Since(d.created) > ss.pool.ConnMaxLifetime {
		_ = d.conn.Close()
		return
	}
	d.idle = time.Now()
	ss.mu.Lock()
	if len(ss.free) < maxFreeDedicated {
		ss.free = append(ss.free, d)
		d = nil
	}
	ss.mu.Unlock()
	if d != nil {
		_ = d.conn.Close()
	}
}

// discard closes the connection for good: the server ends its session and
// frees every named lock it held.
func (d *dedicated) discard() {
	_ = d.conn.Raw(func(any) error { return sqldriver.ErrBadConn })
	_ = d.conn.Close()
}

// closeAll closes the free connections and those of holders and waiters
// (Close).
func (ss *sessions) closeAll() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for _, d := range ss.free {
		_ = d.conn.Close()
	}
	ss.free = nil
	for owner, h := range ss.held {
		h.d.discard()
		delete(ss.held, owner)
	}
	for owner, w := range ss.waiting {
		if w.d != nil {
			w.d.discard()
		}
		delete(ss.waiting, owner)
	}
}

// interruptible runs fn, a statement on d, and makes ctx's end interrupt it
// with KILL QUERY (sent through the statement pool) instead of closing the
// connection as the driver would: the named locks d holds survive. The KILL
// is repeated every killRepeat until fn returns, since one that reaches the
// server before the statement has started finds the connection idle and
// does nothing; interruptible returns only after its last KILL was taken,
// so none can land on d's next statement. fn runs with a context that
// ctx's cancellation does not reach, bounded by limit (when positive) so
// that a server that stops answering does not hold it forever (the driver
// then closes the connection). fn's error 1317 (the KILL) is returned as
// ctx's error when ctx ended, and as errInterruptedStmt otherwise.
func (s *Store) interruptible(ctx context.Context, d *dedicated, limit time.Duration, fn func(ctx context.Context) error) error {
	returned := make(chan struct{})
	killer := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(killer)
		t := time.NewTimer(0)
		defer t.Stop()
		for {
			select {
			case <-returned:
				return
			case <-t.C:
			}
			kctx, cancel := context.WithTimeout(context.Background(), killTimeout)
			s.pool.CountTrip()
			_, _ = s.db.ExecContext(kctx, qKillQuery, d.id)
			cancel()
			t.Reset(killRepeat)
		}
	})
	rctx, cancel := context.WithoutCancel(ctx), context.CancelFunc(func() {})
	if limit > 0 {
		rctx, cancel = context.WithTimeout(rctx, limit)
	}
	err := fn(rctx)
	cancel()
	close(returned)
	if !stop() {
		<-killer
		if err == nil || isInterrupted(err) {
			return ctx.Err()
		}
	}
	if isInterrupted(err) {
		return errInterruptedStmt
	}
	return err
}

// killRepeat is how often interruptible repeats its KILL QUERY until the
// statement returns; killTimeout bounds one KILL.
const (
	killRepeat  = 50 * time.Millisecond
	killTimeout = 5 * time.Second
)

// errInterruptedStmt: somebody else's KILL QUERY ended the statement (a
// wake-up, for a parked one).
var errInterruptedStmt = errors.New("statement interrupted by KILL QUERY")

// isInterrupted reports error 1317, a statement ended by KILL QUERY.
func isInterrupted(err error) bool {
	var me *driver.MySQLError
	return errors.As(err, &me) && me.Number == errInterrupted
}

// park runs a parked statement on d: "SELECT <tag>, " + body, where body
// ends in SLEEP(d) and takes args. It returns nil when the statement ended,
// by itself or by a wake-up (errInterruptedStmt is not an error here), and
// ctx's error when ctx ended first. sleep is the SLEEP's length, used to
// bound the statement.
func (s *Store) park(ctx context.Context, d *dedicated, tag, body string, sleep time.Duration, args ...any) error {
	s.pool.CountTrip()
	err := s.interruptible(ctx, d, sleep+30*time.Second, func(rctx context.Context) error {
		rows, err := d.conn.QueryContext(rctx, "SELECT ?, "+s.q(body), append([]any{tag}, args...)...)
		if err != nil {
			return err
		}
		for rows.Next() {
		}
		if err := rows.Err(); err != nil {
			rows.Close()
			return err
		}
		return rows.Close()
	})
	if errors.Is(err, errInterruptedStmt) {
		return nil
	}
	return err
}

// sleepSeconds renders a SLEEP or GET_LOCK timeout: seconds with
// millisecond precision, never negative (MariaDB rejects negative
// timeouts).
func sleepSeconds(d time.Duration) float64 {
	return float64(max(d, 0).Milliseconds()) / 1000
}

// qParkedAll lists every parked statement's tag (first column).
const qParkedAll = `SELECT SUBSTRING(info, 9, ?) FROM information_schema.processlist
WHERE command = 'Query' AND info LIKE 'SELECT ''coordd-park:%'`

// parkedChannels returns the channels that have a parked connection.
func (s *Store) parkedChannels(ctx context.Context) (map[string]bool, error) {
	n := len(parkPrefix) + 24 // the tag up to the end of the channel
	rows, err := s.on(nil).Query(ctx, qParkedAll, n)
	if err != nil {
		return nil, fmt.Errorf("list parked waiters: %w", err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var tag string
		if err := rows.Scan(&tag); err != nil {
			return nil, err
		}
		if ch, ok := strings.CutPrefix(tag, parkPrefix); ok {
			out[ch] = true
		}
	}
	return out, rows.Err()
}

// wakeParked KILL QUERYs up to n connections parked on channel, oldest
// ticket first, and reports how many it woke. A connection that left in
// the meantime (error 1094) is skipped; ErrKillDenied reports a missing
// privilege.
func (s *Store) wakeParked(ctx context.Context, channel string, n int) (int, error) {
	type parked struct{ id, query int64 }
	var ps []parked
	q := qParked
	if s.mariadb {
		q = qParkedMariaDB
	}
	rows, err := s.on(nil).Query(ctx, q, parkPattern(channel), n)
	if err != nil {
		return 0, fmt.Errorf("list parked waiters: %w", err)
	}
	for rows.Next() {
		var p parked
		if err := rows.Scan(&p.id, &p.query); err != nil {
			rows.Close()
			return 0, err
		}
		ps = append(ps, p)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	woken := 0
	for _, p := range ps {
		var err error
		if p.query != 0 {
			_, err = s.on(nil).Exec(ctx, qKillQueryID, p.query)
		} else {
			_, err = s.on(nil).Exec(ctx, qKillQuery, p.id)
		}
		id := p.id
		var me *driver.MySQLError
		switch {
		case err == nil:
			woken++
		case errors.As(err, &me) && (me.Number == errUnknownThread || me.Number == errUnknownQuery):
		case errors.As(err, &me) && (me.Number == errKillDenied || me.Number == errKillQueryDenied):
			return woken, fmt.Errorf("wake connection %d: %w", id, ErrKillDenied)
		default:
			return woken, fmt.Errorf("wake connection %d: %w", id, err)
		}
	}
	return woken, nil
}
