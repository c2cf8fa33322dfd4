package sqlite

import (
	"encoding/json"
	"strings"

	"github.com/coordd/coordd/backends/internal/sqlstore"
)

// dialect is SQLite's SQL for the shared store: the Standard flavor, no
// table prefix, and no row locks, since a write transaction begins
// IMMEDIATE and holds the file's write lock. Queue claims name their
// indexes: the planner would rather walk the one on (queue, state,
// available_at) than the one in claim order.
var dialect = &sqlstore.Dialect{
	Flavor:        sqlstore.Standard,
	Now:           nowSQL,
	Table:         func(name string) string { return name },
	Index:         func(name string) string { return " INDEXED BY " + name },
	List:          jsonList,
	IsDuplicate:   isConstraint,
	IsNoSuchTable: func(err error) bool { return err != nil && strings.Contains(err.Error(), "no such table") },
	JSONTrue:      jsonTrue,
	JSONInt:       jsonInt,
}

// jsonTrue is {jsontrue col key}: json_type names true apart from 1, and IS
// is never NULL.
func jsonTrue(col, key string) string { return `(json_type(` + col + `, '$.` + key + `') IS 'true')` }

// jsonInt is {jsonint col key}.
func jsonInt(col, key string) string {
	return `(CASE WHEN json_type(` + col + `, '$.` + key + `') = 'integer' THEN json_extract(` + col + `, '$.` + key + `') END)`
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

// writeRaces bounds how often a write that lost a race (ErrRetry) runs
// again. With one writer at a time SQLite meets none in the shared code;
// the bound keeps a mistake from looping.
const writeRaces = 3
