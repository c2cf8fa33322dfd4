package sqlstore

import (
	"context"
	"fmt"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/internal/migration"
)

// Schema changes are numbered migrations (package migration) that each SQL
// store embeds in its own SQL and applies itself, recording each in the
// schema_migrations table. How a run is made safe differs: SQLite and
// PostgreSQL apply every pending migration in one transaction (their DDL is
// transactional); MySQL commits DDL implicitly, so it serialises runs with a
// named lock and writes every statement so that running it again is
// harmless. The loop and the version rule are the same everywhere.
var (
	// qMigrations lists applied migrations.
	qMigrations = Query{SQL: `SELECT version, min_binary FROM {p}schema_migrations`}

	// qRecordMigration records one applied migration at store time. On
	// MySQL a run cut short after its insert is completed by the next one,
	// so the insert ignores a row already there.
	qRecordMigration = Query{
		SQL:   `INSERT INTO {p}schema_migrations (version, name, min_binary, applied_at, applied_by) VALUES (?, ?, ?, {now}, ?)`,
		MySQL: `INSERT IGNORE INTO {p}schema_migrations (version, name, min_binary, applied_at, applied_by) VALUES (?, ?, ?, {now}, ?)`,
	}
)

// applied returns the highest applied version and the recorded min_binary
// (the highest of the applied migrations').
func applied(ctx context.Context, c Conn, d *Dialect) (version int, minBinary string, err error) {
	rows, err := c.Query(ctx, d.Text(qMigrations))
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

// ReadSchema reports the migration state of the store, of which ms are the
// migrations this binary knows, without changing anything. A store without
// the version table is at version 0. It reads on the pool (DB.Direct), so
// that a store's error annotation may call it.
func (s *Core) ReadSchema(ctx context.Context, ms []migration.File) (backends.SchemaInfo, error) {
	info := backends.SchemaInfo{Latest: len(ms)}
	d := s.DB.Dialect()
	err := s.DB.Direct(ctx, func(c Conn) (err error) {
		info.Version, info.MinBinary, err = applied(ctx, c, d)
		return err
	})
	if err != nil && !d.IsNoSuchTable(err) {
		return backends.SchemaInfo{}, fmt.Errorf("read schema: %w", err)
	}
	return info, nil
}

// Migrate applies the migrations of ms that c's store lacks, in order: it
// creates the version table (createTable), refuses a store whose
// min_binary is newer than binary (ErrSchemaTooNew; an empty or unparsable
// binary counts as newest), then applies each pending migration with apply
// and records it. The caller runs it inside what makes a run safe on its
// store (a transaction, a lock).
func Migrate(ctx context.Context, c Conn, d *Dialect, createTable string, ms []migration.File, binary string, apply func(migration.File) error) error {
	if _, err := c.Exec(ctx, createTable); err != nil {
		return err
	}
	version, minBinary, err := applied(ctx, c, d)
	if err != nil {
		return err
	}
	if migration.VersionLess(binary, minBinary) {
		return fmt.Errorf("schema needs coordd %s or newer, this is %s: %w", minBinary, binary, backends.ErrSchemaTooNew)
	}
	for _, m := range ms[min(version, len(ms)):] {
		if err := apply(m); err != nil {
			return fmt.Errorf("apply %04d_%s: %w", m.Version, m.Name, err)
		}
		if _, err := c.Exec(ctx, d.Text(qRecordMigration), m.Version, m.Name, m.MinBinary, binary); err != nil {
			return fmt.Errorf("record %04d_%s: %w", m.Version, m.Name, err)
		}
	}
	return nil
}
