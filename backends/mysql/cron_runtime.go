package mysql

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/coordd/coordd/backends"
)

var _ backends.Crons = (*Store)(nil)

// cronMaxOutput is the most of a run's output that FinishOccurrence keeps:
// the tail, where the error usually is.
const cronMaxOutput = 64 << 10

// cronMaxManualProbe bounds the search for a free scheduled_at of a manual
// run (see ClaimOccurrence); each step is one microsecond after backend now.
const cronMaxManualProbe = 1000

// cronOccCols are the columns scanned by scanCronOcc, in its order.
const cronOccCols = `task, scheduled_at, attempt, run_id, fencing, manual, owner, host, started_at, expires_at`

// cronOccKey matches one occurrence row by its primary key; arguments:
// task, scheduled_at, attempt.
const cronOccKey = `task = ? AND scheduled_at = ? AND attempt = ?`

// cronHistoryLimitSQL is the history_limit of the task bound to its one
// argument, read from its definition: 100 when the task is absent or its
// definition has no integer history_limit, never below 0.
const cronHistoryLimitSQL = "GREATEST(0, COALESCE((SELECT CASE WHEN JSON_TYPE(JSON_EXTRACT(def, '$.history_limit')) = 'INTEGER'\n" +
	"  THEN CAST(JSON_EXTRACT(def, '$.history_limit') AS SIGNED) ELSE 100 END FROM `{p}cron_tasks` WHERE name = ?), 100))"

