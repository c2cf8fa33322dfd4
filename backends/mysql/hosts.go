package mysql

import (
	"context"
	"errors"
	"fmt"
	"time"

	driver "github.com/go-sql-driver/mysql"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/internal/hostrow"
)

var _ backends.HostRegistry = (*Store)(nil)

// The host registry is the hosts table (migrations/0003_hosts.sql): one row
// per host id, written by that host's daemon about every 30 s. Every call
// is one autocommit statement: an idle daemon's heartbeat adds one query
// per period to the store's load, and times are the server's clock.
const (
	// qHostBeat upserts one host's record at one instant of the server's
	// clock. MySQL assigns the UPDATE's columns left to right, each seeing
	// those set before it, so started_at is decided against the old run_id:
	// it moves only for a new row or a new daemon process on the host id.
	qHostBeat = "INSERT INTO `{p}hosts` (host, run_id, pid, version, spec_hash, heartbeat_ns, stopped, started_at, last_seen)\n" +
		`VALUES (?, ?, ?, ?, ?, ?, ?, ` + nowSQL + `, ` + nowSQL + `)
ON DUPLICATE KEY UPDATE
  started_at = IF(run_id = VALUES(run_id), started_at, VALUES(started_at)),
  run_id = VALUES(run_id), pid = VALUES(pid), version = VALUES(version), spec_hash = VALUES(spec_hash),
  heartbeat_ns = VALUES(heartbeat_ns), stopped = VALUES(stopped), last_seen = VALUES(last_seen)`

	// qHostsList reads every record and the server's clock in one
	// statement: the one-row derived table on the left gives the clock even
	// when there is no host (one row of NULL host columns then).
	qHostsList = "SELECT " + nowSQL + ", h.host, h.run_id, h.pid, h.version, h.spec_hash, h.heartbeat_ns, h.stopped, h.started_at, h.last_seen\n" +
		"FROM (SELECT 1 AS one) AS one LEFT JOIN `{p}hosts` AS h ON 1 = 1\nORDER BY h.host"

	// qHostsPrune deletes the records not seen for ? µs (hosts_last_seen).
	qHostsPrune = "DELETE FROM `{p}hosts` WHERE last_seen < " + nowSQL + " - ?"

	// qHostsNow reads the clock as µs, for a store without the hosts table.
	qHostsNow = "SELECT " + nowSQL
)

// errNoSuchTable: a store migrated by an older binary has no hosts table.
const errNoSuchTable = 1146

func isNoSuchTable(err error) bool {
	var me *driver.MySQLError
	return errors.As(err, &me) && me.Number == errNoSuchTable
}

// Heartbeat upserts rec with last_seen (and, for a new record or run id,
// started_at) at the server's clock. One autocommit statement.
func (s *Store) Heartbeat(ctx context.Context, rec backends.HostRecord) error {
	if err := backends.CheckHeartbeat(rec); err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	stopped := 0
	if rec.Stopped {
		stopped = 1
	}
	if _, err := s.autocommit(ctx, qHostBeat, rec.Host, rec.RunID, rec.PID, rec.Version, rec.SpecHash,
		int64(rec.HeartbeatEvery), stopped); err != nil {
		return fmt.Errorf("heartbeat %q: %w", rec.Host, err)
	}
	return nil
}

// ListHosts reads every record, sorted by host id, and the server's clock
// in one statement. A store without the hosts table (never migrated, or
// migrated by an older binary) has no hosts.
func (s *Store) ListHosts(ctx context.Context) (backends.Hosts, error) {
	out := backends.Hosts{}
	err := s.readAuto(ctx, func(c conn) error {
		rows, err := c.query(ctx, qHostsList)
		if err != nil {
			return err
		}
		defer rows.Close()
		return hostrow.Read(rows, &out)
	})
	if err != nil && !isNoSuchTable(err) {
		return backends.Hosts{}, fmt.Errorf("list hosts: %w", err)
	}
	if out.Now.IsZero() { // no schema, or no hosts table
		var now int64
		if err := s.on(nil).row(ctx, qHostsNow).Scan(&now); err != nil {
			return backends.Hosts{}, fmt.Errorf("list hosts: %w", err)
		}
		out = backends.Hosts{Now: fromMicros(now)}
	}
	return out, nil
}

// PruneHosts deletes the records not seen for olderThan of server time.
func (s *Store) PruneHosts(ctx context.Context, olderThan time.Duration) (int, error) {
	n, err := affected(s.autocommit(ctx, qHostsPrune, olderThan.Microseconds()))
	if err != nil {
		return 0, fmt.Errorf("prune hosts: %w", err)
	}
	return int(n), nil
}

// LastApply reads the latest apply record (one statement); nil before the
// first apply.
func (s *Store) LastApply(ctx context.Context) (*backends.ApplyRecord, error) {
	var r *backends.ApplyRecord
	err := s.readAuto(ctx, func(c conn) error {
		var err error
		r, err = hostrow.LastApply(c.row(ctx, qLastApply))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("last apply: %w", err)
	}
	return r, nil
}
