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

	// qCronBumpFencing locks the task row and bumps its fencing counter,
	// which comes back in the OK packet (LAST_INSERT_ID(expr)). No row
	// matched: the task is absent. Argument: name.
	qCronBumpFencing = "UPDATE `{p}cron_tasks` SET fencing = LAST_INSERT_ID(fencing + 1) WHERE name = ?"

	// qCronManualTaken reads backend now plus a probe offset in
	// microseconds, and whether a manual run at that time would collide
	// with an existing attempt 1 of the task or with its pending next_exec.
	// Arguments: task, task, offset.
	qCronManualTaken = "SELECT x.at,\n" +
		"  EXISTS (SELECT 1 FROM `{p}cron_occurrences` WHERE task = ? AND scheduled_at = x.at AND attempt = 1)\n" +
		"  OR EXISTS (SELECT 1 FROM `{p}cron_tasks` WHERE name = ? AND next_exec = x.at)\n" +
		"FROM (SELECT " + nowSQL + " + ? AS at) x"

	// qCronInsert inserts an occurrence started at backend now, whose
	// microseconds come back in the OK packet (LAST_INSERT_ID(expr); the
	// statement's instant is fixed, so expires_at is exactly that plus the
	// lease). A running one is leased until now + lease; any other status
	// is recorded as finished at once (a skip, with lease 0). An existing
	// row with the same key fails with a duplicate key. Arguments: task,
	// scheduled_at, attempt, run_id, fencing, manual, owner, host, status,
	// lease, status, error.
	qCronInsert = "INSERT INTO `{p}cron_occurrences`\n" +
		"  (task, scheduled_at, attempt, run_id, fencing, manual, owner, host, status, started_at, expires_at, finished_at, error)\n" +
		"VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, LAST_INSERT_ID(" + nowSQL + "), " + nowSQL + " + ?,\n" +
		"  CASE WHEN ? = 'running' THEN NULL ELSE " + nowSQL + " END, ?)"

	// cronScriptHead starts every claim script: it resets the session's
	// LAST_INSERT_ID, so that a claim that matched nothing cannot read an
	// earlier statement's value, fixes backend now for the whole script in
	// @coordd_now (microseconds) and opens the transaction.
	cronScriptHead = "DO LAST_INSERT_ID(0);\n" +
		"SET @coordd_now = " + nowSQL + ", @coordd_n = 0;\n" +
		"START TRANSACTION;\n"

	// cronScriptInsert inserts the occurrence, leased from @coordd_now,
	// only if the script's UPDATE of the task row matched (it left the
	// bumped fencing number in LAST_INSERT_ID()), and records in @coordd_n
	// whether it did. A running occurrence is leased until now + lease; any
	// other status is recorded as finished at once (a skip, with lease 0).
	// A row with the same key fails the script with a duplicate key.
	// Arguments: task, scheduled_at, attempt, run_id, manual, owner, host,
	// status, lease, status, error.
	cronScriptInsert = "INSERT INTO `{p}cron_occurrences`\n" +
		"  (task, scheduled_at, attempt, run_id, fencing, manual, owner, host, status, started_at, expires_at, finished_at, error)\n" +
		"  SELECT ?, ?, ?, ?, LAST_INSERT_ID(), ?, ?, ?, ?, @coordd_now, @coordd_now + ?,\n" +
		"    IF(? = 'running', NULL, @coordd_now), ? FROM DUAL WHERE LAST_INSERT_ID() > 0;\n" +
		"SET @coordd_n = ROW_COUNT();\n"

	// cronScriptTail commits and returns the fencing number (0: nothing was
	// claimed), whether the occurrence was inserted, @coordd_now and whether
	// the task exists (for the error of a claim that matched nothing).
	// Argument: task.
	cronScriptTail = "COMMIT;\n" +
		"SELECT LAST_INSERT_ID(), @coordd_n, @coordd_now, EXISTS (SELECT 1 FROM `{p}cron_tasks` WHERE name = ?)"

	// qCronClaimScheduled claims attempt 1 of a scheduled run in one round
	// trip (a script on a dedicated connection, see runScript): the
	// compare-and-swap moves next_exec from the claimed time to the next
	// one, records the claiming host and bumps the fencing counter, all only
	// while next_exec still equals the claimed time; the occurrence row is
	// inserted in the same transaction. Arguments: next_exec, exec_by,
	// name, scheduled_at; cronScriptInsert's; cronScriptTail's.
	qCronClaimScheduled = cronScriptHead +
		"UPDATE `{p}cron_tasks` SET next_exec = ?, exec_by = ?, fencing = LAST_INSERT_ID(fencing + 1)\n" +
		"  WHERE name = ? AND next_exec = ?;\n" +
		cronScriptInsert + cronScriptTail

	// qCronClaimSkipped is qCronClaimScheduled for an occurrence recorded as
	// skipped, which also trims the task's history (the skip is a finished
	// row). Arguments: qCronClaimScheduled's, with cronScriptTrim's before
	// the tail's.
	qCronClaimSkipped = cronScriptHead +
		"UPDATE `{p}cron_tasks` SET next_exec = ?, exec_by = ?, fencing = LAST_INSERT_ID(fencing + 1)\n" +
		"  WHERE name = ? AND next_exec = ?;\n" +
		cronScriptInsert + cronScriptTrim + ";\n" + cronScriptTail

	// qCronClaimRetry claims a later attempt: it bumps the fencing counter
	// only while attempt-1 of the same time ended failed, timeout or lost,
	// then inserts the occurrence, in one transaction and one round trip.
	// The final row also says whether that earlier attempt qualified.
	// Arguments: name, task, scheduled_at, attempt-1; cronScriptInsert's;
	// task; task, scheduled_at, attempt-1.
	qCronClaimRetry = cronScriptHead +
		"UPDATE `{p}cron_tasks` SET fencing = LAST_INSERT_ID(fencing + 1)\n" +
		"  WHERE name = ? AND EXISTS (SELECT 1 FROM `{p}cron_occurrences`\n" +
		"    WHERE " + cronOccKey + " AND status IN ('failed', 'timeout', 'lost'));\n" +
		cronScriptInsert + cronScriptTail + ",\n" +
		"  EXISTS (SELECT 1 FROM `{p}cron_occurrences` WHERE " + cronOccKey + " AND status IN ('failed', 'timeout', 'lost'))"

	// qCronExtend renews a run lease, only for its owner, only while the run
	// is running and its lease unexpired, in autocommit; the new expiry comes
	// back in the OK packet. Arguments: lease, task, scheduled_at, attempt,
	// owner.
	qCronExtend = "UPDATE `{p}cron_occurrences` SET expires_at = LAST_INSERT_ID(" + nowSQL + " + ?)\n" +
		"WHERE " + cronOccKey + " AND owner = ? AND status = 'running' AND expires_at > " + nowSQL

	// qCronTrim deletes the task's finished occurrences beyond its newest
	// history_limit, oldest first, in one statement that reads
	// history_limit from the definition itself, so nothing is read first;
	// running ones are never deleted. The derived table ranks the finished
	// rows (window functions need MariaDB 10.2 or MySQL 8.0; the derived
	// table is materialized, which is what lets a DELETE read its own
	// table). Arguments: task, task, task.
	qCronTrim = "DELETE o FROM `{p}cron_occurrences` o JOIN (\n" +
		"  SELECT r.scheduled_at, r.attempt FROM (\n" +
		"    SELECT scheduled_at, attempt,\n" +
		"      ROW_NUMBER() OVER (ORDER BY started_at DESC, attempt DESC, fencing DESC) AS rn\n" +
		"    FROM `{p}cron_occurrences` WHERE task = ? AND status <> 'running') r\n" +
		"  WHERE r.rn > " + cronHistoryLimitSQL + ") d\n" +
		"ON o.task = ? AND o.scheduled_at = d.scheduled_at AND o.attempt = d.attempt"

	// cronScriptTrim is qCronTrim in a script: it deletes only while
	// @coordd_n is not 0 (the script's write happened).
	cronScriptTrim = qCronTrim + "\nWHERE @coordd_n <> 0"

	// qCronFinish records the result of a run still running under its owner
	// and trims the task's history, in one transaction and one round trip
	// (a script); the final row says whether the run was recorded.
	// Arguments: status, exit_code, error, output, task, scheduled_at,
	// attempt, owner; cronScriptTrim's.
	qCronFinish = "SET @coordd_n = 0;\n" +
		"START TRANSACTION;\n" +
		"UPDATE `{p}cron_occurrences`\n" +
		"  SET status = ?, exit_code = ?, error = ?, output = ?, finished_at = " + nowSQL + "\n" +
		"  WHERE " + cronOccKey + " AND owner = ? AND status = 'running';\n" +
		"SET @coordd_n = ROW_COUNT();\n" +
		cronScriptTrim + ";\n" +
		"COMMIT;\n" +
		"SELECT @coordd_n"

	// qCronReap marks a running occurrence whose lease expired as lost and
	// trims the task's history, in one script; the final row says whether
	// it was still running and expired. Arguments: task, scheduled_at,
	// attempt; cronScriptTrim's.
	qCronReap = "SET @coordd_n = 0;\n" +
		"START TRANSACTION;\n" +
		"UPDATE `{p}cron_occurrences`\n" +
		"  SET status = 'lost', finished_at = " + nowSQL + ", error = 'run lease expired: host lost'\n" +
		"  WHERE " + cronOccKey + " AND status = 'running' AND expires_at <= " + nowSQL + ";\n" +
		"SET @coordd_n = ROW_COUNT();\n" +
		cronScriptTrim + ";\n" +
		"COMMIT;\n" +
		"SELECT @coordd_n"

	// qCronExpired lists running occurrences whose run lease expired, the
	// longest expired first, up to the limit argument.
	qCronExpired = "SELECT " + cronOccCols + " FROM `{p}cron_occurrences`\n" +
		"WHERE status = 'running' AND expires_at <= " + nowSQL + " ORDER BY expires_at, task LIMIT ?"

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

