package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
)

// Conn sends one statement at a time, inside a transaction or on the pool,
// and counts each as a round trip of its store. Queries are final text
// (Dialect.Text).
type Conn interface {
	Exec(ctx context.Context, query string, args ...any) (sql.Result, error)
	Query(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRow(ctx context.Context, query string, args ...any) *sql.Row
}

// DB is a SQL store as the shared code uses it: its dialect, and how it
// runs statements under its own rules (the schema check, a read-only open,
// retries after a deadlock or a busy file, one writer at a time).
type DB interface {
	Dialect() *Dialect
	// Read runs fn in a read-only transaction: one consistent snapshot.
	// It reports false, without running fn, when the store was never
	// migrated: such a store reads as empty.
	Read(ctx context.Context, fn func(Conn) error) (bool, error)
	// ReadOne is Read for fn that sends a single statement, which a store
	// may send outside a transaction (one round trip instead of three).
	ReadOne(ctx context.Context, fn func(Conn) error) (bool, error)
	// Write runs fn in a read-write transaction; fn's error rolls it back.
	// The store runs fn again after a deadlock, a lock wait timeout or
	// ErrRetry, so fn must decide from what it reads, not from outside.
	Write(ctx context.Context, fn func(Conn) error) error
	// WriteOne sends one write statement committed by itself, with
	// Write's rules.
	WriteOne(ctx context.Context, query string, args ...any) (sql.Result, error)
	// Direct runs fn on the pool without the schema check and without a
	// transaction: for the clock and the schema's own tables.
	Direct(ctx context.Context, fn func(Conn) error) error
	// HasSchema reports whether the store was migrated at least once: a
	// caller that then polls with Direct checks it once.
	HasSchema(ctx context.Context) (bool, error)
}

// Affected returns the rows a write matched. MySQL is opened so that an
// UPDATE reports the rows it matched, not those it changed, as the other
// stores do.
func Affected(res sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// FromMicros converts a stored time (microseconds since the Unix epoch) to
// UTC.
func FromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

// FromNullMicros maps NULL to the zero time.
func FromNullMicros(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return FromMicros(v.Int64)
}

// ToNullMicros maps the zero time to NULL.
func ToNullMicros(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixMicro(), Valid: true}
}

// LeaseMicros converts a lease to microseconds; leases must be positive.
func LeaseMicros(d time.Duration) (int64, error) {
	if d < time.Microsecond {
		return 0, fmt.Errorf("lease %v: must be at least 1µs", d)
	}
	return d.Microseconds(), nil
}

// Placeholders returns "?, ?, ..." with n markers (NULL for none): the list
// is part of the query text, the values stay bound parameters.
func Placeholders(n int) string {
	if n <= 0 {
		return "NULL"
	}
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

// Tuples returns n copies of tuple joined by ", " (multi-row VALUES).
func Tuples(tuple string, n int) string {
	return strings.TrimSuffix(strings.Repeat(tuple+", ", n), ", ")
}

// Chunks splits xs into slices of at most n.
func Chunks[T any](xs []T, n int) [][]T {
	var out [][]T
	for len(xs) > 0 {
		k := min(n, len(xs))
		out = append(out, xs[:k])
		xs = xs[k:]
	}
	return out
}

// Anys converts a slice to bound arguments, after pre.
func Anys[T any](xs []T, pre ...any) []any {
	out := append(make([]any, 0, len(pre)+len(xs)), pre...)
	for _, x := range xs {
		out = append(out, x)
	}
	return out
}
