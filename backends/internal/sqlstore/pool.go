package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordd/coordd/backends"
)

// ErrReadOnly is returned by every write on a store opened read-only.
var ErrReadOnly = errors.New("store is opened read-only")

// Pool is a SQL store's *sql.DB with the rules every statement goes
// through: the schema check (a never-migrated store reads as empty and
// refuses writes), read-only opens, retries of transactions the database
// rolled back (a deadlock), one write transaction at a time per handle
// where the database admits one writer anyway (SQLite), statements
// prepared once where parsing is the cost (SQLite) or sent in autocommit
// where a round trip is (MySQL, PostgreSQL), and a count of round trips.
// It implements DB.
type Pool struct {
	// SQL is the driver's pool.
	SQL *sql.DB
	// D is the store's dialect; every query is a template it renders.
	D *Dialect
	// ReadOnly refuses every write with ErrReadOnly.
	ReadOnly bool
	// Prepare prepares each statement once per Pool and reuses it.
	Prepare bool
	// OneWriter lets one write transaction of this handle run at a time,
	// in arrival order.
	OneWriter bool
	// Autocommit sends ReadOne's and WriteOne's single statement outside a
	// transaction.
	Autocommit bool
	// Retryable reports an error after which the database rolled a write
	// back and running it again may succeed (a deadlock, a lock wait
	// timeout, a serialisation failure). ErrRetry always is.
	Retryable func(error) bool
	// Attempts bounds the runs of one write (at least 1).
	Attempts int
	// NoSuchColumn reports an error naming a column the store lacks.
	NoSuchColumn func(error) bool
	// Absent: the store's file did not exist and was opened read-only; it
	// reads as empty without asking.
	Absent bool
	// Schema reads the migration state, for errors an older schema
	// explains (Explain).
	Schema func(ctx context.Context) (backends.SchemaInfo, error)

	trips  atomic.Uint64
	schema atomic.Bool // a positive schema check, cached: migrations are never undone

	mu    sync.Mutex
	stmts map[string]*sql.Stmt // prepared statements by final text

	writeTurn chan struct{}
}

var _ DB = (*Pool)(nil)

// Backoff of Write after a retryable error: jittered, doubling from
// retryBackoff up to retryBackoffMax.
const (
	retryBackoff    = 2 * time.Millisecond
	retryBackoffMax = 50 * time.Millisecond
)

// qSchemaVersion reads the highest recorded migration. A store records a
// migration only once its tables exist, so until the first is recorded a
// reader sees no schema, not a half-made one.
var qSchemaVersion = Query{SQL: `SELECT coalesce(max(version), 0) FROM {p}schema_migrations`}

// Init prepares p for use; call it once before the first statement.
func (p *Pool) Init() {
	p.stmts = map[string]*sql.Stmt{}
	p.writeTurn = make(chan struct{}, 1)
	if p.Attempts < 1 {
		p.Attempts = 1
	}
}

// Dialect is the store's dialect.
func (p *Pool) Dialect() *Dialect { return p.D }

// RoundTrips counts statements and transactions sent: one per statement,
// plus one per transaction for its BEGIN and COMMIT.
func (p *Pool) RoundTrips() uint64 { return p.trips.Load() }

// CountTrip counts a round trip the store sent itself (a dedicated
// connection's statement).
func (p *Pool) CountTrip() { p.trips.Add(1) }

// Close closes the prepared statements; the store closes SQL.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for q, st := range p.stmts {
		st.Close()
		delete(p.stmts, q)
	}
}

// HasSchema reports whether the store has been migrated at least once.
func (p *Pool) HasSchema(ctx context.Context) (bool, error) {
	if p.schema.Load() {
		return true, nil
	}
	if p.Absent {
		return false, nil
	}
	var v int
	err := p.On(nil).QueryRow(ctx, p.D.Pick(qSchemaVersion)).Scan(&v)
	if err != nil && !p.D.IsNoSuchTable(err) {
		return false, fmt.Errorf("read schema: %w", err)
	}
	if v > 0 {
		p.schema.Store(true)
	}
	return v > 0, nil
}

// Migrated records that the store now has a schema.
func (p *Pool) Migrated() { p.schema.Store(true) }

