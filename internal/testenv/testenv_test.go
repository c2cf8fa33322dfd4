package testenv

// These tests run against the real servers. They prove that `make test`
// brought MariaDB/MySQL, Redis and memcached up and that the helpers isolate
// and clean up after themselves.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func openMySQL(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatalf("sql.Open(%q): %v", dsn, err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func schemaExists(t *testing.T, name string) bool {
	t.Helper()
	db := openMySQL(t, env(EnvMySQLDSN, DefaultMySQLDSN))
	var n int
	err := db.QueryRowContext(ctxT(t),
		"SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", name).Scan(&n)
	if err != nil {
		t.Fatalf("querying information_schema: %v", err)
	}
	return n > 0
}

func TestMySQLDSN(t *testing.T) {
	var dbName string
	t.Run("use", func(t *testing.T) {
		dsn := MySQLDSN(t)
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			t.Fatalf("returned DSN %q does not parse: %v", dsn, err)
		}
		dbName = cfg.DBName
		if !strings.HasPrefix(dbName, DatabasePrefix) || !cfg.ParseTime {
			t.Fatalf("DSN %q: want database %s<hex> and parseTime=true", dsn, DatabasePrefix)
		}
		if other := MySQLDSN(t); other == dsn {
			t.Fatalf("two calls returned the same DSN %q", dsn)
		}

		db := openMySQL(t, dsn)
		ctx := ctxT(t)
		var current string
		if err := db.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&current); err != nil || current != dbName {
			t.Fatalf("SELECT DATABASE() = %q, %v; want %q", current, err, dbName)
		}
		if _, err := db.ExecContext(ctx, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(32), at DATETIME(6)) ENGINE=InnoDB"); err != nil {
			t.Fatalf("CREATE TABLE: %v", err)
		}
		now := time.Now().UTC().Truncate(time.Microsecond)
		if _, err := db.ExecContext(ctx, "INSERT INTO t VALUES (1, 'hello', ?)", now); err != nil {
			t.Fatalf("INSERT: %v", err)
		}
		var v string
		var at time.Time // scanning DATETIME into time.Time needs parseTime=true
		if err := db.QueryRowContext(ctx, "SELECT v, at FROM t WHERE id = 1").Scan(&v, &at); err != nil {
			t.Fatalf("SELECT: %v", err)
		}
		if v != "hello" || !at.Equal(now) {
			t.Fatalf("read back (%q, %v), want (%q, %v)", v, at, "hello", now)
		}
		if !schemaExists(t, dbName) {
			t.Fatalf("database %s not visible in information_schema", dbName)
		}
	})
	if dbName == "" {
		t.Fatal("subtest did not get a database")
	}
	if schemaExists(t, dbName) {
		t.Fatalf("database %s still exists after cleanup", dbName)
	}
}

// Later tests kill sessions (simulated crashes); the test server's user must
// have the PROCESS and CONNECTION_ADMIN/SUPER privileges of a real admin.
func TestMySQLKillPrivilege(t *testing.T) {
	db := openMySQL(t, MySQLDSN(t))
	ctx := ctxT(t)
	victim, err := db.Conn(ctx)
	if err != nil {
		t.Fatalf("db.Conn: %v", err)
	}
	defer victim.Close()
	var id int64
	if err := victim.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		t.Fatalf("CONNECTION_ID: %v", err)
	}
	var seen int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?", id).Scan(&seen); err != nil || seen != 1 {
		t.Fatalf("other session %d not visible in PROCESSLIST (count %d, err %v): missing PROCESS privilege?", id, seen, err)
	}
	if _, err := db.ExecContext(ctx, fmt.Sprintf("KILL %d", id)); err != nil {
		t.Fatalf("KILL %d: %v", id, err)
	}
	if err := victim.PingContext(ctx); err == nil {
		t.Fatalf("killed connection %d still answers", id)
	}
}

