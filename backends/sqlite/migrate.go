package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"sync"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/internal/migration"
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

// qMigrations lists applied migrations.
const qMigrations = `SELECT version, min_binary FROM schema_migrations`

// qRecordMigration records one applied migration at backend time.
const qRecordMigration = `INSERT INTO schema_migrations (version, name, min_binary, applied_at, applied_by)
VALUES (?, ?, ?, ` + nowSQL + `, ?)`

// Schema reports the migration state without changing anything. It reads
// outside read, whose errors explain annotates with what Schema says.
func (s *Store) Schema(ctx context.Context) (backends.SchemaInfo, error) {
	ms, err := migrations()
	if err != nil {
		return backends.SchemaInfo{}, err
	}
	info := backends.SchemaInfo{Latest: len(ms)}
	if s.absent {
		return info, nil
	}
	var n int
	if err := s.on(nil).row(ctx, qHasSchema).Scan(&n); err != nil {
		return backends.SchemaInfo{}, fmt.Errorf("read schema: %w", err)
	}
	if n == 0 {
		return info, nil
	}
	s.trips.Add(1)
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return backends.SchemaInfo{}, fmt.Errorf("read schema: %w", err)
	}
	defer tx.Rollback()
	if info.Version, info.MinBinary, err = applied(ctx, s.on(tx)); err != nil {
		return backends.SchemaInfo{}, fmt.Errorf("read schema: %w", err)
	}
	return info, nil
}

// applied returns the highest applied version and the recorded min_binary.
func applied(ctx context.Context, c conn) (version int, minBinary string, err error) {
	rows, err := c.query(ctx, qMigrations)
	if err != nil {
		return 0, "", err
	}
	defer rows.Close()
	for rows.Next() {
		var v int
		var mb string
		if err := rows.Scan(&v, &mb); err != nil {
			return 0, "", err
		}
		version = max(version, v)
		if minBinary == "" || migration.VersionLess(minBinary, mb) {
			minBinary = mb
		}
	}
	return version, minBinary, rows.Err()
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
	err = s.writeTx(ctx, func(c conn) error {
		if _, err := c.exec(ctx, qCreateMigrations); err != nil {
			return err
		}
		version, minBinary, err := applied(ctx, c)
		if err != nil {
			return err
		}
		if migration.VersionLess(s.opts.Version, minBinary) {
			return fmt.Errorf("schema needs coordd %s or newer, this is %s: %w", minBinary, s.opts.Version, backends.ErrSchemaTooNew)
		}
		for _, m := range ms[min(version, len(ms)):] {
			if err := c.script(ctx, m.SQL); err != nil {
				return fmt.Errorf("apply %04d_%s: %w", m.Version, m.Name, err)
			}
			if _, err := c.exec(ctx, qRecordMigration, m.Version, m.Name, m.MinBinary, s.opts.Version); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	s.schema.Store(true)
	return nil
}