// Explain adds what to do to an error from a statement that names a
// column or table the store lacks because an older binary migrated it:
// reads that need nothing new keep working there (status during a rolling
// upgrade), the others say "run coordd apply" instead of "no such column".
func (p *Pool) Explain(ctx context.Context, err error) error {
	if err == nil || p.Schema == nil || !(p.D.IsNoSuchTable(err) || (p.NoSuchColumn != nil && p.NoSuchColumn(err))) {
		return err
	}
	if info, serr := p.Schema(ctx); serr == nil {
		if old := backends.SchemaCurrent(info.Version, info.Latest); old != nil {
			return fmt.Errorf("%w (%w)", old, err)
		}
	}
	return err
}

// Writable refuses a write on a read-only or never-migrated store.
func (p *Pool) Writable(ctx context.Context) error {
	if p.ReadOnly {
		return ErrReadOnly
	}
	ok, err := p.HasSchema(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return backends.ErrNoSchema
	}
	return nil
}

// Read runs fn in a read-only transaction (DB.Read).
func (p *Pool) Read(ctx context.Context, fn func(Conn) error) (bool, error) {
	return p.ReadTx(ctx, func(c *Tx) error { return fn(c) })
}

// ReadTx is Read with the store's own transaction type.
func (p *Pool) ReadTx(ctx context.Context, fn func(*Tx) error) (bool, error) {
	ok, err := p.HasSchema(ctx)
	if err != nil || !ok {
		return false, err
	}
	p.trips.Add(1)
	tx, err := p.SQL.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	if err := fn(p.On(tx)); err != nil {
		return false, p.Explain(ctx, err)
	}
	return true, tx.Commit()
}

// ReadOne runs fn's single statement outside a transaction with
// Autocommit, else as Read (DB.ReadOne).
func (p *Pool) ReadOne(ctx context.Context, fn func(Conn) error) (bool, error) {
	return p.ReadOneTx(ctx, func(c *Tx) error { return fn(c) })
}

// ReadOneTx is ReadOne with the store's own transaction type.
func (p *Pool) ReadOneTx(ctx context.Context, fn func(*Tx) error) (bool, error) {
	if !p.Autocommit {
		return p.ReadTx(ctx, fn)
	}
	ok, err := p.HasSchema(ctx)
	if err != nil || !ok {
		return false, err
	}
	return true, p.Explain(ctx, fn(p.On(nil)))
}

// Write runs fn in a write transaction (DB.Write).
func (p *Pool) Write(ctx context.Context, fn func(Conn) error) error {
	return p.WriteTx(ctx, func(c *Tx) error { return fn(c) })
}

// WriteTx is Write with the store's own transaction type.
func (p *Pool) WriteTx(ctx context.Context, fn func(*Tx) error) error {
	if err := p.Writable(ctx); err != nil {
		return err
	}
	return p.Explain(ctx, p.Retry(ctx, p.Attempts, func() error { return p.WriteOnce(ctx, fn) }))
}

// WriteOne sends one write statement: in autocommit with Autocommit, else
// in a write transaction of its own; retried as Write (DB.WriteOne).
func (p *Pool) WriteOne(ctx context.Context, query string, args ...any) (sql.Result, error) {
	var res sql.Result
	if !p.Autocommit {
		err := p.WriteTx(ctx, func(c *Tx) (err error) {
			res, err = c.Exec(ctx, query, args...)
			return err
		})
		return res, err
	}
	if err := p.Writable(ctx); err != nil {
		return nil, err
	}
	err := p.Retry(ctx, p.Attempts, func() (err error) {
		res, err = p.On(nil).Exec(ctx, query, args...)
		return err
	})
	return res, p.Explain(ctx, err)
}

// Direct runs fn on the pool without the schema check (DB.Direct).
func (p *Pool) Direct(ctx context.Context, fn func(Conn) error) error { return fn(p.On(nil)) }

