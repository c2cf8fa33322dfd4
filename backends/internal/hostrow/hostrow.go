// Package hostrow reads the host registry's rows, and the latest apply
// record a daemon compares its spec hash with, for the SQL stores (sqlite,
// mysql). Their host list queries return the same columns:
//
//	now, host, run_id, pid, version, spec_hash, heartbeat_every, stopped, started_at, last_seen
//
// with times in microseconds of the store's clock and heartbeat_every in
// nanoseconds. The query is a LEFT JOIN of the clock onto the table, so an
// empty table still gives one row with the clock and NULL columns.
package hostrow

import (
	"database/sql"
	"errors"
	"time"

	"github.com/coordd/coordd/backends"
)

// Read appends the records of rows to out and sets out.Now.
func Read(rows *sql.Rows, out *backends.Hosts) error {
	for rows.Next() {
		var now int64
		var host, runID, version, hash sql.NullString
		var pid, every, started, seen sql.NullInt64
		var stopped sql.NullBool
		if err := rows.Scan(&now, &host, &runID, &pid, &version, &hash, &every, &stopped, &started, &seen); err != nil {
			return err
		}
		out.Now = micros(now)
		if !host.Valid {
			continue // the row of an empty table
		}
		out.Hosts = append(out.Hosts, backends.HostRecord{
			Host: host.String, RunID: runID.String, PID: int(pid.Int64), Version: version.String,
			SpecHash: hash.String, HeartbeatEvery: time.Duration(every.Int64), Stopped: stopped.Bool,
			StartedAt: micros(started.Int64), LastSeen: micros(seen.Int64),
		})
	}
	return rows.Err()
}

func micros(us int64) time.Time { return time.UnixMicro(us).UTC() }

// LastApply reads the latest apply record from row (generation, spec_hash,
// host, at in µs, summary), nil when there is none.
func LastApply(row *sql.Row) (*backends.ApplyRecord, error) {
	var a backends.ApplyRecord
	var at int64
	err := row.Scan(&a.Generation, &a.SpecHash, &a.Host, &at, &a.Summary)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	a.At = micros(at)
	return &a, nil
}
