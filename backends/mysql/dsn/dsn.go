// Package dsn parses a coordd MySQL DSN: a go-sql-driver/mysql DSN plus the
// connection-pool parameters that database/sql, not the driver, takes.
//
// The driver sends every parameter it does not know to the server as a
// session variable (SET maxOpenConns=16 would fail), so Parse removes
// coordd's own parameters before the driver sees the DSN. The spec loader
// and the backend both parse with it, so a bad value is a spec error that
// names the field, and never a surprise at connect time.
package dsn

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	driver "github.com/go-sql-driver/mysql"
)

// Pool is the connection pool a MySQL backend keeps.
type Pool struct {
	// MaxOpenConns bounds the shared pool (statements and transactions).
	MaxOpenConns int
	// MaxIdleConns is how many idle connections it keeps.
	MaxIdleConns int
	// ConnMaxLifetime recycles connections, below the server's wait_timeout
	// and a proxy's idle cut-off, so that a failover behind a VIP is picked
	// up.
	ConnMaxLifetime time.Duration
	// ConnMaxIdleTime closes connections idle for this long.
	ConnMaxIdleTime time.Duration
}

// DefaultPool serves one coordd process's short statements without crowding
// a server shared by many hosts (max_connections defaults to 151).
var DefaultPool = Pool{
	MaxOpenConns:    16,
	MaxIdleConns:    16,
	ConnMaxLifetime: 5 * time.Minute,
	ConnMaxIdleTime: time.Minute,
}

// The coordd parameters, named in the driver's camelCase style.
const (
	ParamMaxOpenConns    = "maxOpenConns"
	ParamMaxIdleConns    = "maxIdleConns"
	ParamConnMaxLifetime = "connMaxLifetime"
	ParamConnMaxIdleTime = "connMaxIdleTime"
)

// Parse splits dsn into the driver's config (without coordd's parameters)
// and the pool settings, defaults filled in.
func Parse(dsn string) (*driver.Config, Pool, error) {
	pool := DefaultPool
	base, query, hasQuery := strings.Cut(dsn, "?")
	var kept []string
	if hasQuery {
		for _, kv := range strings.Split(query, "&") {
			k, v, _ := strings.Cut(kv, "=")
			var err error
			switch k {
			case ParamMaxOpenConns:
				pool.MaxOpenConns, err = positiveInt(v)
			case ParamMaxIdleConns:
				pool.MaxIdleConns, err = nonNegInt(v)
			case ParamConnMaxLifetime:
				pool.ConnMaxLifetime, err = duration(v)
			case ParamConnMaxIdleTime:
				pool.ConnMaxIdleTime, err = duration(v)
			default:
				kept = append(kept, kv)
				continue
			}
			if err != nil {
				return nil, pool, fmt.Errorf("parameter %s: %w", k, err)
			}
		}
	}
	if len(kept) > 0 {
		base += "?" + strings.Join(kept, "&")
	}
	cfg, err := driver.ParseDSN(base)
	if err != nil {
		return nil, pool, err
	}
	return cfg, pool, nil
}

func unescape(v string) string {
	if u, err := url.QueryUnescape(v); err == nil {
		return u
	}
	return v
}

func positiveInt(v string) (int, error) {
	n, err := strconv.Atoi(unescape(v))
	if err != nil || n < 1 {
		return 0, fmt.Errorf("want an integer of at least 1, got %q", v)
	}
	return n, nil
}

func nonNegInt(v string) (int, error) {
	n, err := strconv.Atoi(unescape(v))
	if err != nil || n < 0 {
		return 0, fmt.Errorf("want an integer of at least 0, got %q", v)
	}
	return n, nil
}

func duration(v string) (time.Duration, error) {
	d, err := time.ParseDuration(unescape(v))
	if err != nil || d < 0 {
		return 0, fmt.Errorf("want a duration such as 5m (0: no limit), got %q", v)
	}
	return d, nil
}
