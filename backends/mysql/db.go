package mysql

import (
	"context"
	"database/sql"
	"errors"

	driver "github.com/go-sql-driver/mysql"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/internal/sqlstore"
)

// Compile-time checks of what the shared store brings.
var (
	_ backends.StateStore   = (*Store)(nil)
	_ backends.HostRegistry = (*Store)(nil)
	_ backends.CronPauser   = (*Store)(nil)
	_ backends.WaiterLister = (*Store)(nil)
)

// newDialect is MySQL's SQL for the shared store with table prefix p
// (checked by Open against prefixPattern): the MySQL flavor, row locks
// taken with FOR UPDATE, tables named `<p><name>`.
func newDialect(p string) *sqlstore.Dialect {
	return &sqlstore.Dialect{
		Flavor:        sqlstore.MySQL,
		Now:           nowSQL,
		Lock:          " FOR UPDATE",
		ListChunk:     inChunk,
		Table:         func(name string) string { return "`" + p + name + "`" },
		IsDuplicate:   isDup,
		IsNoSuchTable: isNoSuchTable,
	}
}

// isNoSuchTable reports a statement naming a table the store lacks.
func isNoSuchTable(err error) bool {
	var me *driver.MySQLError
	return errors.As(err, &me) && me.Number == errNoSuchTable
}

// sqlDB is the store as the shared code runs statements on it.
type sqlDB struct{ s *Store }

var _ sqlstore.DB = sqlDB{}

func (d sqlDB) Dialect() *sqlstore.Dialect { return d.s.dialect }

func (d sqlDB) Read(ctx context.Context, fn func(sqlstore.Conn) error) (bool, error) {
	return d.s.read(ctx, func(c conn) error { return fn(c) })
}

// ReadOne sends fn's statement in autocommit: one round trip.
func (d sqlDB) ReadOne(ctx context.Context, fn func(sqlstore.Conn) error) (bool, error) {
	ok, err := d.s.hasSchema(ctx)
	if err != nil || !ok {
		return false, err
	}
	return true, d.s.explain(ctx, fn(d.s.on(nil)))
}

func (d sqlDB) Write(ctx context.Context, fn func(sqlstore.Conn) error) error {
	return d.s.write(ctx, func(c conn) error { return fn(c) })
}

// WriteOne sends the statement in autocommit: one round trip.
func (d sqlDB) WriteOne(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return d.s.autocommit(ctx, query, args...)
}

func (d sqlDB) Direct(ctx context.Context, fn func(sqlstore.Conn) error) error {
	return fn(d.s.on(nil))
}

// Exec, Query and QueryRow make conn a sqlstore.Conn.
func (c conn) Exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return c.exec(ctx, query, args...)
}

func (c conn) Query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return c.query(ctx, query, args...)
}

func (c conn) QueryRow(ctx context.Context, query string, args ...any) *sql.Row {
	return c.row(ctx, query, args...)
}

// sessionConn sends statements on one dedicated connection (the migration
// lock's session), counting round trips.
type sessionConn struct {
	s *Store
	c *sql.Conn
}

func (c sessionConn) Exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	c.s.trips.Add(1)
	return c.c.ExecContext(ctx, query, args...)
}

func (c sessionConn) Query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	c.s.trips.Add(1)
	return c.c.QueryContext(ctx, query, args...)
}

func (c sessionConn) QueryRow(ctx context.Context, query string, args ...any) *sql.Row {
	c.s.trips.Add(1)
	return c.c.QueryRowContext(ctx, query, args...)
}
