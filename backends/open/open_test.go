package open_test

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/open"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/spec"
)

func TestOpenSQLite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db", "coordd.db")
	b, err := open.Open(t.Context(), &spec.Backend{Name: "embedded", Type: spec.TypeSQLite, Path: path}, backends.Options{Version: "0.1.0"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.Name() != "embedded" || b.Type() != spec.TypeSQLite {
		t.Errorf("opened %s %s, want embedded sqlite", b.Name(), b.Type())
	}
	if _, ok := b.(backends.StateStore); !ok {
		t.Error("sqlite backend is not a StateStore")
	}
}

func TestOpenUnknown(t *testing.T) {
	for _, sb := range []*spec.Backend{nil, {Name: "x", Type: "etcd"}, {Name: "x"}} {
		b, err := open.Open(t.Context(), sb, backends.Options{})
		if err == nil || b != nil || errors.Is(err, backends.ErrUnsupported) {
			t.Errorf("open %+v = %v, %v; want a plain error", sb, b, err)
		}
	}
}

func TestOpenSQLiteError(t *testing.T) {
	b, err := open.Open(t.Context(), &spec.Backend{Name: "x", Type: spec.TypeSQLite}, backends.Options{})
	if err == nil || b != nil {
		t.Errorf("open with empty path = %v, %v; want an error and a nil backend", b, err)
	}
}

func TestOpenMySQL(t *testing.T) {
	dsn := testenv.MySQLDSN(t)
	b, err := open.Open(t.Context(), &spec.Backend{Name: "cluster", Type: spec.TypeMySQL, DSN: dsn, TablePrefix: "coordd_"}, backends.Options{Version: "0.1.0"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.Name() != "cluster" || b.Type() != spec.TypeMySQL {
		t.Errorf("opened %s %s, want cluster mysql", b.Name(), b.Type())
	}
	for name, ok := range map[string]bool{
		"StateStore": is[backends.StateStore](b), "Migrator": is[backends.Migrator](b),
		"Semaphores": is[backends.Semaphores](b), "Leader": is[backends.Leader](b),
	} {
		if !ok {
			t.Errorf("mysql backend is not a %s", name)
		}
	}
	if err := b.(backends.Migrator).Migrate(t.Context()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
}

func TestOpenMySQLError(t *testing.T) {
	for _, sb := range []*spec.Backend{
		{Name: "x", Type: spec.TypeMySQL, DSN: "not a dsn"},
		{Name: "x", Type: spec.TypeMySQL, DSN: "root@tcp(127.0.0.1:3306)/"}, // no database
	} {
		b, err := open.Open(t.Context(), sb, backends.Options{})
		if err == nil || b != nil {
			t.Errorf("open %q = %v, %v; want an error and a nil backend", sb.DSN, b, err)
		}
	}
}

func is[T any](b backends.Backend) bool {
	_, ok := b.(T)
	return ok
}

func TestOpenRedis(t *testing.T) {
	url, prefix := testenv.RedisURL(t)
	b, err := open.Open(t.Context(), &spec.Backend{Name: "cache", Type: spec.TypeRedis, URL: url, KeyPrefix: prefix}, backends.Options{Version: "0.1.0"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.Name() != "cache" || b.Type() != spec.TypeRedis {
		t.Errorf("opened %s %s, want cache redis", b.Name(), b.Type())
	}
	if _, err := b.Now(t.Context()); err != nil {
		t.Errorf("now: %v", err)
	}
}

func TestOpenMemcached(t *testing.T) {
	addr, prefix := testenv.MemcachedAddr(t)
	b, err := open.Open(t.Context(), &spec.Backend{Name: "mc", Type: spec.TypeMemcached, Servers: []string{addr}, KeyPrefix: prefix}, backends.Options{Version: "0.1.0"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.Name() != "mc" || b.Type() != spec.TypeMemcached {
		t.Errorf("opened %s %s, want mc memcached", b.Name(), b.Type())
	}
	if _, ok := b.(backends.StateStore); ok {
		t.Error("memcached must not be a StateStore")
	}
}
