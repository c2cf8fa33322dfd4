package sqlite

import (
	"context"
	"embed"
	"fmt"
	"sync"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/internal/migration"
	"github.com/coordd/coordd/backends/internal/sqlstore"
)

// Migrations live in migrations/NNNN_name.sql, applied in order, all pending
// ones in one IMMEDIATE transaction together with their schema_migrations
// rows (SQLite's DDL is transactional). Each
// file starts with a header comment saying what it does and a line
//
//	-- min_binary: X.Y.Z
//
// naming the oldest coordd version that may use the schema once the
// migration is applied. The rule: migrations within a minor version are
// additive (new tables, new nullable or defaulted columns, new indexes), so
// during a rolling upgrade the hosts still running the older binary keep
// working, and min_binary stays where it was. A migration that would break
// older binaries raises min_binary; an older binary then refuses the store
// (ErrSchemaTooNew) instead of misusing it. The recorded min_binary of a
// store is the highest of its applied migrations.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrations parses the embedded files once.
var migrations = sync.OnceValues(func() ([]migration.File, error) {
	return migration.Load(migrationFiles, "migrations")
})

// qCreateMigrations creates the version table; it is the one table that is
// not created by a migration.
const qCreateMigrations = `CREATE TABLE IF NOT EXISTS schema_migrations (
  version    INTEGER NOT NULL PRIMARY KEY,
  name       TEXT    NOT NULL,
  min_binary TEXT    NOT NULL,
  applied_at INTEGER NOT NULL,
  applied_by TEXT    NOT NULL
) STRICT`

// Schema reports the migration state without changing anything. It reads
// outside read, whose errors explain annotates with what Schema says.
func (s *Store) Schema(ctx context.Context) (backends.SchemaInfo, error) {
	ms, err := migrations()
	if err != nil {
		return backends.SchemaInfo{}, err
	}
	return s.ReadSchema(ctx, ms)
}

// Migrate applies pending migrations, all of them in one transaction: a
// reader (another process's status, plan) sees the schema before or after,
// never a store with half of this binary's columns. It returns
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
	err = s.pool.WriteOnce(ctx, func(c conn) error {
		return sqlstore.Migrate(ctx, c, dialect, qCreateMigrations, ms, s.opts.Version, func(m migration.File) error {
			return c.Script(ctx, m.SQL)
		})
	})
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	s.pool.Migrated()
	return nil
}
