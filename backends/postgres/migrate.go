package postgres

import (
	"context"
	"embed"
	"fmt"
	"strings"
	"sync"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/internal/migration"
	"github.com/coordd/coordd/backends/internal/sqlstore"
)

// Migrations live in migrations/NNNN_name.sql, applied in order, every
// pending one in one transaction with their schema_migrations rows:
// PostgreSQL's DDL is transactional, so a migration that fails leaves
// nothing behind, and a reader sees the schema before or after, never half
// of it. Each file starts with a header comment saying what it does and a
// line
//
//	-- min_binary: X.Y.Z
//
// naming the oldest coordd version that may use the schema once the
// migration is applied (the rule is the same as for the other SQL stores:
// additive within a minor version; see backends/sqlite/migrate.go).
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrations parses the embedded files once.
var migrations = sync.OnceValues(func() ([]migration.File, error) {
	return migration.Load(migrationFiles, "migrations")
})

// qCreateMigrations creates the version table; it is the one table that is
// not created by a migration.
const qCreateMigrations = `CREATE TABLE IF NOT EXISTS {p}schema_migrations (
  version    bigint NOT NULL PRIMARY KEY,
  name       text   NOT NULL,
  min_binary text   NOT NULL,
  applied_at bigint NOT NULL,
  applied_by text   NOT NULL
)`

// qMigrateLock serialises Migrate across hosts: a transaction-scoped
// advisory lock on the schema and prefix, released by the server at
// commit or rollback, or when the connection dies. Two daemons starting
// together migrate once: the second waits, then finds nothing pending.
const qMigrateLock = `SELECT pg_advisory_xact_lock(hashtextextended(?, 0))`

// Schema reports the migration state without changing anything.
func (s *Store) Schema(ctx context.Context) (backends.SchemaInfo, error) {
	ms, err := migrations()
	if err != nil {
		return backends.SchemaInfo{}, err
	}
	return s.ReadSchema(ctx, ms)
}

// Migrate creates the schema when it is missing and applies pending
// migrations, all in one transaction under the migration lock. It returns
// ErrSchemaTooNew when the store's min_binary is newer than this binary
// (opts.Version; empty or unparsable counts as newest).
func (s *Store) Migrate(ctx context.Context) error {
	if s.opts.ReadOnly {
		return fmt.Errorf("migrate: %w", ErrReadOnly)
	}
	ms, err := migrations()
	if err != nil {
		return err
	}
	err = s.pool.WriteOnce(ctx, func(c *sqlstore.Tx) error {
		if _, err := c.Exec(ctx, qMigrateLock, "coordd-migrate:"+s.schema+"."+s.prefix); err != nil {
			return fmt.Errorf("take migration lock: %w", err)
		}
		if _, err := c.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+quoteIdent(s.schema)); err != nil {
			return fmt.Errorf("create schema %s: %w", s.schema, err)
		}
		return sqlstore.Migrate(ctx, c, s.dialect, qCreateMigrations, ms, s.opts.Version, func(m migration.File) error {
			return c.Script(ctx, strings.ReplaceAll(s.indexNames(m.SQL), "{channel}", channelName(s.schema, s.prefix)))
		})
	})
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	s.pool.Migrated()
	return nil
}

// indexNames replaces a migration's {i} (an index name's prefix) with the
// table prefix, quoting the name: an index lives in its table's schema
// and is named without it.
func (s *Store) indexNames(text string) string {
	var b strings.Builder
	for {
		i := strings.Index(text, "{i}")
		if i < 0 {
			b.WriteString(text)
			return b.String()
		}
		b.WriteString(text[:i])
		text = text[i+len("{i}"):]
		j := 0
		for j < len(text) && (text[j] == '_' || text[j] >= 'a' && text[j] <= 'z' || text[j] >= '0' && text[j] <= '9') {
			j++
		}
		b.WriteString(quoteIdent(s.prefix + text[:j]))
		text = text[j:]
	}
}
