package mysql

import (
	"bufio"
	"context"
	"crypto/sha256"
	"database/sql"
	sqldriver "database/sql/driver"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	driver "github.com/go-sql-driver/mysql"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/internal/migration"
	"github.com/coordd/coordd/backends/internal/sqlstore"
)

// Migrations live in migrations/NNNN_name.sql, applied in order, each
// followed by its schema_migrations row. Table names in them start with {p},
// the table prefix. Each file starts with a header comment saying what it
// does and a line
//
//	-- min_binary: X.Y.Z
//
// naming the oldest coordd version that may use the schema once the
// migration is applied; the rule is SQLite's (see backends/sqlite/migrate.go):
// migrations within a minor version are additive and keep min_binary, one
// that would break older binaries raises it, and an older binary then
// refuses the store with ErrSchemaTooNew. The recorded min_binary of a store
// is the highest of its applied migrations.
//
// MariaDB and MySQL commit DDL implicitly, so a migration is not atomic.
// Instead every statement is idempotent (CREATE TABLE IF NOT EXISTS with
// inline indexes; later migrations must use IF NOT EXISTS / IF EXISTS forms
// too) and the whole run holds a named lock (GET_LOCK), so two hosts
// migrating at once serialise and a run cut short is completed by the next.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// script is one embedded migration file split into statements, since the
// driver sends one statement at a time.
type script struct {
	migration.File
	stmts []string // statements with {p} still in place
}

// migrations parses the embedded files once.
var migrations = sync.OnceValues(func() ([]script, error) {
	files, err := migration.Load(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	ms := make([]script, len(files))
	for i, f := range files {
		ms[i].File = f
		if ms[i].stmts, err = statements(f.SQL); err != nil {
			return nil, fmt.Errorf("migration %04d_%s: %w", f.Version, f.Name, err)
		}
	}
	return ms, nil
})

// statements splits a migration into its statements: comment lines are
// dropped (statements never hold "--") and a statement ends with a line
// that ends in ';'.
func statements(sql string) ([]string, error) {
	var out []string
	var cur strings.Builder
	sc := bufio.NewScanner(strings.NewReader(sql))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "--") {
			continue
		}
		cur.WriteString(sc.Text())
		cur.WriteString("\n")
		if strings.HasSuffix(line, ";") {
			out = append(out, strings.TrimSuffix(strings.TrimSpace(cur.String()), ";"))
			cur.Reset()
		}
	}
	if strings.TrimSpace(cur.String()) != "" {
		return nil, fmt.Errorf("last statement lacks a ';'")
	}
	return out, nil
}

// rerun reports the error of a DDL statement that a run cut short has
// already applied: MySQL 8 has no ADD COLUMN IF NOT EXISTS (MariaDB has), so
// such statements are written plainly and this error skips them.
func rerun(err error) bool {
	var me *driver.MySQLError
	return errors.As(err, &me) && (me.Number == errDupFieldName || me.Number == errDupKeyName)
}

// qCreateMigrations creates the version table; it is the one table that is
// not created by a migration.
const qCreateMigrations = "CREATE TABLE IF NOT EXISTS `{p}schema_migrations` (\n" +
	`  version    INT          NOT NULL,
  name       VARCHAR(255) NOT NULL,
  min_binary VARCHAR(64)  NOT NULL,
  applied_at BIGINT       NOT NULL,
  applied_by VARCHAR(64)  NOT NULL,
  PRIMARY KEY (version)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`

// migrateLockTimeout bounds how long Migrate waits for another host's run.
const migrateLockTimeout = 60 * time.Second

// qGetLock and qReleaseLock take and release the migration lock: a named
// lock held by one session. GET_LOCK returns 1 when taken, 0 on timeout.
const (
	qGetLock     = `SELECT GET_LOCK(?, ?)`
	qReleaseLock = `SELECT RELEASE_LOCK(?)`
)

// migrateLockName names the migration lock of this database and prefix.
// Lock names are server-wide and at most 64 characters, so the pair is
// hashed: "coordd-migrate-" plus 32 hex digits.
func (s *Store) migrateLockName() string {
	h := sha256.Sum256([]byte(s.dbName + "\x00" + s.prefix))
	return "coordd-migrate-" + hex.EncodeToString(h[:16])
}

// Schema reports the migration state without changing anything. It reads
// outside read, whose errors explain annotates with what Schema says.
func (s *Store) Schema(ctx context.Context) (backends.SchemaInfo, error) {
	ms, err := migrationList()
	if err != nil {
		return backends.SchemaInfo{}, err
	}
	return s.ReadSchema(ctx, ms)
}

// Migrate applies pending migrations under the migration lock. It returns
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
	if err := s.migrate(ctx, ms); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	s.pool.Migrated()
	return nil
}

func (s *Store) migrate(ctx context.Context, ms []script) (err error) {
	// GET_LOCK belongs to a session: take it, migrate and release it on one
	// dedicated connection.
	sc, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer sc.Close()
	lock := s.migrateLockName()
	var got sql.NullInt64
	s.pool.CountTrip()
	if err := sc.QueryRowContext(ctx, qGetLock, lock, int(migrateLockTimeout/time.Second)).Scan(&got); err != nil {
		return fmt.Errorf("take migration lock: %w", err)
	}
	if got.Int64 != 1 {
		return fmt.Errorf("take migration lock %s: another host has been migrating for %v", lock, migrateLockTimeout)
	}
	defer func() {
		s.pool.CountTrip()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		var rel sql.NullInt64
		if rerr := sc.QueryRowContext(rctx, qReleaseLock, lock).Scan(&rel); rerr != nil {
			// Never return a session that may still hold the lock to the
			// pool: a failed release means a broken connection anyway.
			_ = sc.Raw(func(any) error { return sqldriver.ErrBadConn })
			if err == nil {
				err = fmt.Errorf("release migration lock: %w", rerr)
			}
		}
	}()
	c := sessionConn{s: s, c: sc}
	files, err := migrationList()
	if err != nil {
		return err
	}
	return sqlstore.Migrate(ctx, c, s.dialect, s.q(qCreateMigrations), files, s.opts.Version, func(f migration.File) error {
		for _, st := range ms[f.Version-1].stmts {
			if _, err := c.Exec(ctx, s.q(st)); err != nil && !rerun(err) {
				return err
			}
		}
		return nil
	})
}

// migrationList is the embedded migrations as package migration has them.
func migrationList() ([]migration.File, error) {
	ms, err := migrations()
	if err != nil {
		return nil, err
	}
	files := make([]migration.File, len(ms))
	for i, m := range ms {
		files[i] = m.File
	}
	return files, nil
}
