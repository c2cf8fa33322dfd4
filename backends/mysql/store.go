package mysql

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	driver "github.com/go-sql-driver/mysql"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/internal/sqlstore"
	mysqldsn "github.com/coordd/coordd/backends/mysql/dsn"
	"github.com/coordd/coordd/spec"
)

// ErrReadOnly is returned by every write on a store opened with
// Options.ReadOnly.
var ErrReadOnly = sqlstore.ErrReadOnly

// Compile-time checks of the capabilities the store implements.
var (
	_ backends.Backend        = (*Store)(nil)
	_ backends.Migrator       = (*Store)(nil)
	_ backends.WakeRepairer   = (*Store)(nil)
	_ backends.PayloadLimiter = (*Store)(nil)
)

// Retry of transactions that lost a deadlock (1213) or timed out waiting
// for a row lock (1205): InnoDB rolled the transaction back, so it is simply
// run again, up to txAttempts times, after a jittered backoff that doubles
// from txBackoff.
const (
	txAttempts = 6
	txBackoff  = 2 * time.Millisecond
	// txBackoffMax caps the backoff of retryN.
	txBackoffMax = 50 * time.Millisecond
	// claimAttempts is how often a queue claim is tried: claims of many
	// workers deadlock with each other and with pushes and acks on the
	// jobs' indexes (InnoDB rolls the whole claim back), and a claim is
	// always safe to run again, so it keeps trying for about a second
	// rather than handing the worker an error.
	claimAttempts = 25
)

// nowSQL is the backend clock as BIGINT microseconds since the Unix epoch,
// UTC. UTC_TIMESTAMP(6) ignores the session time zone (NOW(6) does not), and
// TIMESTAMPDIFF between two DATETIMEs involves no zone either (UNIX_TIMESTAMP
// of a DATETIME would read it in the session zone). The server fixes the
// current time for the duration of one statement, so every use of nowSQL
// within a statement sees the same instant.
const nowSQL = `TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))`

// nextFencing and nextTerm are the next value of a fencing counter and of
// the term: one above the last, and at least backend now in µs. Counting
// up from the clock rather than from the last value alone is what keeps
// them from repeating after a failover to a replica that missed the last
// bumps (asynchronous replication), or a restore of an older backup: the
// new server's clock is past every number handed out before, as long as
// it is not behind the old server's by more than the time the switch took
// (docs/design.md, "Failover to a replica").
const (
	nextFencing = "GREATEST(fencing + 1, " + nowSQL + ")"
	nextTerm    = "GREATEST(term + 1, " + nowSQL + ")"
)

// qVersion reads the server's version; Open sends it to check that the
// server answers and to tell MariaDB from MySQL.
const qVersion = `SELECT VERSION()`

// prefixPattern is the spec loader's rule for table_prefix, checked again
// here because the prefix is spliced into SQL text.
var prefixPattern = regexp.MustCompile(`^[a-zA-Z0-9_]{0,32}$`)

// Store is one handle on a MySQL/MariaDB database. It is safe for concurrent
// use; several Stores (on one host or many) may share one database and
// prefix.
type Store struct {
	// Core is what every SQL store shares: the cluster's state, hosts,
	// the leader lease (but its take and renewal, leader.go), cron
	// pauses, waiter lines.
	sqlstore.Core

	name   string
	prefix string
	dbName string
	opts   backends.Options
	db     *sql.DB
	// clientPacket is the driver's own bound on a packet it sends
	// (maxAllowedPacket in the DSN, 64 MiB by default; 0: the server's).
	clientPacket int64
	// dialect is the shared store's SQL for this prefix; pool runs every
	// statement of the statement pool through it.
	dialect *sqlstore.Dialect
	pool    *sqlstore.Pool
	// mariadb: the server is MariaDB (KILL QUERY ID, see park.go).
	mariadb bool
	// sess holds the dedicated connections of session-mode holders and
	// waiters and of parked queue workers (session.go, park.go).
	sess *sessions
	// queues holds the claim and ack batchers and the wake-up state of
	// the queues (queue_runtime.go, queue_park.go).
	queues queueState
}