// Occurrence rows have no insert-order column (SQLite's rowid). Within a
// task the fencing number is handed out in claim order, so it breaks the
// ties that rowid breaks in the embedded store.
const (
	// qCronDue lists due tasks, earliest first, up to the limit argument,
	// and in one more row (kind 1, name NULL) the earliest next_exec of the
	// tasks that are not due (NULL: none). The server fixes the clock once
	// per statement, so every task is either due or counted in that minimum.
	qCronDue = "SELECT 0 AS kind, d.name, d.def, d.next_exec FROM (\n" +
		"  SELECT name, def, next_exec FROM `{p}cron_tasks` WHERE next_exec <= " + nowSQL + "\n" +
		"  ORDER BY next_exec, name LIMIT ?) d\n" +
		"UNION ALL\n" +
		"SELECT 1, NULL, NULL, (SELECT min(next_exec) FROM `{p}cron_tasks` WHERE next_exec > " + nowSQL + ")\n" +
		"ORDER BY kind, next_exec, name"

	// qCronLockTask reads and locks the task row: every claim takes it
	// first, so claims of one task serialise. No row: the task is absent.
	qCronLockTask = "SELECT fencing, next_exec FROM `{p}cron_tasks` WHERE name = ? FOR UPDATE"

	// qCronAdvance completes the compare-and-swap of a scheduled claim
	// (next_exec was checked under the row lock): it moves next_exec to the
	// next time, records the claiming host and stores the bumped fencing
	// counter. Arguments: next_exec, exec_by, fencing, name.
	qCronAdvance = "UPDATE `{p}cron_tasks` SET next_exec = ?, exec_by = ?, fencing = ? WHERE name = ?"

	// qCronSetFencing stores the bumped fencing counter of a manual run or a
	// retry, which leave next_exec alone. Arguments: fencing, name.
	qCronSetFencing = "UPDATE `{p}cron_tasks` SET fencing = ? WHERE name = ?"

	// qCronRetryable reports whether the given attempt ended unsuccessfully
	// (failed, timeout or lost), the condition for starting the next one.
	qCronRetryable = "SELECT EXISTS (SELECT 1 FROM `{p}cron_occurrences`\n" +
		"WHERE " + cronOccKey + " AND status IN ('failed', 'timeout', 'lost'))"

	// qCronManualTaken reports whether a manual run at a time would collide
	// with an existing attempt 1 of the task or with its pending next_exec.
	// Arguments: task, time, task, time.
	qCronManualTaken = "SELECT EXISTS (SELECT 1 FROM `{p}cron_occurrences` WHERE task = ? AND scheduled_at = ? AND attempt = 1)\n" +
		"  OR EXISTS (SELECT 1 FROM `{p}cron_tasks` WHERE name = ? AND next_exec = ?)"

	// qCronNowMicros reads the backend clock in microseconds.
	qCronNowMicros = "SELECT " + nowSQL

	// qCronInsert inserts an occurrence started at backend now. A running
	// one (status 'running') is leased until now + lease; any other status
	// is recorded as finished at once (a skip, with lease 0). An existing
	// row with the same key fails with a duplicate key. Arguments: task,
	// scheduled_at, attempt, run_id, fencing, manual, owner, host, status,
	// lease, status, error.
	qCronInsert = "INSERT INTO `{p}cron_occurrences`\n" +
		"  (task, scheduled_at, attempt, run_id, fencing, manual, owner, host, status, started_at, expires_at, finished_at, error)\n" +
		"VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, " + nowSQL + ", " + nowSQL + " + ?,\n" +
		"  CASE WHEN ? = 'running' THEN NULL ELSE " + nowSQL + " END, ?)"

	// qCronClaimed reads back the times of the occurrence just inserted
	// (MySQL has no INSERT ... RETURNING).
	qCronClaimed = "SELECT started_at, expires_at FROM `{p}cron_occurrences` WHERE " + cronOccKey

	// qCronExtend renews a run lease, only for its owner, only while the run
	// is running and its lease unexpired. Arguments: lease, task,
	// scheduled_at, attempt, owner.
	qCronExtend = "UPDATE `{p}cron_occurrences` SET expires_at = " + nowSQL + " + ?\n" +
		"WHERE " + cronOccKey + " AND owner = ? AND status = 'running' AND expires_at > " + nowSQL

	// qCronExpiry reads back an extended lease.
	qCronExpiry = "SELECT expires_at FROM `{p}cron_occurrences` WHERE " + cronOccKey

	// qCronFinish records the result of a run still running under its
	// owner. Arguments: status, exit_code, error, output, task,
	// scheduled_at, attempt, owner.
	qCronFinish = "UPDATE `{p}cron_occurrences`\n" +
		"SET status = ?, exit_code = ?, error = ?, output = ?, finished_at = " + nowSQL + "\n" +
		"WHERE " + cronOccKey + " AND owner = ? AND status = 'running'"

	// qCronTrimCount counts (and locks) a task's finished occurrences and
	// reads its history_limit. Arguments: task, task.
	qCronTrimCount = "SELECT count(*), " + cronHistoryLimitSQL + "\n" +
		"FROM `{p}cron_occurrences` WHERE task = ? AND status <> 'running' FOR UPDATE"

	// qCronTrim deletes a task's oldest finished occurrences, as many as
	// the second argument: those beyond the newest history_limit. Running
	// ones are never deleted.
	qCronTrim = "DELETE FROM `{p}cron_occurrences` WHERE task = ? AND status <> 'running'\n" +
		"ORDER BY started_at, attempt, fencing LIMIT ?"

	// qCronExpired lists running occurrences whose run lease expired, the
	// longest expired first, up to the limit argument.
	qCronExpired = "SELECT " + cronOccCols + " FROM `{p}cron_occurrences`\n" +
		"WHERE status = 'running' AND expires_at <= " + nowSQL + " ORDER BY expires_at, task LIMIT ?"

	// qCronReap marks a running occurrence whose lease expired as lost.
	qCronReap = "UPDATE `{p}cron_occurrences`\n" +
		"SET status = 'lost', finished_at = " + nowSQL + ", error = 'run lease expired: host lost'\n" +
		"WHERE " + cronOccKey + " AND status = 'running' AND expires_at <= " + nowSQL

	// qCronRunning lists a task's running occurrences whose lease is live.
	qCronRunning = "SELECT " + cronOccCols + " FROM `{p}cron_occurrences`\n" +
		"WHERE task = ? AND status = 'running' AND expires_at > " + nowSQL + "\n" +
		"ORDER BY started_at, attempt, fencing"

	// qCronPendingRetries lists the latest attempt of each (task,
	// scheduled_at) that ended unsuccessfully and has no higher attempt,
	// earliest finished first (ties in claim order within a task), up to
	// the limit argument.
	qCronPendingRetries = "SELECT " + cronOccCols + ", status, coalesce(exit_code, 0), coalesce(error, ''), finished_at\n" +
		"FROM `{p}cron_occurrences` o WHERE status IN ('failed', 'timeout', 'lost')\n" +
		"  AND NOT EXISTS (SELECT 1 FROM `{p}cron_occurrences` h\n" +
		"    WHERE h.task = o.task AND h.scheduled_at = o.scheduled_at AND h.attempt > o.attempt)\n" +
		"ORDER BY finished_at, task, fencing LIMIT ?"

	// qCronHistory lists a task's occurrences of any status, newest first,
	// up to the limit argument.
	qCronHistory = "SELECT " + cronOccCols + ", status, coalesce(exit_code, 0), coalesce(error, ''), output, finished_at\n" +
		"FROM `{p}cron_occurrences` WHERE task = ?\n" +
		"ORDER BY started_at DESC, attempt DESC, fencing DESC LIMIT ?"
)

