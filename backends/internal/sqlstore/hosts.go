package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/coordd/coordd/backends"
)

// The host registry is the hosts table: one row per host id, written by
// that host's daemon about every 30 s. Every call is one statement, so an
// idle daemon's heartbeat adds one query per period to the store's load,
// and times are the store's clock, never the writer's.
var (
	// qHostBeat upserts one host's record at one instant of the store's
	// clock. started_at moves only when the row is new or a new daemon
	// process (run_id) took the host id over. Standard SQL evaluates every
	// SET expression against the old row; MySQL assigns left to right,
	// each seeing those set before it, so started_at comes first there.
	qHostBeat = Query{
		SQL: `INSERT INTO {p}hosts AS h (host, run_id, pid, version, spec_hash, heartbeat_ns, stopped, started_at, last_seen)
VALUES (?, ?, ?, ?, ?, ?, ?, {now}, {now})
ON CONFLICT (host) DO UPDATE SET
  started_at = CASE WHEN h.run_id = excluded.run_id THEN h.started_at ELSE excluded.started_at END,
  run_id = excluded.run_id, pid = excluded.pid, version = excluded.version, spec_hash = excluded.spec_hash,
  heartbeat_ns = excluded.heartbeat_ns, stopped = excluded.stopped, last_seen = excluded.last_seen`,
		MySQL: `INSERT INTO {p}hosts (host, run_id, pid, version, spec_hash, heartbeat_ns, stopped, started_at, last_seen)
VALUES (?, ?, ?, ?, ?, ?, ?, {now}, {now})
ON DUPLICATE KEY UPDATE
  started_at = IF(run_id = VALUES(run_id), started_at, VALUES(started_at)),
  run_id = VALUES(run_id), pid = VALUES(pid), version = VALUES(version), spec_hash = VALUES(spec_hash),
  heartbeat_ns = VALUES(heartbeat_ns), stopped = VALUES(stopped), last_seen = VALUES(last_seen)`,
	}

	// qHostsList reads every record and the store's clock in one
	// statement: the one-row derived table on the left gives the clock even
	// when there is no host (one row of NULL host columns then).
	qHostsList = Query{SQL: `SELECT {now}, h.host, h.run_id, h.pid, h.version, h.spec_hash, h.heartbeat_ns, h.stopped, h.started_at, h.last_seen
FROM (SELECT 1 AS one) AS one LEFT JOIN {p}hosts AS h ON 1 = 1
ORDER BY h.host`}

	// qHostsPrune deletes the records not seen for ? µs (hosts_last_seen).
	qHostsPrune = Query{SQL: `DELETE FROM {p}hosts WHERE last_seen < {now} - ?`}

	// qNow reads the store's clock.
	qNow = Query{SQL: `SELECT {now}`}
)

// Heartbeat upserts rec with last_seen (and, for a new record or run id,
// started_at) at the store's clock.
func (s *Core) Heartbeat(ctx context.Context, rec backends.HostRecord) error {
	if err := backends.CheckHeartbeat(rec); err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	if _, err := s.DB.WriteOne(ctx, s.DB.Dialect().Text(qHostBeat), rec.Host, rec.RunID, rec.PID, rec.Version, rec.SpecHash,
		int64(rec.HeartbeatEvery), rec.Stopped); err != nil {
		return fmt.Errorf("heartbeat %q: %w", rec.Host, err)
	}
	return nil
}

// ListHosts reads every record, sorted by host id, and the store's clock
// in one statement. A store without the hosts table (never migrated, or
// migrated by a binary from before the registry) has no hosts.
func (s *Core) ListHosts(ctx context.Context) (backends.Hosts, error) {
	d := s.DB.Dialect()
	out := backends.Hosts{}
	_, err := s.DB.ReadOne(ctx, func(c Conn) error {
		rows, err := c.Query(ctx, d.Text(qHostsList))
		if err != nil {
			return err
		}
		defer rows.Close()
		return readHosts(rows, &out)
	})
	if err != nil && !d.IsNoSuchTable(err) {
		return backends.Hosts{}, fmt.Errorf("list hosts: %w", err)
	}
	if out.Now.IsZero() { // no schema, or no hosts table
		if out.Now, err = s.Now(ctx); err != nil {
			return backends.Hosts{}, fmt.Errorf("list hosts: %w", err)
		}
		out.Hosts = nil
	}
	return out, nil
}

// Now reads the store's clock. It works on a store that was never
// migrated.
func (s *Core) Now(ctx context.Context) (time.Time, error) {
	var us int64
	err := s.DB.Direct(ctx, func(c Conn) error {
		return c.QueryRow(ctx, s.DB.Dialect().Text(qNow)).Scan(&us)
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("read clock: %w", err)
	}
	return FromMicros(us), nil
}

// readHosts appends the records of rows (qHostsList's columns: times in
// µs of the store's clock, heartbeat_ns in nanoseconds) to out and sets
// out.Now.
func readHosts(rows *sql.Rows, out *backends.Hosts) error {
	for rows.Next() {
		var now int64
		var host, runID, version, hash sql.NullString
		var pid, every, started, seen sql.NullInt64
		var stopped sql.NullBool
		if err := rows.Scan(&now, &host, &runID, &pid, &version, &hash, &every, &stopped, &started, &seen); err != nil {
			return err
		}
		out.Now = FromMicros(now)
		if !host.Valid {
			continue // the row of an empty table
		}
		out.Hosts = append(out.Hosts, backends.HostRecord{
			Host: host.String, RunID: runID.String, PID: int(pid.Int64), Version: version.String,
			SpecHash: hash.String, HeartbeatEvery: time.Duration(every.Int64), Stopped: stopped.Bool,
			StartedAt: FromMicros(started.Int64), LastSeen: FromMicros(seen.Int64),
		})
	}
	return rows.Err()
}

// PruneHosts deletes the records not seen for olderThan of store time.
func (s *Core) PruneHosts(ctx context.Context, olderThan time.Duration) (int, error) {
	n, err := Affected(s.DB.WriteOne(ctx, s.DB.Dialect().Text(qHostsPrune), olderThan.Microseconds()))
	if err != nil {
		return 0, fmt.Errorf("prune hosts: %w", err)
	}
	return int(n), nil
}