// Open connects to the database named by dsn (a go-sql-driver/mysql DSN that
// must select a database, plus the pool parameters of package dsn) and
// checks it answers. Tables are named with
// tablePrefix. It does not migrate; call Migrate. Whatever the DSN says,
// times are parsed (parseTime) in UTC, the session time zone is +00:00,
// parameters are interpolated client-side (one round trip per statement)
// and UPDATE reports matched rather than changed rows. A DSN asking for an
// unsafe charset is refused (mysqldsn.ErrUnsafeCharset), and so is every
// connection whose server-side charset is unsafe (charsetChecked).
func Open(ctx context.Context, name, dsn, tablePrefix string, opts backends.Options) (*Store, error) {
	if !prefixPattern.MatchString(tablePrefix) {
		return nil, fmt.Errorf("mysql %q: invalid table prefix %q", name, tablePrefix)
	}
	cfg, pool, err := mysqldsn.Parse(dsn)
	if err != nil {
		return nil, fmt.Errorf("mysql %q: parse dsn: %w", name, err)
	}
	if cfg.DBName == "" {
		return nil, fmt.Errorf("mysql %q: the dsn selects no database", name)
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	cfg.InterpolateParams = true
	cfg.ClientFoundRows = true
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["time_zone"] = "'+00:00'"
	conn, err := driver.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("mysql %q: %w", name, err)
	}
	db := sql.OpenDB(charsetChecked{conn})
	db.SetMaxOpenConns(pool.MaxOpenConns)
	db.SetMaxIdleConns(pool.MaxIdleConns)
	db.SetConnMaxLifetime(pool.ConnMaxLifetime)
	db.SetConnMaxIdleTime(pool.ConnMaxIdleTime)
	s := &Store{name: name, prefix: tablePrefix, dbName: cfg.DBName, opts: opts, db: db, clientPacket: int64(cfg.MaxAllowedPacket)}
	s.dialect = newDialect(tablePrefix)
	s.pool = &sqlstore.Pool{
		SQL: db, D: s.dialect, ReadOnly: opts.ReadOnly, Autocommit: true, Attempts: txAttempts,
		Retryable: retryable, NoSuchColumn: isNoSuchColumn, Schema: s.Schema,
	}
	s.pool.Init()
	s.Core = sqlstore.Core{DB: s.pool}
	// Claims of several workers gather (a lone claimer pays nothing).
	s.queues.claims.Limit, s.queues.claims.Gather = maxClaimGroup, true
	// Acks gather too: a commit costs far more than the wait.
	s.queues.acks.Limit, s.queues.acks.Gather, s.queues.acks.Timeout = maxAckBatch, true, ackTimeout
	// Dedicated connections may send scripts (several statements in one
	// round trip, runScript); the statement pool may not. They also run
	// statements that block for seconds on purpose (parked waiters,
	// GET_LOCK), bounded by their own deadlines (interruptible), so the
	// DSN's readTimeout applies to the statement pool only.
	sessCfg := cfg.Clone()
	sessCfg.MultiStatements = true
	sessCfg.ReadTimeout = 0
	sessConn, err := driver.NewConnector(sessCfg)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("mysql %q: %w", name, err)
	}
	s.sess = newSessions(sql.OpenDB(charsetChecked{sessConn}), pool)
	var version string
	s.pool.CountTrip()
	if err := db.QueryRowContext(ctx, qVersion).Scan(&version); err != nil {
		s.Close()
		return nil, fmt.Errorf("mysql %q at %s/%s: %w", name, cfg.Addr, cfg.DBName, err)
	}
	s.mariadb = strings.Contains(strings.ToLower(version), "mariadb")
	return s, nil
}

// qConnCharset reads the charsets the server parses a connection's
// statements in (client) and converts them to (connection).
const qConnCharset = `SELECT @@character_set_client, @@character_set_connection`

// charsetChecked wraps the driver's connector: each new connection reads
// its charsets and is refused unless both are safe for client-side escaping
// (see package dsn). The DSN cannot ask for another charset (Parse), but
// the server can force one (init_connect, skip-character-set-client-
// handshake), and then a quote in a value would end its literal. One
// statement per new connection; pooled connections pay nothing.
type charsetChecked struct{ sqldriver.Connector }

