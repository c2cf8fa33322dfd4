// Package open is the backend factory: it opens a spec.Backend by its type.
// It lives apart from package backends so that the contract never imports
// its implementations.
package open

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/memcached"
	"github.com/coordd/coordd/backends/mysql"
	"github.com/coordd/coordd/backends/redis"
	"github.com/coordd/coordd/backends/sqlite"
	"github.com/coordd/coordd/spec"
)

// Open opens b; unknown types fail.
func Open(ctx context.Context, b *spec.Backend, opts backends.Options) (backends.Backend, error) {
	if b == nil {
		return nil, errors.New("open backend: nil")
	}
	switch b.Type {
	case spec.TypeSQLite:
		s, err := sqlite.Open(ctx, b.Name, b.Path, opts)
		if err != nil {
			return nil, err
		}
		return s, nil
	case spec.TypeMySQL:
		s, err := mysql.Open(ctx, b.Name, b.DSN, b.TablePrefix, opts)
		if err != nil {
			return nil, err
		}
		return s, nil
	case spec.TypeRedis:
		opts.Durable = b.Durable
		s, err := redis.Open(ctx, b.Name, b.URL, b.KeyPrefix, opts)
		if err != nil {
			return nil, err
		}
		return s, nil
	case spec.TypeMemcached:
		s, err := memcached.Open(ctx, b.Name, b.Servers, b.KeyPrefix, opts)
		if err != nil {
			return nil, err
		}
		return s, nil
	default:
		return nil, fmt.Errorf("backend %q: unknown type %q", b.Name, b.Type)
	}
}

// Wrap is err from Open as a caller reports it: `open backend "NAME": ...`,
// or `open ...` when err names the backend already (`mysql "db": ...`), so
// that the name reads once.
func Wrap(name string, err error) error {
	if strings.Contains(err.Error(), strconv.Quote(name)) {
		return fmt.Errorf("open %w", err)
	}
	return fmt.Errorf("open backend %q: %w", name, err)
}
