package testenv

import (
	"context"
	"database/sql"
	"net/url"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
)

// EnvPostgresDSN names the PostgreSQL server of PostgresDSN, as a URL of
// a database the tests may connect to (to create their own).
const (
	EnvPostgresDSN     = "COORDD_TEST_POSTGRES_DSN"
	DefaultPostgresDSN = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
)

// PostgresDSN creates a fresh, empty database named `coordd_test_<random
// hex>` on the server given by COORDD_TEST_POSTGRES_DSN (default
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable) and returns
// the same URL selecting it. The database is dropped in t.Cleanup, with
// FORCE: connections the test left open are ended first.
func PostgresDSN(t testing.TB) string {
	t.Helper()
	base := env(EnvPostgresDSN, DefaultPostgresDSN)
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Fatalf("testenv: %s=%q is not a postgres:// URL (%v)", EnvPostgresDSN, base, err)
	}
	q := u.Query()
	if q.Get("connect_timeout") == "" {
		q.Set("connect_timeout", "10")
		u.RawQuery = q.Encode()
	}
	db, err := sql.Open("pgx", u.String())
	if err != nil {
		t.Fatalf("testenv: opening PostgreSQL %s: %v", u.Host, err)
	}
	db.SetMaxOpenConns(1)
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		t.Fatalf("testenv: PostgreSQL at %s is unreachable: %v; "+hint, u.Host, err, EnvPostgresDSN)
	}
	name := DatabasePrefix + randomHex(t, 8)
	if _, err := db.ExecContext(ctx, `CREATE DATABASE "`+name+`"`); err != nil {
		db.Close()
		t.Fatalf("testenv: creating database %s on %s: %v", name, u.Host, err)
	}
	t.Cleanup(func() {
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		if _, err := db.ExecContext(ctx, `DROP DATABASE IF EXISTS "`+name+`" WITH (FORCE)`); err != nil {
			t.Errorf("testenv: dropping database %s: %v", name, err)
		}
	})
	out := *u
	out.Path = "/" + name
	return out.String()
}