// Connect opens a connection and checks its charsets.
func (c charsetChecked) Connect(ctx context.Context) (sqldriver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkConnCharset(ctx, conn); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

func checkConnCharset(ctx context.Context, conn sqldriver.Conn) error {
	q, ok := conn.(sqldriver.QueryerContext)
	if !ok {
		return fmt.Errorf("check connection charset: the driver cannot query")
	}
	rows, err := q.QueryContext(ctx, qConnCharset, nil)
	if err != nil {
		return fmt.Errorf("check connection charset: %w", err)
	}
	defer rows.Close()
	vals := make([]sqldriver.Value, 2)
	if err := rows.Next(vals); err != nil {
		return fmt.Errorf("check connection charset: %w", err)
	}
	for i, name := range []string{"character_set_client", "character_set_connection"} {
		cs := fmt.Sprintf("%s", vals[i])
		if !mysqldsn.SafeCharset(cs) {
			return fmt.Errorf("the server set %s to %s: %w", name, cs, mysqldsn.ErrUnsafeCharset)
		}
	}
	return nil
}

// storableText makes an error text (a retry reason, a run's error) fit a
// utf8mb4 TEXT column: under strict mode an invalid UTF-8 sequence, such as
// a rune cut by a length limit, fails the whole statement, and the job or
// run would not be recorded at all. Such sequences become U+FFFD. Payloads
// and output are BLOBs and are stored byte for byte.
func storableText(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

// Name is the name the spec gave the backend.
func (s *Store) Name() string { return s.name }

// Type is spec.TypeMySQL.
func (s *Store) Type() string { return spec.TypeMySQL }

// Prefix is the table prefix.
func (s *Store) Prefix() string { return s.prefix }

// DB exposes the underlying pool for tests and drift simulation.
// Statements sent through it are not counted by RoundTrips.
func (s *Store) DB() *sql.DB { return s.db }

// RoundTrips counts statements and transactions sent since Open: one per
// statement, plus one per transaction for its BEGIN and COMMIT.
func (s *Store) RoundTrips() uint64 { return s.pool.RoundTrips() }

// Close closes both pools; other handles on the database are unaffected.
// Session-mode slots this handle still holds are freed with their
// connections.
func (s *Store) Close() error {
	s.sess.closeAll()
	return errors.Join(s.sess.db.Close(), s.db.Close())
}

// q returns query with {p} replaced by the table prefix (and the other
// tokens of sqlstore.Query), for statements sent outside the pool.
func (s *Store) q(query string) string { return s.dialect.Render(query) }

// hasSchema reports whether the store has been migrated at least once.
func (s *Store) hasSchema(ctx context.Context) (bool, error) { return s.pool.HasSchema(ctx) }

// explain adds what to do to an error from a statement that names a column
// or table the store lacks because an older binary migrated it (or a
// daemon is between two DDL statements; MySQL's DDL is not transactional).
func (s *Store) explain(ctx context.Context, err error) error { return s.pool.Explain(ctx, err) }

// isNoSuchColumn reports a statement naming a column a migration adds.
func isNoSuchColumn(err error) bool {
	var me *driver.MySQLError
	return errors.As(err, &me) && me.Number == errNoSuchColumn
}

// read runs fn in a read-only transaction, which gives fn one consistent
// snapshot. It reports false, without running fn, when the store has no
// schema: such a store reads as empty.
func (s *Store) read(ctx context.Context, fn func(c conn) error) (bool, error) {
	return s.pool.ReadTx(ctx, fn)
}

// errNoSchema is returned by writes on a store that was never migrated.
var errNoSchema = backends.ErrNoSchema

// errRetry asks write to run the transaction again: a racing transaction
// inserted the row this one found absent (a duplicate key on insert).
var errRetry = sqlstore.ErrRetry

// writable refuses a write on a read-only or unmigrated store.
func (s *Store) writable(ctx context.Context) error { return s.pool.Writable(ctx) }

// retry runs fn until it succeeds, fails in a way that running it again
// will not cure (retryable: a deadlock, a lock wait timeout, errRetry), or
// ran txAttempts times, with a jittered exponential backoff in between.
// Every write path goes through it, so a deadlock (1213) is ordinary
// control flow everywhere.
func (s *Store) retry(ctx context.Context, fn func() error) error {
	return s.pool.Retry(ctx, txAttempts, fn)
}

// retryN is retry with its own number of attempts.
func (s *Store) retryN(ctx context.Context, attempts int, fn func() error) error {
	return s.pool.Retry(ctx, attempts, fn)
}

// write runs fn in a read-write transaction (REPEATABLE READ; fn takes its
// row locks with SELECT ... FOR UPDATE before deciding anything), retrying
// it after a deadlock, a lock wait timeout or errRetry. fn's error rolls it
// back.
func (s *Store) write(ctx context.Context, fn func(c conn) error) error {
	return s.pool.WriteTx(ctx, fn)
}

// autocommit sends one statement on the pool, outside a transaction: the
// server commits it by itself, one round trip instead of the three of
// BEGIN, the statement and COMMIT. It has write's rules: refused on a
// read-only or unmigrated store, sent again after a deadlock or a lock wait
// timeout.
func (s *Store) autocommit(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return s.pool.WriteOne(ctx, query, args...)
}

// runScript sends script (several statements, typically one transaction
// ending in COMMIT) in one round trip on a dedicated connection (the
// statement pool does not allow several statements), and gives the rows of
// every result that has columns to scan, numbered from 0. A script that
// fails part-way stops there, possibly with its transaction open, so the
// connection is then discarded (the server rolls the transaction back)
// rather than reused. It has write's rules: refused on a read-only or
// unmigrated store, sent again after a deadlock or a lock wait timeout.
// RoundTrips counts one per script sent.
func (s *Store) runScript(ctx context.Context, script string, args []any, scan func(set int, rows *sql.Rows) error) error {
	return s.runScriptN(ctx, txAttempts, script, args, scan)
}

// runScriptN is runScript with its own number of attempts (retryN).
func (s *Store) runScriptN(ctx context.Context, attempts int, script string, args []any, scan func(set int, rows *sql.Rows) error) error {
	if err := s.writable(ctx); err != nil {
		return err
	}
	return s.retryN(ctx, attempts, func() error { return s.runScriptOnce(ctx, script, args, scan) })
}

func (s *Store) runScriptOnce(ctx context.Context, script string, args []any, scan func(set int, rows *sql.Rows) error) error {
	d, err := s.dedicate(ctx)
	if err != nil {
		return err
	}
	s.pool.CountTrip()
	rows, err := d.conn.QueryContext(ctx, s.q(script), args...)
	if err == nil {
		err = scanResults(rows, scan)
		if cerr := rows.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		d.discard()
		if isInterrupted(err) && ctx.Err() == nil {
			// A stray KILL QUERY: on MySQL a wake-up kills by connection,
			// and the connection may have gone from a parked statement to
			// this script in between (MariaDB kills by statement id). The
			// transaction ends with the connection: run the script again.
			// (Had the KILL hit a COMMIT that went through, what the
			// script leased waits out its lease, as after any answer that
			// is lost.)
			return fmt.Errorf("%w: %w", err, errRetry)
		}
		return err
	}
	s.undedicate(d)
	return nil
}

// scanResults walks every result of a script and scans the rows of those
// that have columns.
func scanResults(rows *sql.Rows, scan func(set int, rows *sql.Rows) error) error {
	set := 0
	for {
		cols, err := rows.Columns()
		if err != nil {
			return err
		}
		if len(cols) > 0 {
			for rows.Next() {
				if err := scan(set, rows); err != nil {
					return err
				}
			}
			set++
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if !rows.NextResultSet() {
			return rows.Err()
		}
	}
}

// MySQL error numbers the store handles.
const (
	errLockWaitTimeout = 1205
	errDeadlock        = 1213
	errDupEntry        = 1062
	errDupFieldName    = 1060
	errDupKeyName      = 1061
	errNoSuchTable     = 1146 // a table a newer migration adds (or none yet)
	errNoSuchColumn    = 1054 // a column a newer migration adds
	errInterrupted     = 1317 // a KILL QUERY ended the statement
	errUnknownThread   = 1094 // KILL of a connection that is gone
	errKillDenied      = 1095 // KILL of another user's connection without the privilege
	errUnknownQuery    = 1957 // KILL QUERY ID of a statement that ended (MariaDB)
	errKillQueryDenied = 1979 // KILL QUERY ID of another user's statement without the privilege (MariaDB)
)

// retryable reports whether err rolled the transaction back in a way that
// running it again may cure.
func retryable(err error) bool {
	if errors.Is(err, errRetry) {
		return true
	}
	var me *driver.MySQLError
	return errors.As(err, &me) && (me.Number == errDeadlock || me.Number == errLockWaitTimeout)
}

// isDup reports a duplicate-key error.
func isDup(err error) bool {
	var me *driver.MySQLError
	return errors.As(err, &me) && me.Number == errDupEntry
}

// conn sends statements, on a transaction or (tx nil) on the pool, and
// counts each as a round trip. Parameters are interpolated by the driver, so
// a statement is one round trip and nothing is prepared.
type conn = *sqlstore.Tx

func (s *Store) on(tx *sql.Tx) conn { return s.pool.On(tx) }

// affected returns the rows an UPDATE matched (ClientFoundRows is set).
func affected(res sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// fromMicros converts a stored time to UTC.
func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

// leaseMicros converts a lease to microseconds; leases must be positive.
func leaseMicros(d time.Duration) (int64, error) {
	if d < time.Microsecond {
		return 0, fmt.Errorf("lease %v: must be at least 1µs", d)
	}
	return d.Microseconds(), nil
}

// inChunk is how many names one IN (...) list binds: large enough that
// observing thousands of objects takes a handful of statements, small enough
// to stay far below max_allowed_packet.
const inChunk = 1000

// tuples returns n copies of tuple joined by ", " (multi-row VALUES).
func tuples(tuple string, n int) string {
	return strings.TrimSuffix(strings.Repeat(tuple+", ", n), ", ")
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