// cronLimit maps a non-positive limit to "no limit" (MySQL has no LIMIT -1).
func cronLimit(n int) int64 {
	if n <= 0 {
		return math.MaxInt64
	}
	return int64(n)
}

// newCronRunID returns 16 random bytes in hex.
func newCronRunID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// scanCronOcc scans cronOccCols followed by extra destinations.
func scanCronOcc(r interface{ Scan(dest ...any) error }, o *backends.Occurrence, extra ...any) error {
	var sched, started, expires int64
	dest := append([]any{&o.Task, &sched, &o.Attempt, &o.RunID, &o.Fencing, &o.Manual, &o.Owner, &o.Host, &started, &expires}, extra...)
	if err := r.Scan(dest...); err != nil {
		return err
	}
	o.ScheduledAt, o.StartedAt, o.ExpiresAt = fromMicros(sched), fromMicros(started), fromMicros(expires)
	return nil
}

// DueTasks lists tasks whose next_exec is at or before backend now, earliest
// first, up to limit (non-positive: all), and the earliest next_exec of the
// others (zero when none). Both come from one statement and one instant.
func (s *Store) DueTasks(ctx context.Context, limit int) ([]backends.DueTask, time.Time, error) {
	var due []backends.DueTask
	var nextAt time.Time
	_, err := s.read(ctx, func(c conn) error {
		rows, err := c.query(ctx, qCronDue, cronLimit(limit))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var kind int
			var name, def sql.NullString
			var next sql.NullInt64
			if err := rows.Scan(&kind, &name, &def, &next); err != nil {
				return err
			}
			if kind == 1 {
				nextAt = cronFromNullMicros(next)
				continue
			}
			due = append(due, backends.DueTask{Name: name.String, Def: json.RawMessage(def.String), NextExec: cronFromNullMicros(next)})
		}
		return rows.Err()
	})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("due cron tasks: %w", err)
	}
	return due, nextAt, nil
}

// ClaimOccurrence inserts the occurrence row in one transaction that holds
// the task row lock, bumping the task's fencing counter:
//
//   - attempt 1 of a scheduled run first moves next_exec from ScheduledAt to
//     Next (a compare-and-swap under the row lock: ErrConflict when it
//     moved);
//   - attempt > 1 (of a scheduled or, with Manual, a manual run) requires
//     attempt-1 of the same ScheduledAt to have ended failed, timeout or lost
//     (ErrConflict otherwise) and leaves next_exec alone;
//   - attempt 1 of a manual run is scheduled at backend now, moved forward
//     by a microsecond at a time past any existing attempt 1 or the pending
//     next_exec it would collide with, and leaves next_exec alone.
//
// With Skip the row is recorded as skipped and finished, without a lease.
// An existing row with the same key is ErrConflict; an absent task is
// ErrNotFound.
func (s *Store) ClaimOccurrence(ctx context.Context, req backends.ClaimRequest) (backends.Occurrence, error) {
	occ, err := s.claimCron(ctx, req)
	if err != nil {
		return backends.Occurrence{}, fmt.Errorf("claim cron %q attempt %d: %w", req.Task, req.Attempt, err)
	}
	return occ, nil
}

