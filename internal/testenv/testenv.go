// Package testenv gives tests isolated namespaces on the real MariaDB/MySQL,
// Redis and memcached servers that `make test` (scripts/test-services.sh)
// brings up.
//
// The server addresses come from the environment, with defaults matching a
// developer machine running the services on their standard local ports:
//
//	COORDD_TEST_MYSQL_DSN   root@tcp(127.0.0.1:3306)/
//	COORDD_TEST_REDIS_URL   redis://127.0.0.1:6379/0
//	COORDD_TEST_MEMCACHED   127.0.0.1:11211
//
// When a server is unreachable the helpers FAIL the test (t.Fatalf); they never
// skip, so a broken environment cannot masquerade as a passing test run.
//
// Each call gets a fresh namespace: a new database (MySQLDSN) or a random key
// prefix (RedisURL, MemcachedAddr). Cleanup only ever removes what the helper
// itself created: it never drops other databases and never FLUSHes Redis.
package testenv

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
)

// Environment variables read by this package, and their defaults.
const (
	EnvMySQLDSN  = "COORDD_TEST_MYSQL_DSN"
	EnvRedisURL  = "COORDD_TEST_REDIS_URL"
	EnvMemcached = "COORDD_TEST_MEMCACHED"

	DefaultMySQLDSN  = "root@tcp(127.0.0.1:3306)/"
	DefaultRedisURL  = "redis://127.0.0.1:6379/0"
	DefaultMemcached = "127.0.0.1:11211"

	// DatabasePrefix starts the name of every database created by MySQLDSN.
	DatabasePrefix = "coordd_test_"
	// KeyPrefixRoot starts every key prefix handed out by RedisURL and MemcachedAddr.
	KeyPrefixRoot = "coordd-test:"
)

// How long setup and cleanup may take before the test fails.
const (
	connectTimeout = 10 * time.Second
	cleanupTimeout = 60 * time.Second
)

const hint = "start the test services with `make test` (scripts/test-services.sh), or point %s at a reachable server"

func env(name, def string) string {
	if v := strings.TrimSpace(os.Getenv(name)); v != "" {
		return v
	}
	return def
}

// randomHex returns 2*n random hex characters.
func randomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("testenv: reading random bytes: %v", err)
	}
	return hex.EncodeToString(b)
}

// MySQLDSN creates a fresh, empty database named `coordd_test_<random hex>` on
// the server given by COORDD_TEST_MYSQL_DSN (default root@tcp(127.0.0.1:3306)/)
// and returns a DSN selecting it, with parseTime=true. Other parameters of the
// base DSN are kept. The database is dropped in t.Cleanup; close your own
// connections (or finish your transactions) before then, or the DROP waits on
// their metadata locks.
func MySQLDSN(t testing.TB) string {
	t.Helper()
	base := env(EnvMySQLDSN, DefaultMySQLDSN)
	cfg, err := mysql.ParseDSN(base)
	if err != nil {
		t.Fatalf("testenv: parsing %s=%q: %v", EnvMySQLDSN, base, err)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = connectTimeout
	}
	admin := cfg.Clone()
	admin.DBName = ""

	db, err := sql.Open("mysql", admin.FormatDSN())
	if err != nil {
		t.Fatalf("testenv: opening MySQL %s: %v", admin.Addr, err)
	}
	db.SetMaxOpenConns(1)
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		t.Fatalf("testenv: MySQL/MariaDB at %s is unreachable: %v; "+hint, admin.Addr, err, EnvMySQLDSN)
	}

	name := DatabasePrefix + randomHex(t, 8)
	if _, err := db.ExecContext(ctx, "CREATE DATABASE `"+name+"`"); err != nil {
		db.Close()
		t.Fatalf("testenv: creating database %s on %s: %v", name, admin.Addr, err)
	}

	t.Cleanup(func() {
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		// Bound the wait on metadata locks held by connections the test leaked,
		// rather than hanging until the go test timeout.
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Errorf("testenv: connecting to drop database %s: %v", name, err)
			return
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, "SET SESSION lock_wait_timeout = 30"); err != nil {
			t.Logf("testenv: setting lock_wait_timeout: %v", err)
		}
		if _, err := conn.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			t.Errorf("testenv: dropping database %s (did the test leave a transaction open?): %v", name, err)
		}
	})

	out := cfg.Clone()
	out.DBName = name
	out.ParseTime = true
	return out.FormatDSN()
}

// RedisURL returns the Redis URL from COORDD_TEST_REDIS_URL (default
// redis://127.0.0.1:6379/0) after checking the server answers PING, and a
// random key prefix "coordd-test:<hex>:". Tests must put every key they create
// under that prefix; t.Cleanup deletes the keys matching it with SCAN + DEL
// (never FLUSHDB/FLUSHALL, so other data on the server is left alone).
func RedisURL(t testing.TB) (url, keyPrefix string) {
	t.Helper()
	url = env(EnvRedisURL, DefaultRedisURL)
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("testenv: parsing %s=%q: %v", EnvRedisURL, url, err)
	}
	opts.DialTimeout = connectTimeout
	client := redis.NewClient(opts)
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		client.Close()
		t.Fatalf("testenv: Redis at %s is unreachable: %v; "+hint, opts.Addr, err, EnvRedisURL)
	}

	keyPrefix = KeyPrefixRoot + randomHex(t, 8) + ":"
	t.Cleanup(func() {
		defer client.Close()
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		if _, err := DeleteRedisPrefix(ctx, client, keyPrefix); err != nil {
			t.Errorf("testenv: deleting Redis keys %s*: %v", keyPrefix, err)
		}
	})
	return url, keyPrefix
}

// DeleteRedisPrefix deletes every key starting with prefix using SCAN + DEL
// and returns how many were deleted. prefix must not contain glob
// metacharacters (* ? [ ] \); the prefixes from RedisURL never do.
func DeleteRedisPrefix(ctx context.Context, client redis.UniversalClient, prefix string) (int64, error) {
	if prefix == "" || strings.ContainsAny(prefix, `*?[]\`) {
		return 0, fmt.Errorf("refusing to delete keys for unsafe prefix %q", prefix)
	}
	var deleted int64
	var cursor uint64
	for {
		keys, next, err := client.Scan(ctx, cursor, prefix+"*", 1000).Result()
		if err != nil {
			return deleted, err
		}
		if len(keys) > 0 {
			n, err := client.Del(ctx, keys...).Result()
			if err != nil {
				return deleted, err
			}
			deleted += n
		}
		if next == 0 {
			return deleted, nil
		}
		cursor = next
	}
}

// MemcachedAddr returns the memcached address from COORDD_TEST_MEMCACHED
// (default 127.0.0.1:11211) after checking it is reachable, and a random key
// prefix "coordd-test:<hex>:" under which the test must put its keys.
// memcached cannot enumerate keys, so nothing is deleted afterwards: the
// random prefix keeps tests apart and the keys simply age out or get evicted.
func MemcachedAddr(t testing.TB) (addr, keyPrefix string) {
	t.Helper()
	addr = env(EnvMemcached, DefaultMemcached)
	client := memcache.New(addr)
	client.Timeout = connectTimeout
	if err := client.Ping(); err != nil {
		t.Fatalf("testenv: memcached at %s is unreachable: %v; "+hint, addr, err, EnvMemcached)
	}
	_ = client.Close()
	return addr, KeyPrefixRoot + randomHex(t, 8) + ":"
}