func TestRedisURL(t *testing.T) {
	url, _ := RedisURL(t)
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(opts)
	t.Cleanup(func() { client.Close() })
	ctx := ctxT(t)

	// A key outside the helper's prefix (but looking similar) must survive its cleanup.
	control := KeyPrefixRoot + "control-" + randomHex(t, 8)
	if err := client.Set(ctx, control, "keep", time.Minute).Err(); err != nil {
		t.Fatalf("SET control: %v", err)
	}
	defer client.Del(context.Background(), control)

	const nKeys = 2500 // several SCAN pages
	var prefix string
	t.Run("use", func(t *testing.T) {
		var u string
		u, prefix = RedisURL(t)
		if u != url || !strings.HasPrefix(prefix, KeyPrefixRoot) || !strings.HasSuffix(prefix, ":") {
			t.Fatalf("RedisURL() = %q, %q", u, prefix)
		}
		if _, other := RedisURL(t); other == prefix {
			t.Fatalf("two calls returned the same prefix %q", prefix)
		}
		pipe := client.Pipeline()
		for i := 0; i < nKeys; i++ {
			pipe.Set(ctx, fmt.Sprintf("%s%d", prefix, i), i, 0)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatalf("pipelined SET: %v", err)
		}
		if got, err := client.Get(ctx, prefix+"42").Result(); err != nil || got != "42" {
			t.Fatalf("GET = %q, %v; want 42", got, err)
		}
	})

	keys, _, err := client.Scan(ctx, 0, prefix+"*", 10000).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := client.Exists(ctx, prefix+"0", prefix+"42", prefix+"2499").Result(); n != 0 || len(keys) != 0 {
		t.Fatalf("keys under %s survived cleanup (exists=%d, scan=%d)", prefix, n, len(keys))
	}
	if got, err := client.Get(ctx, control).Result(); err != nil || got != "keep" {
		t.Fatalf("control key %s was touched by cleanup: %q, %v", control, got, err)
	}
}

func TestDeleteRedisPrefixRefusesUnsafe(t *testing.T) {
	for _, p := range []string{"", "*", "a?", "x[1]"} {
		if _, err := DeleteRedisPrefix(context.Background(), redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), p); err == nil {
			t.Errorf("DeleteRedisPrefix(%q) did not refuse", p)
		}
	}
}

func TestMemcachedAddr(t *testing.T) {
	addr, prefix := MemcachedAddr(t)
	if _, other := MemcachedAddr(t); other == prefix || !strings.HasPrefix(prefix, KeyPrefixRoot) {
		t.Fatalf("prefixes %q and %q: want distinct, starting with %q", prefix, other, KeyPrefixRoot)
	}
	mc := memcache.New(addr)
	defer mc.Close()
	key := prefix + "greeting"
	if err := mc.Set(&memcache.Item{Key: key, Value: []byte("hello"), Expiration: 60}); err != nil {
		t.Fatalf("Set: %v", err)
	}
	it, err := mc.Get(key)
	if err != nil || string(it.Value) != "hello" {
		t.Fatalf("Get = %v, %v; want hello", it, err)
	}
	if err := mc.Add(&memcache.Item{Key: key, Value: []byte("again")}); !errors.Is(err, memcache.ErrNotStored) {
		t.Fatalf("Add on existing key = %v, want ErrNotStored", err)
	}
	if err := mc.Delete(key); err != nil {
		t.Fatalf("Delete: %v", err)
	}
}

// TestPostgresDSNIsolatesAndDrops: each call gets a database of its own,
// which is gone after the test.
func TestPostgresDSNIsolatesAndDrops(t *testing.T) {
	var name string
	t.Run("use", func(t *testing.T) {
		dsn := PostgresDSN(t)
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if err := db.QueryRowContext(ctxT(t), `SELECT current_database()`).Scan(&name); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(name, DatabasePrefix) {
			t.Fatalf("database %q, want %s<hex>", name, DatabasePrefix)
		}
		if other := PostgresDSN(t); other == dsn {
			t.Fatalf("two calls returned the same database %s", dsn)
		}
	})
	db, err := sql.Open("pgx", env(EnvPostgresDSN, DefaultPostgresDSN))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRowContext(ctxT(t), `SELECT count(*) FROM pg_database WHERE datname = $1`, name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("database %s still exists after its test", name)
	}
}
