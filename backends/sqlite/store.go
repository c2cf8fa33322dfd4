package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/internal/sqlstore"
	"github.com/coordd/coordd/spec"

	msqlite "modernc.org/sqlite" // the "sqlite" driver (pure Go, no cgo); importing registers it
	sqlite3 "modernc.org/sqlite/lib"
)

// ErrReadOnly is returned by every write on a store opened with
// Options.ReadOnly.
var ErrReadOnly = sqlstore.ErrReadOnly

// Compile-time checks of the capabilities the store implements.
var (
	_ backends.Backend  = (*Store)(nil)
	_ backends.Migrator = (*Store)(nil)
)

// busyTimeoutMS bounds how long a statement waits for another process's
// write lock before failing with SQLITE_BUSY.
const busyTimeoutMS = 10000

// nowSQL is the backend clock: the holding host's clock in whole
// milliseconds, as INTEGER microseconds since the Unix epoch. SQLite fixes
// 'now' for the duration of one statement, so every use of nowSQL within a
// statement sees the same instant. unixepoch('subsec') is exact to the
// millisecond after ROUND; julianday('now') is not (float64 loses ~20µs).
const nowSQL = `(CAST(ROUND(unixepoch('subsec') * 1000) AS INTEGER) * 1000)`

// qNow reads the backend clock.
const qNow = `SELECT ` + nowSQL

// Store is one handle on a SQLite file. It is safe for concurrent use, and
// several Stores (in one process or several) may share one file.
type Store struct {
	// Core is what every SQL store shares: the cluster's state, hosts,
	// the leader lease, cron pauses, waiter lines.
	sqlstore.Core

	name string
	path string
	opts backends.Options
	db   *sql.DB
	// pool runs every statement. Its write transactions queue behind each
	// other, one at a time, in arrival order: SQLite admits one writer per
	// file anyway, and a writer that finds the file locked sleeps in a
	// busy handler that is not fair: under contention one goroutine could
	// wait for seconds, longer than a short lease, while others take
	// turns. Waiting in a queue keeps every wait short; other processes
	// still contend through busy_timeout. Statements are prepared once and
	// reused: SQLite then skips parsing, a third of the cost of a small
	// write.
	pool *sqlstore.Pool
}

// Open opens (and unless opts.ReadOnly creates) the SQLite file at path. It
// does not migrate; call Migrate. A read-only open of a missing file creates
// nothing and reads as empty.
func Open(ctx context.Context, name, path string, opts backends.Options) (*Store, error) {
	if path == "" {
		return nil, errors.New("sqlite: empty path")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqlite path %q: %w", path, err)
	}
	s := &Store{name: name, path: abs, opts: opts}
	absent := false
	var dsn string
	created := false // this Open makes the file (see perm.go)
	switch {
	case opts.ReadOnly:
		if _, err := os.Stat(abs); errors.Is(err, os.ErrNotExist) {
			absent = true
			dsn = "file::memory:?" + dsnParams(true)
		} else if err != nil {
			return nil, fmt.Errorf("sqlite %s: %w", abs, err)
		} else {
			dsn = fileURI(abs) + "?mode=ro&" + dsnParams(true)
		}
	default:
		if err := os.MkdirAll(filepath.Dir(abs), 0o750); err != nil {
			return nil, fmt.Errorf("sqlite %s: create directory: %w", abs, err)
		}
		created = !exists(abs)
		dsn = fileURI(abs) + "?" + dsnParams(false)
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlite %s: %w", abs, err)
	}
	if absent {
		// Each :memory: connection is its own database; one is enough.
		db.SetMaxOpenConns(1)
	}
	s.db = db
	s.pool = &sqlstore.Pool{
		SQL: db, D: dialect, ReadOnly: opts.ReadOnly, Prepare: true, OneWriter: true,
		Attempts: writeRaces, Absent: absent, Schema: s.Schema, NoSuchColumn: isNoSuchColumn,
	}
	s.pool.Init()
	s.Core = sqlstore.Core{DB: s.pool}
	s.pool.CountTrip()
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite %s: %w", abs, err)
	}
	if !opts.ReadOnly {
		// The database file first, so that SQLite creates the -wal and
		// -shm files with its mode; then those, if another process made
		// them first.
		err := restrict(abs, created, storeFiles[0])
		if err == nil {
			err = enableWAL(ctx, db)
		}
		if err == nil {
			err = restrict(abs, created, storeFiles[1:]...)
		}
		if err != nil {
			db.Close()
			return nil, fmt.Errorf("sqlite %s: %w", abs, err)
		}
	}
	return s, nil
}

// qEnableWAL switches the file to WAL mode and returns the mode now in force.
const qEnableWAL = `PRAGMA journal_mode = WAL`

