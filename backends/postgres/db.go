package postgres

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/coordd/coordd/backends/internal/sqlstore"
)

// nowSQL is the backend clock: the server's statement_timestamp() as
// bigint microseconds since the Unix epoch. statement_timestamp() is the
// time the server received the statement, one instant for the whole
// statement (as SQLite's and MySQL's clocks are), so every {now} of one
// statement agrees. now() would be the transaction's start, stale in a
// transaction that waited for a row lock; clock_timestamp() changes within
// a statement, so two comparisons in one WHERE could disagree.
const nowSQL = `(EXTRACT(EPOCH FROM statement_timestamp()) * 1000000)::bigint`

// newDialect is PostgreSQL's SQL for the shared store: the Standard flavor
// with $n parameters, "quoted" identifiers, row locks, lists bound as one
// array parameter, and counters that start from the server's clock (see
// doc.go, "Fencing").
func newDialect(schema, prefix string) *sqlstore.Dialect {
	return &sqlstore.Dialect{
		Flavor:        sqlstore.Standard,
		Now:           nowSQL,
		Lock:          " FOR UPDATE",
		Share:         " FOR SHARE",
		Table:         func(name string) string { return quoteIdent(schema) + "." + quoteIdent(prefix+name) },
		ClockCounters: true,
		HeldByID:      true,
		Numbered:      true,
		DoubleQuoted:  true,
		List:          arrayList,
		IsDuplicate:   func(err error) bool { return hasCode(err, "23505") },
		IsNoSuchTable: func(err error) bool { return hasCode(err, "42P01", "3F000") },
		JSONTrue:      jsonTrue,
		JSONInt:       jsonInt,
		StorableText:  storableText,
		BoolAsInt:     true,
	}
}

// quoteIdent quotes a validated identifier (schema, prefix and base names
// hold letters, digits and "_" only, so nothing needs escaping; doubling
// a quote keeps it safe whatever comes).
func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// arrayList binds a list as one array parameter: x = ANY($n) is one
// statement, one plan, for any number of values, and the values stay data.
func arrayList(values any) (string, any, error) { return "= ANY(?)", values, nil }

// jsonTrue is {jsontrue col key}: true only for a JSON true, never NULL.
func jsonTrue(col, key string) string {
	return `coalesce((` + col + `::jsonb -> '` + key + `') = 'true'::jsonb, false)`
}

// jsonInt is {jsonint col key}: the integer member, NULL when absent or not
// an integer (a fraction or a string).
func jsonInt(col, key string) string {
	v := col + `::jsonb -> '` + key + `'`
	return `(CASE WHEN jsonb_typeof(` + v + `) = 'number' AND (` + v + `)::text ~ '^-?[0-9]+$' THEN (` + v + `)::text::bigint END)`
}

// storableText makes s storable in a text column: PostgreSQL refuses NUL
// and invalid UTF-8, which a command's error text may hold.
func storableText(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// hasCode reports whether err is a PostgreSQL error with one of codes.
func hasCode(err error, codes ...string) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	for _, c := range codes {
		if pe.Code == c {
			return true
		}
	}
	return false
}

// retryable reports an error after which PostgreSQL rolled the transaction
// back and running it again may succeed: a serialisation failure (40001),
// a deadlock (40P01), a lock not available (55P03).
func retryable(err error) bool { return hasCode(err, "40001", "40P01", "55P03") }

// isNoSuchColumn reports a statement naming a column the store lacks.
func isNoSuchColumn(err error) bool { return hasCode(err, "42703") }
