package open_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	mysqldriver "github.com/go-sql-driver/mysql"

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
	if b.Cluster() == nil {
		t.Error("sqlite backend holds no cluster")
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
		"Cluster": b.Cluster() != nil, "Migrator": is[backends.Migrator](b),
		"Semaphores": b.Semaphores() != nil, "WakeRepairer": is[backends.WakeRepairer](b),
	} {
		if !ok {
			t.Errorf("mysql backend is not a %s", name)
		}
	}
	if err := b.(backends.Migrator).Migrate(t.Context()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
}

func TestOpenPostgres(t *testing.T) {
	dsn := testenv.PostgresDSN(t)
	b, err := open.Open(t.Context(), &spec.Backend{Name: "cluster", Type: spec.TypePostgres, DSN: dsn, Schema: "coordd", TablePrefix: "coordd_"}, backends.Options{Version: "0.1.0"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.Name() != "cluster" || b.Type() != spec.TypePostgres {
		t.Errorf("opened %s %s, want cluster postgres", b.Name(), b.Type())
	}
	if err := b.(backends.Migrator).Migrate(t.Context()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if _, err := b.Cluster().LoadState(t.Context()); err != nil {
		t.Fatalf("load state: %v", err)
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
	if b.Cluster() != nil {
		t.Error("memcached must not hold a cluster")
	}
}

// TestOpenErrorsHideThePassword: the errors of Open, which the CLI and the
// daemon print, show no piece of the password, whatever the driver or
// parser quotes: a MySQL DSN without the "@" after the password printed
// `dial secaudit:PlainSecret123tcp: unknown network`, a redis URL whose
// password holds "/" printed `invalid port ":q7Zr..."`.
func TestOpenErrorsHideThePassword(t *testing.T) {
	host := mysqlHost(t)
	cases := []struct {
		b       spec.Backend
		secrets []string // no piece of these may show
		want    string   // the error still says what is wrong
	}{
		{spec.Backend{Type: spec.TypeMySQL, DSN: "secaudit:PlainSecret123tcp(" + host + ")/db"}, []string{"PlainSecret123"}, `is the "@" after the password missing?`},
		{spec.Backend{Type: spec.TypeMySQL, DSN: "secaudit:Plain/Secret123@tcp(" + host + ")"}, []string{"Plain", "Secret123"}, "network"},
		{spec.Backend{Type: spec.TypeMySQL, DSN: "root:Wr0ng-Passw0rd-x@tcp(" + host + ")/coordd_none"}, []string{"Wr0ng-Passw0rd-x"}, "Access denied"},
		{spec.Backend{Type: spec.TypeRedis, URL: "redis://u:q7Zr/ab#c?d@127.0.0.1:6379/0"}, []string{"q7Zr", "ab#c?d"}, "invalid port"},
		{spec.Backend{Type: spec.TypeRedis, URL: "redis://u:Zq9%zzQ@127.0.0.1:6379/0"}, []string{"Zq9", "zzQ"}, "invalid URL escape"},
		{spec.Backend{Type: spec.TypePostgres, DSN: "host=127.0.0.1 user=u password='Unterm1natedSecret"}, []string{"Unterm1natedSecret"}, "parse dsn"},
		{spec.Backend{Type: spec.TypePostgres, DSN: "postgres://u:Pg%zzSecret99@127.0.0.1/x"}, []string{"Pg%zzSecret99", "Secret99"}, "parse dsn"},
		{spec.Backend{Type: spec.TypePostgres, DSN: "postgres://u:RefusedSecret7@127.0.0.1:1/x?connect_timeout=5"}, []string{"RefusedSecret7"}, "127.0.0.1"},
		{spec.Backend{Type: spec.TypePostgres, DSN: "host=127.0.0.1 port=1 user=u password=KwSecret8x connect_timeout=5"}, []string{"KwSecret8x"}, "127.0.0.1"},
	}
	for _, c := range cases {
		c.b.Name = "db"
		c.b.TablePrefix = "coordd_"
		b, err := open.Open(t.Context(), &c.b, backends.Options{ReadOnly: true})
		if err == nil {
			b.Close()
			t.Errorf("%s%s: opened", c.b.DSN, c.b.URL)
			continue
		}
		msg := open.Wrap("db", err).Error()
		for _, s := range c.secrets {
			if strings.Contains(msg, s) {
				t.Errorf("%s%s: the error shows %q: %s", c.b.DSN, c.b.URL, s, msg)
			}
		}
		if !strings.Contains(msg, c.want) {
			t.Errorf("%s%s: the error %q does not say %q", c.b.DSN, c.b.URL, msg, c.want)
		}
	}
}

// mysqlHost is the host:port of the test MySQL server.
func mysqlHost(t *testing.T) string {
	t.Helper()
	cfg, err := mysqldriver.ParseDSN(testenv.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Addr
}
