package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/internal/sqlstore"
	"github.com/coordd/coordd/spec"
)

// ErrReadOnly is returned by every write on a store opened with
// Options.ReadOnly.
var ErrReadOnly = sqlstore.ErrReadOnly

// Compile-time checks of the capabilities the store implements.
var (
	_ backends.Backend  = (*Store)(nil)
	_ backends.Migrator = (*Store)(nil)
)

// txAttempts bounds the runs of a write transaction that PostgreSQL rolled
// back (a deadlock, a serialisation failure, a lock it could not take).
const txAttempts = 6

// Identifier rules, checked again here because the names are spliced into
// SQL text (quoted): the spec loader's rules for schema and table_prefix.
var (
	schemaPattern = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)
	prefixPattern = regexp.MustCompile(`^[a-zA-Z0-9_]{0,32}$`)
)

// Store is one handle on a PostgreSQL database. It is safe for concurrent
// use; several Stores (on one host or many) may share one database, schema
// and prefix.
type Store struct {
	// Core is what every SQL store shares: the cluster's state, hosts,
	// the leader lease, semaphores, cron, queues.
	sqlstore.Core

	name    string
	schema  string
	prefix  string
	opts    backends.Options
	db      *sql.DB
	dialect *sqlstore.Dialect
	pool    *sqlstore.Pool
	// listen wakes idle queue workers on NOTIFY (wake.go), unless
	// pollWake.
	listen   *listener
	pollWake bool
	// batches gathers keyless pushes and acks (queue_batch.go).
	batches queueBatches
	// claimCfg caches the queues' configs for the claim (queue_claim.go).
	claimCfg claimConfigs
	// mates tracks the claims whose jobs are not all finished
	// (queue_mates.go).
	mates claimMates
	// database is the database's name, part of the advisory lock keys of
	// mode session; sess the connections and holders of that mode
	// (session.go).
	database string
	sess     *sessions
}

// Open connects to the database named by dsn (a postgres:// URL or
// keyword/value pairs, as libpq reads them) and checks that it answers.
// coordd's tables live in schema (created by Migrate when missing), named
// with tablePrefix. It does not migrate; call Migrate. Every session runs
// in UTC; nothing coordd stores depends on the zone, but messages read the
// same on every host.
func Open(ctx context.Context, name, dsn, schema, tablePrefix string, opts backends.Options) (*Store, error) {
	if schema == "" {
		schema = "public"
	}
	if !schemaPattern.MatchString(schema) {
		return nil, fmt.Errorf("postgres %q: invalid schema %q", name, schema)
	}
	if !prefixPattern.MatchString(tablePrefix) {
		return nil, fmt.Errorf("postgres %q: invalid table prefix %q", name, tablePrefix)
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres %q: parse dsn: %w", name, err)
	}
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	conns, err := poolSize(cfg.RuntimeParams)
	if err != nil {
		return nil, fmt.Errorf("postgres %q: %w", name, err)
	}
	cfg.RuntimeParams["timezone"] = "UTC"
	if cfg.RuntimeParams["application_name"] == "" {
		cfg.RuntimeParams["application_name"] = "coordd"
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 10 * time.Second
	}
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	s := &Store{name: name, schema: schema, prefix: tablePrefix, opts: opts, db: db, pollWake: opts.PollWake, sess: newSessions()}
	s.listen = &listener{cfg: cfg.Copy(), channel: channelName(schema, tablePrefix)}
	s.batches.init()
	s.dialect = newDialect(schema, tablePrefix)
	s.pool = &sqlstore.Pool{
		SQL: db, D: s.dialect, ReadOnly: opts.ReadOnly, Autocommit: true, Attempts: txAttempts,
		Retryable: retryable, NoSuchColumn: isNoSuchColumn, Schema: s.Schema,
	}
	s.pool.Init()
	s.Core = sqlstore.Core{DB: s.pool}
	var version string
	s.pool.CountTrip()
	if err := db.QueryRowContext(ctx, qVersion).Scan(&version, &s.database); err != nil {
		db.Close()
		return nil, fmt.Errorf("postgres %q at %s/%s: %w", name, net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), cfg.Database, connectCause(err))
	}
	return s, nil
}

// connectCause is the dial error alone when the server could not be
// reached: pgx's error around it names the user, the database and the
// address again, which the caller's message already says once.
func connectCause(err error) error {
	var dial *net.OpError
	if errors.As(err, &dial) {
		return dial
	}
	return err
}

// maxOpenConns bounds the connections of the statement pool unless the
// DSN's pool_max_conns says otherwise: enough for every worker of a busy
// host.
const maxOpenConns = 16

// poolSize takes pool_max_conns (pgxpool's name for it) out of the DSN's
// parameters, which pgx would otherwise send to the server as a setting.
func poolSize(params map[string]string) (int, error) {
	v, ok := params["pool_max_conns"]
	if !ok {
		return maxOpenConns, nil
	}
	delete(params, "pool_max_conns")
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 1000 {
		return 0, fmt.Errorf("pool_max_conns %q: want a number from 1 to 1000", v)
	}
	return n, nil
}

// qVersion reads the server's version and the database's name; Open sends
// it to check that the server answers. The name is part of the advisory
// lock keys (session.go), read from the server so that every host agrees
// whatever its DSN says.
const qVersion = `SELECT version(), current_database()`

// Name is the name the spec gave the backend.
func (s *Store) Name() string { return s.name }

// Type is spec.TypePostgres.
func (s *Store) Type() string { return spec.TypePostgres }

// DB exposes the underlying database for tests and drift simulation.
// Statements sent through it are not counted by RoundTrips.
func (s *Store) DB() *sql.DB { return s.db }

// Table is the quoted, schema-qualified name of one of the store's tables
// (base name without the prefix), for tests and operators' queries.
func (s *Store) Table(base string) string { return s.dialect.Table(base) }

// RoundTrips counts statements and transactions sent since Open: one per
// statement, plus one per transaction for its BEGIN and COMMIT.
func (s *Store) RoundTrips() uint64 { return s.pool.RoundTrips() }

// Close closes the handle's connections. Session-mode slots it still holds
// are freed with their connections.
func (s *Store) Close() error {
	s.sess.closeAll()
	s.listen.close()
	s.pool.Close()
	return s.db.Close()
}

// The areas the store holds (backends.Backend): all of them, each served
// by the store itself, so that what it overrides of the shared SQL store
// is what callers get. Each return checks at compile time that the store
// implements its area.
func (s *Store) Cluster() backends.Cluster       { return s }
func (s *Store) Semaphores() backends.Semaphores { return s }
func (s *Store) Crons() backends.Crons           { return s }
func (s *Store) Queues() backends.Queues         { return s }

// RateLimits is the store's rate limits (backends.RateLimitHolder).
func (s *Store) RateLimits() backends.RateLimits { return s }

// Waiters is the store's lines of waiters (backends.Semaphores).
func (s *Store) Waiters() backends.Waiters { return s }