// WriteOnce runs fn in one write transaction, without the checks and
// retries of Write: for migrations, which run before there is a schema.
func (p *Pool) WriteOnce(ctx context.Context, fn func(*Tx) error) error {
	if p.OneWriter {
		select {
		case p.writeTurn <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		defer func() { <-p.writeTurn }()
	}
	p.trips.Add(1)
	tx, err := p.SQL.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fn(p.On(tx)); err != nil {
		return err
	}
	return tx.Commit()
}

// Retry runs fn until it succeeds, fails in a way that running it again
// will not cure (Retryable), or ran attempts times, with a jittered
// exponential backoff in between.
func (p *Pool) Retry(ctx context.Context, attempts int, fn func() error) error {
	backoff := retryBackoff
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil || attempt >= attempts || !p.retryable(err) {
			return err
		}
		d := backoff/2 + rand.N(backoff)
		backoff = min(2*backoff, retryBackoffMax)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

func (p *Pool) retryable(err error) bool {
	return errors.Is(err, ErrRetry) || (p.Retryable != nil && p.Retryable(err))
}

// Tx sends statements, inside a transaction or (no transaction) on the
// pool. Each query is a template the dialect renders; each statement
// counts as a round trip.
type Tx struct {
	p  *Pool
	tx *sql.Tx
	// stmts holds the statements already bound to tx (Prepare).
	stmts map[string]*sql.Stmt
}

var _ Conn = (*Tx)(nil)

// On returns a Tx on tx, or on the pool when tx is nil.
func (p *Pool) On(tx *sql.Tx) *Tx {
	c := &Tx{p: p, tx: tx}
	if tx != nil && p.Prepare {
		c.stmts = map[string]*sql.Stmt{}
	}
	return c
}

// stmt returns query prepared, bound to the transaction if there is one.
func (c *Tx) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	if st, ok := c.stmts[query]; ok {
		return st, nil
	}
	p := c.p
	p.mu.Lock()
	st, ok := p.stmts[query]
	p.mu.Unlock()
	if !ok {
		var err error
		if st, err = p.SQL.PrepareContext(ctx, query); err != nil {
			if c.tx == nil {
				return nil, err
			}
			// The pool cannot see what this transaction created yet (a
			// migration's tables): prepare on the transaction alone.
			if st, err = c.tx.PrepareContext(ctx, query); err != nil {
				return nil, err
			}
			c.stmts[query] = st
			return st, nil
		}
		p.mu.Lock()
		if prev, ok := p.stmts[query]; ok {
			st.Close()
			st = prev
		} else {
			p.stmts[query] = st
		}
		p.mu.Unlock()
	}
	if c.tx != nil {
		st = c.tx.StmtContext(ctx, st) // closed with the transaction
		c.stmts[query] = st
	}
	return st, nil
}

// Exec sends one statement that returns no rows.
func (c *Tx) Exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	c.p.trips.Add(1)
	query = c.p.D.Render(query)
	args = c.p.D.Args(args)
	if c.p.Prepare {
		st, err := c.stmt(ctx, query)
		if err != nil {
			return nil, err
		}
		return st.ExecContext(ctx, args...)
	}
	if c.tx != nil {
		return c.tx.ExecContext(ctx, query, args...)
	}
	return c.p.SQL.ExecContext(ctx, query, args...)
}

// Query sends one statement that returns rows.
func (c *Tx) Query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	c.p.trips.Add(1)
	query = c.p.D.Render(query)
	args = c.p.D.Args(args)
	if c.p.Prepare {
		st, err := c.stmt(ctx, query)
		if err != nil {
			return nil, err
		}
		return st.QueryContext(ctx, args...)
	}
	if c.tx != nil {
		return c.tx.QueryContext(ctx, query, args...)
	}
	return c.p.SQL.QueryContext(ctx, query, args...)
}

// QueryRow sends one statement that returns at most one row. A statement
// that fails to prepare is sent unprepared, so that its error surfaces
// through Scan like any other.
func (c *Tx) QueryRow(ctx context.Context, query string, args ...any) *sql.Row {
	c.p.trips.Add(1)
	query = c.p.D.Render(query)
	args = c.p.D.Args(args)
	if c.p.Prepare {
		if st, err := c.stmt(ctx, query); err == nil {
			return st.QueryRowContext(ctx, args...)
		}
	}
	if c.tx != nil {
		return c.tx.QueryRowContext(ctx, query, args...)
	}
	return c.p.SQL.QueryRowContext(ctx, query, args...)
}

// Script sends several statements in one request, unprepared (a migration
// file); it needs a transaction.
func (c *Tx) Script(ctx context.Context, text string) error {
	c.p.trips.Add(1)
	_, err := c.tx.ExecContext(ctx, c.p.D.Render(text))
	return err
}