// readAuto runs fn's single statement in autocommit on the pool: one round
// trip, and the statement is its own consistent snapshot (a read-only
// transaction would add two). A store that was never migrated reads as
// empty: fn is not run.
func (s *Store) readAuto(ctx context.Context, fn func(c conn) error) error {
	ok, err := s.hasSchema(ctx)
	if err != nil || !ok {
		return err
	}
	return fn(s.on(nil))
}

// DueTasks lists tasks whose next_exec is at or before backend now, earliest
// first, up to limit (non-positive: all), and the earliest next_exec of the
// others (zero when none). Both come from one statement and one instant.
func (s *Store) DueTasks(ctx context.Context, limit int) ([]backends.DueTask, time.Time, error) {
	var due []backends.DueTask
	var nextAt time.Time
	err := s.readAuto(ctx, func(c conn) error {
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

// ClaimOccurrence implements backends.Crons.ClaimOccurrence. Scheduled runs
// and retries are one script, so one round trip and one commit (see
// runScript); a manual run, rare, is an ordinary transaction.
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
	if req.Manual && req.Attempt == 1 {
		return s.claimManual(ctx, req, occ, status, lease, reason)
	}
	sched := req.ScheduledAt.UnixMicro()
	insert := []any{req.Task, sched, req.Attempt, occ.RunID, req.Manual, req.Owner, req.Host, status, lease, status, reason}
	var query string
	var args []any
	switch {
	case req.Attempt > 1:
		query = qCronClaimRetry
		args = append([]any{req.Task, req.Task, sched, req.Attempt - 1}, insert...)
		args = append(args, req.Task, req.Task, sched, req.Attempt-1)
	case req.Skip != "":
		query = qCronClaimSkipped
		args = append([]any{cronNullMicros(req.Next), req.Host, req.Task, sched}, insert...)
		args = append(args, req.Task, req.Task, req.Task, req.Task)
	default:
		query = qCronClaimScheduled
		args = append([]any{cronNullMicros(req.Next), req.Host, req.Task, sched}, insert...)
		args = append(args, req.Task)
	}
	var fencing, inserted, now int64
	var exists, retryable bool
	err := s.runScript(ctx, query, args, func(_ int, rows *sql.Rows) error {
		if req.Attempt > 1 {
			return rows.Scan(&fencing, &inserted, &now, &exists, &retryable)
		}
		return rows.Scan(&fencing, &inserted, &now, &exists)
	})
	switch {
	case isDup(err):
		return backends.Occurrence{}, fmt.Errorf("occurrence already claimed: %w", backends.ErrConflict)
	case err != nil:
		return backends.Occurrence{}, err
	case fencing != 0 && inserted == 1:
		// claimed (the task may be deleted by now; the run still is ours)
	case !exists:
		return backends.Occurrence{}, backends.ErrNotFound
	case fencing == 0 && req.Attempt > 1:
		return backends.Occurrence{}, fmt.Errorf("attempt %d has not ended unsuccessfully: %w", req.Attempt-1, backends.ErrConflict)
	case fencing == 0:
		return backends.Occurrence{}, fmt.Errorf("next_exec is no longer %s: %w", req.ScheduledAt.UTC().Format(time.RFC3339Nano), backends.ErrConflict)
	default:
		return backends.Occurrence{}, fmt.Errorf("claim script bumped fencing to %d but inserted %d rows", fencing, inserted)
	}
	occ.Fencing, occ.ScheduledAt = fencing, fromMicros(sched)
	occ.StartedAt, occ.ExpiresAt = fromMicros(now), fromMicros(now+lease)
	return occ, nil
}

// claimManual claims attempt 1 of a manual run: in one transaction it
// bumps the fencing counter (locking the task row), finds the first free
// time from backend now on, and inserts the occurrence.
func (s *Store) claimManual(ctx context.Context, req backends.ClaimRequest, occ backends.Occurrence, status string, lease int64, reason sql.NullString) (backends.Occurrence, error) {
	err := s.write(ctx, func(c conn) error {
		fencing, err := lastID(c.exec(ctx, qCronBumpFencing, req.Task))
		if err != nil {
			return err
		}
		occ.Fencing = fencing
		var sched int64
		for i := 0; ; i++ {
			if i == cronMaxManualProbe {
				return fmt.Errorf("no free time for a manual run: %w", backends.ErrConflict)
			}
			var taken bool
			if err := c.row(ctx, qCronManualTaken, req.Task, req.Task, i).Scan(&sched, &taken); err != nil {
				return err
			}
			if !taken {
				break
			}
		}
		started, err := insertID(c.exec(ctx, qCronInsert, req.Task, sched, req.Attempt, occ.RunID, occ.Fencing, req.Manual,
			req.Owner, req.Host, status, lease, status, reason))
		if isDup(err) {
			return fmt.Errorf("occurrence already claimed: %w", backends.ErrConflict)
		} else if err != nil {
			return err
		}
		occ.ScheduledAt, occ.StartedAt, occ.ExpiresAt = fromMicros(sched), fromMicros(started), fromMicros(started+lease)
		if status != backends.RunRunning {
			_, err := c.exec(ctx, qCronTrim, req.Task, req.Task, req.Task)
			return err
		}
		return nil
	})
	if err != nil {
		return backends.Occurrence{}, err
	}
	return occ, nil
}

// lastID returns the value an UPDATE left in LAST_INSERT_ID(expr), or
// ErrNotFound when it matched no row.
func lastID(res sql.Result, err error) (int64, error) {
	n, err := affected(res, err)
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, backends.ErrNotFound
	}
	return res.LastInsertId()
}

// insertID returns the value an INSERT left in LAST_INSERT_ID(expr).
func insertID(res sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return res.LastInsertId()
}

// ExtendOccurrence renews occ.Owner's run lease to backend now + lease in
// one autocommit statement.
func (s *Store) ExtendOccurrence(ctx context.Context, occ backends.Occurrence, lease time.Duration) (time.Time, error) {
	us, err := leaseMicros(lease)
	if err != nil {
		return time.Time{}, fmt.Errorf("extend cron %q: %w", occ.Task, err)
	}
	exp, err := lastID(s.autocommit(ctx, qCronExtend, us, occ.Task, occ.ScheduledAt.UnixMicro(), occ.Attempt, occ.Owner))
	if errors.Is(err, backends.ErrNotFound) {
		err = backends.ErrLost
	}
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
// finished occurrences to its history_limit in the same transaction: one
// script, so one round trip and one commit.
func (s *Store) FinishOccurrence(ctx context.Context, occ backends.Occurrence, res backends.RunResult) error {
	if !cronFinal(res.Status) {
		return fmt.Errorf("finish cron %q: status %q does not end a run", occ.Task, res.Status)
	}
	out := res.Output
	if len(out) > cronMaxOutput {
		out = out[len(out)-cronMaxOutput:]
	}
	errText := sql.NullString{String: storableText(res.Error), Valid: res.Error != ""}
	var n int64
	err := s.runScript(ctx, qCronFinish, []any{res.Status, res.ExitCode, errText, out,
		occ.Task, occ.ScheduledAt.UnixMicro(), occ.Attempt, occ.Owner, occ.Task, occ.Task, occ.Task},
		func(_ int, rows *sql.Rows) error { return rows.Scan(&n) })
	if err == nil && n == 0 {
		err = backends.ErrLost
	}
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
// lease (ErrConflict otherwise), and trims the task's history, in one
// script.
func (s *Store) ReapOccurrence(ctx context.Context, occ backends.Occurrence) error {
	var n int64
	err := s.runScript(ctx, qCronReap, []any{occ.Task, occ.ScheduledAt.UnixMicro(), occ.Attempt, occ.Task, occ.Task, occ.Task},
		func(_ int, rows *sql.Rows) error { return rows.Scan(&n) })
	if err == nil && n == 0 {
		err = fmt.Errorf("not running with an expired lease: %w", backends.ErrConflict)
	}
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
	err := s.readAuto(ctx, func(c conn) error {
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
	err := s.readAuto(ctx, func(c conn) error {
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
	err := s.readAuto(ctx, func(c conn) error {
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