// enableWAL switches the file to WAL mode. The mode is stored in the file,
// so this is done once per Open, not on every connection.
//
// The switch cannot simply wait in the busy handler. PRAGMA journal_mode
// reads the file header in a read transaction and, when the header does not
// say WAL yet, upgrades that transaction to a write to change it. An upgrade
// that finds another connection holding the write lock fails at once with
// SQLITE_BUSY, without calling the busy handler: the holder may be waiting
// for this reader to go away, so waiting would deadlock. Several processes
// opening a new file together meet exactly that, and all but the one that
// converts the file would fail. So enableWAL retries SQLITE_BUSY itself,
// with a short backoff and for at most busyTimeoutMS, as long as a write
// waits; once one of them has converted the file, the next try only reads
// the header.
func enableWAL(ctx context.Context, db *sql.DB) error {
	deadline := time.Now().Add(busyTimeoutMS * time.Millisecond)
	delay := time.Millisecond
	for {
		var mode string
		err := db.QueryRowContext(ctx, qEnableWAL).Scan(&mode)
		if err == nil {
			if !strings.EqualFold(mode, "wal") {
				return fmt.Errorf("enable WAL: journal mode is %q", mode)
			}
			return nil
		}
		if !isBusy(err) || time.Now().Add(delay).After(deadline) {
			return fmt.Errorf("enable WAL: %w", err)
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("enable WAL: %w", ctx.Err())
		}
		delay = min(2*delay, 50*time.Millisecond)
	}
}

// isBusy reports whether err is SQLITE_BUSY or one of its extended codes.
func isBusy(err error) bool {
	var e *msqlite.Error
	return errors.As(err, &e) && e.Code()&0xff == sqlite3.SQLITE_BUSY
}

// fileURI turns an absolute path into a file: URI, escaping '?', '#' and
// '%' so that no path can be read as URI parameters.
func fileURI(abs string) string {
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(abs)}).String()
}

// dsnParams returns the parameters every new connection is set up with. The
// driver runs busy_timeout before the other pragmas, so that any of them that
// waits for a lock waits through the busy handler. Write transactions begin
// IMMEDIATE. None of these pragmas touches the file: the journal mode, which
// does, is switched once by enableWAL, where SQLITE_BUSY can be retried.
func dsnParams(readOnly bool) string {
	v := url.Values{}
	v.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeoutMS))
	v.Add("_pragma", "foreign_keys(1)")
	if readOnly {
		v.Add("_pragma", "query_only(1)")
	} else {
		v.Set("_txlock", "immediate")
		v.Add("_pragma", "synchronous(NORMAL)")
	}
	return v.Encode()
}

// Name is the name the spec gave the backend.
func (s *Store) Name() string { return s.name }

// Type is spec.TypeSQLite.
func (s *Store) Type() string { return spec.TypeSQLite }

// Path is the absolute path of the file.
func (s *Store) Path() string { return s.path }

// DB exposes the underlying database for tests and drift simulation.
// Statements sent through it are not counted by RoundTrips.
func (s *Store) DB() *sql.DB { return s.db }

// RoundTrips counts statements and transactions sent since Open: one per
// statement, plus one per transaction for its BEGIN and COMMIT.
func (s *Store) RoundTrips() uint64 { return s.pool.RoundTrips() }

// Close closes the handle; other handles on the file are unaffected.
func (s *Store) Close() error {
	s.pool.Close()
	return s.db.Close()
}

// read runs fn in a read transaction, which gives fn one consistent
// snapshot. It reports false, without running fn, when the store has no
// schema: such a store reads as empty.
func (s *Store) read(ctx context.Context, fn func(c conn) error) (bool, error) {
	return s.pool.ReadTx(ctx, fn)
}

// write runs fn in a write transaction that began IMMEDIATE, so fn holds
// the file's write lock from its first read. fn's error rolls it back.
func (s *Store) write(ctx context.Context, fn func(c conn) error) error {
	return s.pool.WriteTx(ctx, fn)
}

// conn sends statements on a transaction or on the pool.
type conn = *sqlstore.Tx

// isNoSuchColumn reports a statement naming a column the store lacks.
func isNoSuchColumn(err error) bool {
	return err != nil && strings.Contains(err.Error(), "no such column")
}

// fromMicros converts a stored time to UTC.
func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

// fromNullMicros maps NULL to the zero time.
func fromNullMicros(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return fromMicros(v.Int64)
}

// toNullMicros maps the zero time to NULL.
func toNullMicros(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixMicro(), Valid: true}
}

// leaseMicros converts a lease to microseconds; leases must be positive.
func leaseMicros(d time.Duration) (int64, error) {
	if d < time.Microsecond {
		return 0, fmt.Errorf("lease %v: must be at least 1µs", d)
	}
	return d.Microseconds(), nil
}

// The areas the store holds (backends.Backend): all of them, each served
// by the store itself, so that what it overrides of the shared SQL store
// is what callers get. Each return checks at compile time that the store
// implements its area.
func (s *Store) Cluster() backends.Cluster       { return s }
func (s *Store) Semaphores() backends.Semaphores { return s }
func (s *Store) Crons() backends.Crons           { return s }
func (s *Store) Queues() backends.Queues         { return s }

// RateLimits is the store's rate limits (backends.RateLimitHolder).
func (s *Store) RateLimits() backends.RateLimits { return s }

// Waiters is the store's lines of waiters (backends.Semaphores).
func (s *Store) Waiters() backends.Waiters { return s }
