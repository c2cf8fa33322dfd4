// Package waiterrow reads the lines of waiters that the SQL stores (sqlite,
// mysql) list for backends.WaiterLister. Their list queries return the
// same columns, in line order within each key:
//
//	ikey ('' for a semaphore's own line), host, pid, since, expires_at
//
// with times in microseconds of the store's clock (since 0: a record
// written by a binary from before the column, shown as unknown).
package waiterrow

import (
	"database/sql"
	"time"

	"github.com/coordd/coordd/backends"
)

// Append appends the waiters of rows to ws, numbering places from 1 within
// each key's line, and closes rows.
func Append(ws []backends.Waiter, rows *sql.Rows) ([]backends.Waiter, error) {
	defer rows.Close()
	for rows.Next() {
		var w backends.Waiter
		var since, exp int64
		if err := rows.Scan(&w.Key, &w.Host, &w.PID, &since, &exp); err != nil {
			return ws, err
		}
		if since > 0 {
			w.Since = time.UnixMicro(since).UTC()
		}
		w.ExpiresAt = time.UnixMicro(exp).UTC()
		w.Place = 1
		if n := len(ws); n > 0 && ws[n-1].Key == w.Key {
			w.Place = ws[n-1].Place + 1
		}
		ws = append(ws, w)
	}
	return ws, rows.Err()
}

// Queries are a store's three list queries, each returning the columns
// above: Line a semaphore's own line (by name), Instance one instance's
// (by name and key), Instances every instance's of a keyed semaphore (by
// name), ordered by key.
type Queries struct {
	Line, Instance, Instances string
}

// List reads the line of semaphore or instance reference name through
// query (run in one read snapshot by the caller): an instance's line, or
// a semaphore's own line followed by those of its instances.
func List(name string, qs Queries, query func(q string, args ...any) (*sql.Rows, error)) ([]backends.Waiter, error) {
	var ws []backends.Waiter
	read := func(q string, args ...any) error {
		rows, err := query(q, args...)
		if err == nil {
			ws, err = Append(ws, rows)
		}
		return err
	}
	if parent, key, ok := backends.SplitInstance(name); ok {
		return ws, read(qs.Instance, parent, key)
	}
	if err := read(qs.Line, name); err != nil {
		return nil, err
	}
	return ws, read(qs.Instances, name)
}
