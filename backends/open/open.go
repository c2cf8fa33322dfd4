// Package open is the backend factory: it opens a spec.Backend by its type.
// It lives apart from package backends so that the contract never imports
// its implementations.
package open

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/memcached"
	"github.com/coordd/coordd/backends/mysql"
	"github.com/coordd/coordd/backends/postgres"
	"github.com/coordd/coordd/backends/redis"
	"github.com/coordd/coordd/backends/sqlite"
	"github.com/coordd/coordd/spec"
)

// Open opens b; unknown types fail. An error never shows b's password,
// not even a piece of it that a driver or parser quoted (redacted).
func Open(ctx context.Context, b *spec.Backend, opts backends.Options) (backends.Backend, error) {
	if b == nil {
		return nil, errors.New("open backend: nil")
	}
	s, err := open(ctx, b, opts)
	if err != nil {
		err = redacted(err, b.DSN, b.URL)
		if b.Sentinel != nil {
			err = redactedPasswords(err, b.Sentinel.Password, b.Sentinel.SentinelPassword)
		}
		return nil, err
	}
	return s, nil
}

func open(ctx context.Context, b *spec.Backend, opts backends.Options) (backends.Backend, error) {
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
	case spec.TypePostgres:
		opts.PollWake = b.Wake == spec.WakePoll
		s, err := postgres.Open(ctx, b.Name, b.DSN, b.Schema, b.TablePrefix, opts)
		if err != nil {
			return nil, err
		}
		return s, nil
	case spec.TypeRedis:
		opts.Durable = b.Durable
		if b.Sentinel != nil {
			s, err := redis.OpenSentinel(ctx, b.Name, b.Sentinel, b.KeyPrefix, opts)
			if err != nil {
				return nil, err
			}
			return s, nil
		}
		// go-redis returns url.Parse's error, which quotes the URL; the
		// spec loader refused such a URL already, the Go API may not have.
		if _, err := url.Parse(b.URL); err != nil {
			return nil, fmt.Errorf("redis %q: the url is not valid: %s", b.Name, spec.URLError(err))
		}
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

// redactedError is an error whose message has the passwords of the
// backend's DSN or URL taken out (spec.RedactSecrets); errors.Is and As
// still see the error it wraps.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// redacted returns err with the passwords of values taken out of its
// message, or err itself when there was nothing to take out.
func redacted(err error, values ...string) error {
	msg := err.Error()
	if r := spec.RedactSecrets(msg, values...); r != msg {
		return &redactedError{msg: r, err: err}
	}
	return err
}

// redactedPasswords is redacted for passwords given on their own.
func redactedPasswords(err error, passwords ...string) error {
	msg := err.Error()
	if r := spec.RedactPasswords(msg, passwords...); r != msg {
		return &redactedError{msg: r, err: err}
	}
	return err
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