func (s *Store) claimCron(ctx context.Context, req backends.ClaimRequest) (backends.Occurrence, error) {
	switch {
	case req.Task == "":
		return backends.Occurrence{}, errors.New("empty task name")
	case req.Owner == "":
		return backends.Occurrence{}, errors.New("empty owner")
	case req.Attempt < 1:
		return backends.Occurrence{}, fmt.Errorf("attempt %d: must be at least 1", req.Attempt)
	}
	status, lease, reason := backends.RunRunning, int64(0), sql.NullString{}
	if req.Skip != "" {
		status, reason = backends.RunSkipped, sql.NullString{String: req.Skip, Valid: true}
	} else {
		var err error
		if lease, err = leaseMicros(req.Lease); err != nil {
			return backends.Occurrence{}, err
		}
	}
	occ := backends.Occurrence{
		Task: req.Task, Attempt: req.Attempt, RunID: newCronRunID(),
		Owner: req.Owner, Host: req.Host, Manual: req.Manual,
	}
	err := s.write(ctx, func(c conn) error {
		// lockTask locks the task row and returns the bumped fencing number
		// and the current next_exec.
		lockTask := func() (int64, sql.NullInt64, error) {
			var fencing int64
			var next sql.NullInt64
			err := c.row(ctx, qCronLockTask, req.Task).Scan(&fencing, &next)
			if errors.Is(err, sql.ErrNoRows) {
				return 0, next, backends.ErrNotFound
			}
			return fencing + 1, next, err
		}
		var sched int64
		switch {
		case req.Attempt > 1:
			sched = req.ScheduledAt.UnixMicro()
			var retryable bool
			if err := c.row(ctx, qCronRetryable, req.Task, sched, req.Attempt-1).Scan(&retryable); err != nil {
				return err
			}
			if !retryable {
				return fmt.Errorf("attempt %d has not ended unsuccessfully: %w", req.Attempt-1, backends.ErrConflict)
			}
			fencing, _, err := lockTask()
			if err != nil {
				return err
			}
			if _, err := c.exec(ctx, qCronSetFencing, fencing, req.Task); err != nil {
				return err
			}
			occ.Fencing = fencing
		case req.Manual:
			fencing, _, err := lockTask()
			if err != nil {
				return err
			}
			if _, err := c.exec(ctx, qCronSetFencing, fencing, req.Task); err != nil {
				return err
			}
			occ.Fencing = fencing
			if err := c.row(ctx, qCronNowMicros).Scan(&sched); err != nil {
				return err
			}
			for i := 0; ; i, sched = i+1, sched+1 {
				if i == cronMaxManualProbe {
					return fmt.Errorf("no free time for a manual run: %w", backends.ErrConflict)
				}
				var taken bool
				if err := c.row(ctx, qCronManualTaken, req.Task, sched, req.Task, sched).Scan(&taken); err != nil {
					return err
				}
				if !taken {
					break
				}
			}
		default:
			sched = req.ScheduledAt.UnixMicro()
			fencing, next, err := lockTask()
			if err != nil {
				return err
			}
			if !next.Valid || next.Int64 != sched {
				return fmt.Errorf("next_exec is no longer %s: %w", req.ScheduledAt.UTC().Format(time.RFC3339Nano), backends.ErrConflict)
			}
			if _, err := c.exec(ctx, qCronAdvance, cronNullMicros(req.Next), req.Host, fencing, req.Task); err != nil {
				return err
			}
			occ.Fencing = fencing
		}
		_, err := c.exec(ctx, qCronInsert, req.Task, sched, req.Attempt, occ.RunID, occ.Fencing, req.Manual,
			req.Owner, req.Host, status, lease, status, reason)
		if isDup(err) {
			return fmt.Errorf("occurrence already claimed: %w", backends.ErrConflict)
		} else if err != nil {
			return err
		}
		var started, expires int64
		if err := c.row(ctx, qCronClaimed, req.Task, sched, req.Attempt).Scan(&started, &expires); err != nil {
			return err
		}
		occ.ScheduledAt, occ.StartedAt, occ.ExpiresAt = fromMicros(sched), fromMicros(started), fromMicros(expires)
		if status != backends.RunRunning {
			return trimCron(ctx, c, req.Task)
		}
		return nil
	})
	return occ, err
}

// trimCron deletes task's finished occurrences beyond its history_limit,
// oldest first; running ones are never deleted.
func trimCron(ctx context.Context, c conn, task string) error {
	var n, keep int64
	if err := c.row(ctx, qCronTrimCount, task, task).Scan(&n, &keep); err != nil {
		return err
	}
	if n <= keep {
		return nil
	}
	_, err := c.exec(ctx, qCronTrim, task, n-keep)
	return err
}

