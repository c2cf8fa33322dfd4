package mysql

import (
	"context"
	"database/sql"
	"errors"

	driver "github.com/go-sql-driver/mysql"

	"github.com/coordd/coordd/backends/internal/sqlstore"
)

// Compile-time checks of what the shared store brings.

// newDialect is MySQL's SQL for the shared store with table prefix p
// (checked by Open against prefixPattern): the MySQL flavor, row locks
// taken with FOR UPDATE (LOCK IN SHARE MODE, which MariaDB has and FOR
// SHARE it has not), indexes named with FORCE INDEX (a locking read scans
// the index the optimizer picks, and locks, or waits for, every row it
// reads), tables named <p><name>, unquoted where the shared queries name
// them (no table name is a reserved word) and quoted where this package's
// own queries do.
func newDialect(p string) *sqlstore.Dialect {
	return &sqlstore.Dialect{
		Flavor:        sqlstore.MySQL,
		Now:           nowSQL,
		Lock:          " FOR UPDATE",
		ClockCounters: true,
		Share:         " LOCK IN SHARE MODE",
		Index:         func(name string) string { return " FORCE INDEX (" + name + ")" },
		ListChunk:     inChunk,
		Table:         func(name string) string { return p + name },
		IsDuplicate:   isDup,
		IsNoSuchTable: isNoSuchTable,
		JSONTrue:      jsonTrue,
		JSONInt:       jsonInt,
	}
}

// jsonTrue is {jsontrue col key}; <=> is never NULL.
func jsonTrue(col, key string) string {
	return `(JSON_UNQUOTE(JSON_EXTRACT(` + col + `, '$.` + key + `')) <=> 'true')`
}

// jsonInt is {jsonint col key}.
func jsonInt(col, key string) string {
	return `(CASE WHEN JSON_TYPE(JSON_EXTRACT(` + col + `, '$.` + key + `')) = 'INTEGER' THEN CAST(JSON_EXTRACT(` + col + `, '$.` + key + `') AS SIGNED) END)`
}

// isNoSuchTable reports a statement naming a table the store lacks.
func isNoSuchTable(err error) bool {
	var me *driver.MySQLError
	return errors.As(err, &me) && me.Number == errNoSuchTable
}

// sessionConn sends statements on one dedicated connection (the migration
// lock's session), counting round trips.
type sessionConn struct {
	s *Store
	c *sql.Conn
}

func (c sessionConn) Exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	c.s.pool.CountTrip()
	return c.c.ExecContext(ctx, query, args...)
}

func (c sessionConn) Query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	c.s.pool.CountTrip()
	return c.c.QueryContext(ctx, query, args...)
}

func (c sessionConn) QueryRow(ctx context.Context, query string, args ...any) *sql.Row {
	c.s.pool.CountTrip()
	return c.c.QueryRowContext(ctx, query, args...)
}
