package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/internal/hostrow"
)

var _ backends.HostRegistry = (*Store)(nil)

// The host registry is the hosts table (migrations/0002_hosts.sql): one row
// per host id, written by that host's daemon about every 30 s. Times are
// the store's clock (nowSQL), never the writer's.
const (
	// qHostBeat upserts one host's record at one instant of the store's
	// clock. started_at moves only when the row is new or a new daemon
	// process (run_id) took the host id over; SQLite evaluates every SET
	// expression against the old row, so the CASE sees the old run_id.
	qHostBeat = `INSERT INTO hosts (host, run_id, pid, version, spec_hash, heartbeat_ns, stopped, started_at, last_seen)
VALUES (?, ?, ?, ?, ?, ?, ?, ` + nowSQL + `, ` + nowSQL + `)
ON CONFLICT (host) DO UPDATE SET
  started_at = CASE WHEN hosts.run_id = excluded.run_id THEN hosts.started_at ELSE excluded.started_at END,
  run_id = excluded.run_id, pid = excluded.pid, version = excluded.version, spec_hash = excluded.spec_hash,
  heartbeat_ns = excluded.heartbeat_ns, stopped = excluded.stopped, last_seen = excluded.last_seen`

	// qHostsList reads every record and the store's clock in one statement:
	// the one-row table on the left gives the clock even when there is no
	// host (one row of NULL host columns then).
	qHostsList = `SELECT ` + nowSQL + `, h.host, h.run_id, h.pid, h.version, h.spec_hash, h.heartbeat_ns, h.stopped, h.started_at, h.last_seen
FROM (SELECT 1) AS one LEFT JOIN hosts AS h ON 1 = 1
ORDER BY h.host`

	// qHostsPrune deletes the records not seen for ? µs (hosts_last_seen).
	qHostsPrune = `DELETE FROM hosts WHERE last_seen < ` + nowSQL + ` - ?`

	// qHostsTable reports whether the hosts table exists: a store migrated
	// by an older binary lacks it and reads as having no hosts.
	qHostsTable = `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'hosts'`
)

// Heartbeat upserts rec with last_seen (and, for a new record or run id,
// started_at) at the store's clock. One write transaction.
func (s *Store) Heartbeat(ctx context.Context, rec backends.HostRecord) error {
	if err := backends.CheckHeartbeat(rec); err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	err := s.write(ctx, func(c conn) error {
		_, err := c.exec(ctx, qHostBeat, rec.Host, rec.RunID, rec.PID, rec.Version, rec.SpecHash,
			int64(rec.HeartbeatEvery), rec.Stopped)
		return err
	})
	if err != nil {
		return fmt.Errorf("heartbeat %q: %w", rec.Host, err)
	}
	return nil
}

// ListHosts reads every record, sorted by host id, and the store's clock.
func (s *Store) ListHosts(ctx context.Context) (backends.Hosts, error) {
	var out backends.Hosts
	ok, err := s.read(ctx, func(c conn) error {
		out = backends.Hosts{}
		has, err := s.hasHostsTable(ctx, c)
		if err != nil || !has {
			if err == nil {
				var now int64
				err = c.row(ctx, qNow).Scan(&now)
				out.Now = fromMicros(now)
			}
			return err
		}
		rows, err := c.query(ctx, qHostsList)
		if err != nil {
			return err
		}
		defer rows.Close()
		return hostrow.Read(rows, &out)
	})
	if err != nil {
		return backends.Hosts{}, fmt.Errorf("list hosts: %w", err)
	}
	if !ok { // never migrated: no hosts, but still the clock
		if out.Now, err = s.Now(ctx); err != nil {
			return backends.Hosts{}, fmt.Errorf("list hosts: %w", err)
		}
	}
	return out, nil
}

// hasHostsTable reports (and caches once true) whether the hosts table
// exists.
func (s *Store) hasHostsTable(ctx context.Context, c conn) (bool, error) {
	if s.hostsTable.Load() {
		return true, nil
	}
	var n int
	if err := c.row(ctx, qHostsTable).Scan(&n); err != nil {
		return false, err
	}
	if n > 0 {
		s.hostsTable.Store(true)
	}
	return n > 0, nil
}

// PruneHosts deletes the records not seen for olderThan of store time.
func (s *Store) PruneHosts(ctx context.Context, olderThan time.Duration) (int, error) {
	var n int64
	err := s.write(ctx, func(c conn) error {
		res, err := c.exec(ctx, qHostsPrune, olderThan.Microseconds())
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("prune hosts: %w", err)
	}
	return int(n), nil
}

// LastApply reads the latest apply record; nil before the first apply.
func (s *Store) LastApply(ctx context.Context) (*backends.ApplyRecord, error) {
	var r *backends.ApplyRecord
	_, err := s.read(ctx, func(c conn) error {
		var err error
		r, err = hostrow.LastApply(c.row(ctx, qLastApply))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("last apply: %w", err)
	}
	return r, nil
}
