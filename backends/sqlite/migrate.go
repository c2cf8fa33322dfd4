package sqlite

import (
	"bufio"
	"context"
	"embed"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/coordd/coordd/backends"
)

// Migrations live in migrations/NNNN_name.sql, applied in order, each in its
// own IMMEDIATE transaction together with its schema_migrations row. Each
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

// migration is one embedded migration file.
type migration struct {
	version   int
	name      string
	minBinary string
	sql       string
}

var (
	migrationName = regexp.MustCompile(`^([0-9]{4})_([a-z0-9_]+)\.sql$`)
	minBinaryLine = regexp.MustCompile(`^--\s*min_binary:\s*(\S+)\s*$`)
)

// migrations parses the embedded files once. Versions must run 1, 2, 3...
var migrations = sync.OnceValues(func() ([]migration, error) {
	ents, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, e := range ents {
		m := migrationName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("migration %s: name is not NNNN_name.sql", e.Name())
		}
		v, _ := strconv.Atoi(m[1])
		b, err := migrationFiles.ReadFile("migrations/" + e.Name())
		if err != nil {
			return nil, err
		}
		mig := migration{version: v, name: m[2], sql: string(b)}
		sc := bufio.NewScanner(strings.NewReader(mig.sql))
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if !strings.HasPrefix(line, "--") {
				break // the header ends at the first line that is not a comment
			}
			if mm := minBinaryLine.FindStringSubmatch(line); mm != nil {
				mig.minBinary = mm[1]
			}
		}
		if _, ok := parseVersion(mig.minBinary); !ok {
			return nil, fmt.Errorf("migration %s: header lacks a valid '-- min_binary: X.Y.Z' line", e.Name())
		}
		ms = append(ms, mig)
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	for i, m := range ms {
		if m.version != i+1 {
			return nil, fmt.Errorf("migration %04d_%s: expected version %d", m.version, m.name, i+1)
		}
	}
	return ms, nil
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

// Schema reports the migration state without changing anything.
func (s *Store) Schema(ctx context.Context) (backends.SchemaInfo, error) {
	ms, err := migrations()
	if err != nil {
		return backends.SchemaInfo{}, err
	}
	info := backends.SchemaInfo{Latest: len(ms)}
	_, err = s.read(ctx, func(c conn) error {
		v, mb, err := applied(ctx, c)
		info.Version, info.MinBinary = v, mb
		return err
	})
	if err != nil {
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
		if minBinary == "" || versionLess(minBinary, mb) {
			minBinary = mb
		}
	}
	return version, minBinary, rows.Err()
}

// Migrate applies pending migrations. It returns ErrSchemaTooNew when the
// store's min_binary is newer than this binary (opts.Version; empty or
// unparsable counts as newest).
func (s *Store) Migrate(ctx context.Context) error {
	if s.opts.ReadOnly {
		return fmt.Errorf("migrate: %w", ErrReadOnly)
	}
	ms, err := migrations()
	if err != nil {
		return err
	}
	for {
		done := false
		err := s.writeTx(ctx, func(c conn) error {
			if _, err := c.exec(ctx, qCreateMigrations); err != nil {
				return err
			}
			version, minBinary, err := applied(ctx, c)
			if err != nil {
				return err
			}
			if versionLess(s.opts.Version, minBinary) {
				return fmt.Errorf("schema needs coordd %s or newer, this is %s: %w", minBinary, s.opts.Version, backends.ErrSchemaTooNew)
			}
			if version >= len(ms) {
				done = true
				return nil
			}
			m := ms[version]
			if err := c.script(ctx, m.sql); err != nil {
				return fmt.Errorf("apply %04d_%s: %w", m.version, m.name, err)
			}
			_, err = c.exec(ctx, qRecordMigration, m.version, m.name, m.minBinary, s.opts.Version)
			return err
		})
		if err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		if done {
			s.schema.Store(true)
			return nil
		}
	}
}

// parseVersion parses "vMAJOR.MINOR.PATCH", ignoring a -pre or +build
// suffix; missing parts count as 0.
func parseVersion(v string) ([3]int, bool) {
	var out [3]int
	v = strings.TrimPrefix(strings.TrimSpace(v), "v")
	if i := strings.IndexAny(v, "-+"); i >= 0 {
		v = v[:i]
	}
	if v == "" {
		return out, false
	}
	parts := strings.Split(v, ".")
	if len(parts) > 3 {
		return out, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return out, false
		}
		out[i] = n
	}
	return out, true
}

// versionLess reports whether a is older than b. An empty or unparsable a
// is a development build and counts as newest; an unparsable b as oldest.
func versionLess(a, b string) bool {
	va, ok := parseVersion(a)
	if !ok {
		return false
	}
	vb, ok := parseVersion(b)
	if !ok {
		return false
	}
	for i := range va {
		if va[i] != vb[i] {
			return va[i] < vb[i]
		}
	}
	return false
}
