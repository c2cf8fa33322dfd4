package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"

	"github.com/coordd/coordd/backends/internal/sqlstore"
)

// dialect is SQLite's SQL for the shared store: the Standard flavor, no
// table prefix, and no row locks, since a write transaction begins
// IMMEDIATE and holds the file's write lock.
var dialect = &sqlstore.Dialect{
	Flavor:        sqlstore.Standard,
	Now:           nowSQL,
	Table:         func(name string) string { return name },
	List:          jsonList,
	IsDuplicate:   isConstraint,
	IsNoSuchTable: func(err error) bool { return err != nil && strings.Contains(err.Error(), "no such table") },
}

// jsonList binds a list as one JSON array parameter, expanded in SQL by
// json_each: one statement (and one prepared statement) for any number of
// values, and the values stay data.
func jsonList(values any) (string, any, error) {
	b, err := json.Marshal(values)
	return "IN (SELECT value FROM json_each(?))", string(b), err
}

// isConstraint reports a UNIQUE or PRIMARY KEY violation.
func isConstraint(err error) bool {
	return err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed")
}

// sqlDB is the store as the shared code runs statements on it.
type sqlDB struct{ s *Store }

var _ sqlstore.DB = sqlDB{}

func (d sqlDB) Dialect() *sqlstore.Dialect { return dialect }

func (d sqlDB) Read(ctx context.Context, fn func(sqlstore.Conn) error) (bool, error) {
	return d.s.read(ctx, func(c conn) error { return fn(c) })
}

// ReadOne is Read: a read transaction on SQLite costs no round trip.
func (d sqlDB) ReadOne(ctx context.Context, fn func(sqlstore.Conn) error) (bool, error) {
	return d.Read(ctx, fn)
}

// writeRaces bounds how often a write that lost a race (ErrRetry) runs
// again. With one writer at a time SQLite meets none in the shared code;
// the bound keeps a mistake from looping.
const writeRaces = 3

func (d sqlDB) Write(ctx context.Context, fn func(sqlstore.Conn) error) error {
	for attempt := 1; ; attempt++ {
		err := d.s.write(ctx, func(c conn) error { return fn(c) })
		if !errors.Is(err, sqlstore.ErrRetry) || attempt >= writeRaces {
			return err
		}
	}
}

// WriteOne sends one statement in a write transaction of its own.
func (d sqlDB) WriteOne(ctx context.Context, query string, args ...any) (sql.Result, error) {
	var res sql.Result
	err := d.s.write(ctx, func(c conn) (err error) {
		res, err = c.exec(ctx, query, args...)
		return err
	})
	return res, err
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