// ExtendOccurrence renews occ.Owner's run lease to backend now + lease.
func (s *Store) ExtendOccurrence(ctx context.Context, occ backends.Occurrence, lease time.Duration) (time.Time, error) {
	us, err := leaseMicros(lease)
	if err != nil {
		return time.Time{}, fmt.Errorf("extend cron %q: %w", occ.Task, err)
	}
	var exp int64
	err = s.write(ctx, func(c conn) error {
		sched := occ.ScheduledAt.UnixMicro()
		n, err := affected(c.exec(ctx, qCronExtend, us, occ.Task, sched, occ.Attempt, occ.Owner))
		if err != nil {
			return err
		}
		if n == 0 {
			return backends.ErrLost
		}
		return c.row(ctx, qCronExpiry, occ.Task, sched, occ.Attempt).Scan(&exp)
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("extend cron %q attempt %d: %w", occ.Task, occ.Attempt, err)
	}
	return fromMicros(exp), nil
}

// cronFinal reports whether status ends a run.
func cronFinal(status string) bool {
	switch status {
	case backends.RunSucceeded, backends.RunFailed, backends.RunTimedOut, backends.RunLost, backends.RunSkipped:
		return true
	}
	return false
}

// FinishOccurrence records res if occ.Owner still runs occ (ErrLost
// otherwise), keeping the last 64 KiB of output, and trims the task's
// finished occurrences to its history_limit in the same transaction.
func (s *Store) FinishOccurrence(ctx context.Context, occ backends.Occurrence, res backends.RunResult) error {
	if !cronFinal(res.Status) {
		return fmt.Errorf("finish cron %q: status %q does not end a run", occ.Task, res.Status)
	}
	out := res.Output
	if len(out) > cronMaxOutput {
		out = out[len(out)-cronMaxOutput:]
	}
	errText := sql.NullString{String: res.Error, Valid: res.Error != ""}
	err := s.write(ctx, func(c conn) error {
		n, err := affected(c.exec(ctx, qCronFinish, res.Status, res.ExitCode, errText, out,
			occ.Task, occ.ScheduledAt.UnixMicro(), occ.Attempt, occ.Owner))
		if err != nil {
			return err
		}
		if n == 0 {
			return backends.ErrLost
		}
		return trimCron(ctx, c, occ.Task)
	})
	if err != nil {
		return fmt.Errorf("finish cron %q attempt %d: %w", occ.Task, occ.Attempt, err)
	}
	return nil
}

// ExpiredOccurrences lists running occurrences whose run lease expired, up
// to limit (non-positive: all).
func (s *Store) ExpiredOccurrences(ctx context.Context, limit int) ([]backends.Occurrence, error) {
	out, err := s.listCronOcc(ctx, qCronExpired, cronLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("expired cron occurrences: %w", err)
	}
	return out, nil
}

// ReapOccurrence marks occ lost if it is still running with an expired
// lease (ErrConflict otherwise), then trims the task's history.
func (s *Store) ReapOccurrence(ctx context.Context, occ backends.Occurrence) error {
	err := s.write(ctx, func(c conn) error {
		n, err := affected(c.exec(ctx, qCronReap, occ.Task, occ.ScheduledAt.UnixMicro(), occ.Attempt))
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("not running with an expired lease: %w", backends.ErrConflict)
		}
		return trimCron(ctx, c, occ.Task)
	})
	if err != nil {
		return fmt.Errorf("reap cron %q attempt %d: %w", occ.Task, occ.Attempt, err)
	}
	return nil
}

// Running lists task's occurrences whose run lease is live, oldest first.
func (s *Store) Running(ctx context.Context, task string) ([]backends.Occurrence, error) {
	out, err := s.listCronOcc(ctx, qCronRunning, task)
	if err != nil {
		return nil, fmt.Errorf("running cron %q: %w", task, err)
	}
	return out, nil
}

// listCronOcc runs a query that selects cronOccCols.
func (s *Store) listCronOcc(ctx context.Context, query string, args ...any) ([]backends.Occurrence, error) {
	var out []backends.Occurrence
	_, err := s.read(ctx, func(c conn) error {
		rows, err := c.query(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var o backends.Occurrence
			if err := scanCronOcc(rows, &o); err != nil {
				return err
			}
			out = append(out, o)
		}
		return rows.Err()
	})
	return out, err
}

// History lists task's occurrences of any status, newest started first, up
// to limit (non-positive: all), with their output.
func (s *Store) History(ctx context.Context, task string, limit int) ([]backends.Run, error) {
	var out []backends.Run
	_, err := s.read(ctx, func(c conn) error {
		rows, err := c.query(ctx, qCronHistory, task, cronLimit(limit))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r backends.Run
			var fin sql.NullInt64
			if err := scanCronOcc(rows, &r.Occurrence, &r.Status, &r.ExitCode, &r.Error, &r.Output, &fin); err != nil {
				return err
			}
			r.FinishedAt = cronFromNullMicros(fin)
			out = append(out, r)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("cron history %q: %w", task, err)
	}
	return out, nil
}

// PendingRetries lists the latest attempt of each (task, scheduled_at) that
// ended failed, timeout or lost and has no higher attempt, earliest finished
// first, up to limit (non-positive: all), without output.
func (s *Store) PendingRetries(ctx context.Context, limit int) ([]backends.Run, error) {
	var out []backends.Run
	_, err := s.read(ctx, func(c conn) error {
		rows, err := c.query(ctx, qCronPendingRetries, cronLimit(limit))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r backends.Run
			var fin sql.NullInt64
			if err := scanCronOcc(rows, &r.Occurrence, &r.Status, &r.ExitCode, &r.Error, &fin); err != nil {
				return err
			}
			r.FinishedAt = cronFromNullMicros(fin)
			out = append(out, r)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("pending cron retries: %w", err)
	}
	return out, nil
}
