// Package dsn parses a coordd MySQL DSN for the MySQL backend: a
// go-sql-driver/mysql DSN plus the connection-pool parameters that
// database/sql, not the driver, takes.
//
// The rules live in internal/mysqldsn, which links no driver, so that the
// spec loader checks a dsn field with them (an error names the field and
// its file:line) without linking this package's driver: the pool
// parameters removed before the driver sees the DSN, and charsets,
// collations and session variables only from the set under which the
// driver's client-side escaping is sound (see that package's doc). Parse
// runs those checks, then the driver's own parser, and checks what the
// driver will send as session variables once more.
package dsn

import (
	"fmt"
	"maps"
	"slices"

	driver "github.com/go-sql-driver/mysql"

	"github.com/coordd/coordd/internal/mysqldsn"
)

// Pool is the connection pool a MySQL backend keeps.
type Pool = mysqldsn.Pool

// DefaultPool serves one coordd process's short statements without crowding
// a server shared by many hosts (max_connections defaults to 151).
var DefaultPool = mysqldsn.DefaultPool

// The coordd parameters, named in the driver's camelCase style.
const (
	ParamMaxOpenConns    = mysqldsn.ParamMaxOpenConns
	ParamMaxIdleConns    = mysqldsn.ParamMaxIdleConns
	ParamConnMaxLifetime = mysqldsn.ParamConnMaxLifetime
	ParamConnMaxIdleTime = mysqldsn.ParamConnMaxIdleTime
)

// Errors of Parse (see internal/mysqldsn).
var (
	ErrUnsafeCharset   = mysqldsn.ErrUnsafeCharset
	ErrUnknownNetwork  = mysqldsn.ErrUnknownNetwork
	ErrSessionVariable = mysqldsn.ErrSessionVariable
)

// SafeCharset reports whether cs is a connection charset under which
// client-side escaping is sound (case-insensitive).
func SafeCharset(cs string) bool { return mysqldsn.SafeCharset(cs) }

// Parse splits dsn into the driver's config (without coordd's parameters)
// and the pool settings, defaults filled in. It refuses what
// mysqldsn.Parse refuses (and so what `coordd validate` refuses), and
// what the driver's parser refuses.
func Parse(dsn string) (*driver.Config, Pool, error) {
	driverDSN, pool, err := mysqldsn.Parse(dsn)
	if err != nil {
		return nil, pool, err
	}
	cfg, err := driver.ParseDSN(driverDSN)
	if err != nil {
		return nil, pool, err
	}
	// The driver's own view of the charset and of the session variables,
	// should it read the DSN otherwise than mysqldsn does.
	if cfg.Collation != "" && !mysqldsn.SafeCollation(cfg.Collation) {
		return nil, pool, fmt.Errorf("collation %q: %w", cfg.Collation, ErrUnsafeCharset)
	}
	for _, k := range slices.Sorted(maps.Keys(cfg.Params)) {
		if err := mysqldsn.CheckSessionVariable(k, cfg.Params[k]); err != nil {
			return nil, pool, err
		}
	}
	return cfg, pool, nil
}
