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
	"slices"
	"strconv"
	"strings"
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

// cronPausedSQL is true when the task row is paused: by an operator
// (paused_at, see PauseCron) or by paused: true in its definition.
const cronPausedSQL = "(paused_at IS NOT NULL OR JSON_UNQUOTE(JSON_EXTRACT(def, '$.paused')) <=> 'true')"

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
	// qCronDue lists due tasks that are not paused, earliest first, up to
	// the limit argument, and in one more row (kind 1, name NULL) the
	// earliest next_exec of the tasks that are not due (NULL: none; paused
	// ones count, which costs a paused task one wake-up, not a scan). The server fixes the clock once
	// per statement, so every task is either due or counted in that minimum.
	qCronDue = "SELECT 0 AS kind, d.name, d.def, d.next_exec FROM (\n" +
		"  SELECT name, def, next_exec FROM `{p}cron_tasks` WHERE next_exec <= " + nowSQL + " AND NOT " + cronPausedSQL + "\n" +
		"  ORDER BY next_exec, name LIMIT ?) d\n" +
		"UNION ALL\n" +
		"SELECT 1, NULL, NULL, (SELECT min(next_exec) FROM `{p}cron_tasks` WHERE next_exec > " + nowSQL + ")\n" +
		"ORDER BY kind, next_exec, name"

	// qCronBumpFencing locks the task row and bumps its fencing counter,
	// which comes back in the OK packet (LAST_INSERT_ID(expr)). No row
	// matched: the task is absent. Argument: name.
	qCronBumpFencing = "UPDATE `{p}cron_tasks` SET fencing = LAST_INSERT_ID(" + nextFencing + ") WHERE name = ?"

	// qCronBusy reports whether the task has a run whose lease is live (an
	// Exclusive manual claim is then refused). Argument: task.
	qCronBusy = "SELECT EXISTS (SELECT 1 FROM `{p}cron_occurrences`\n" +
		"  WHERE task = ? AND status = 'running' AND expires_at > " + nowSQL + ")"

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

	// The claim scripts. Scheduled claims, skips and retries, one or a
	// batch, are one script (several statements sent in one round trip
	// on a dedicated connection, see runScript): one transaction at READ
	// COMMITTED, one commit. A script cannot branch on what it reads, so
	// each claim is cronBatchItem's statements, which pass what they find
	// to the next in session variables (@coordd_*), and ends with a row
	// that says what happened (cronBatchResult). Every claim takes the
	// task row's lock before it reads anything: every claim of the task,
	// of any kind, writes that row first, so an Exclusive claim's read of
	// the task's live runs (a fresh snapshot at READ COMMITTED, taken
	// once the lock is held) sees every run claimed before it.

	// cronBatchHead starts a claim script: it fixes backend now for the
	// whole script in @coordd_now (microseconds), empties @coordd_r, where
	// each claim appends what it did, and opens the transaction.
	cronBatchHead = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED;\n" +
		"SET @coordd_now = " + nowSQL + ", @coordd_r = '';\n" +
		"START TRANSACTION;\n"

	// cronBatchLock starts an Exclusive claim: it locks the task row (an
	// UPDATE that changes nothing still locks what it matches). Argument:
	// task.
	cronBatchLock = "UPDATE `{p}cron_tasks` SET fencing = fencing WHERE name = ?;\n"

	// cronBatchBusy follows cronBatchLock: it sets @coordd_busy to whether
	// the task has a run whose lease is live (the claim is then refused),
	// and resets the session's LAST_INSERT_ID, so that a claim that
	// matches nothing cannot read an earlier statement's value.
	// cronBatchIdle does the same for the other claims, which are never
	// busy. Argument: task.
	cronBatchBusy = "SELECT EXISTS (SELECT 1 FROM `{p}cron_occurrences`\n" +
		"  WHERE task = ? AND status = 'running' AND expires_at > @coordd_now), LAST_INSERT_ID(0) INTO @coordd_busy, @coordd_n;\n"
	cronBatchIdle = "SET @coordd_busy = LAST_INSERT_ID(0);\n"

	// cronBatchAdvance is the compare-and-swap of a scheduled claim (or
	// skip): it moves next_exec from the claimed time to the next one,
	// records the claiming host and bumps the fencing counter, all only
	// while next_exec still equals the claimed time and the task is
	// neither busy nor paused (read under the row lock this UPDATE takes);
	// the bumped number is left in LAST_INSERT_ID(). Arguments: next_exec,
	// exec_by, name, scheduled_at.
	cronBatchAdvance = "UPDATE `{p}cron_tasks` SET next_exec = ?, exec_by = ?, fencing = LAST_INSERT_ID(" + nextFencing + ")\n" +
		"  WHERE name = ? AND next_exec = ? AND @coordd_busy = 0 AND NOT " + cronPausedSQL + ";\n"

	// cronBatchBump is a retry's: it bumps the fencing counter only while
	// attempt-1 of the same time ended failed, timeout or lost and the
	// task is neither busy nor paused. Arguments: name, task, scheduled_at, attempt-1.
	cronBatchBump = "UPDATE `{p}cron_tasks` SET fencing = LAST_INSERT_ID(" + nextFencing + ")\n" +
		"  WHERE name = ? AND @coordd_busy = 0 AND NOT " + cronPausedSQL + " AND EXISTS (SELECT 1 FROM `{p}cron_occurrences`\n" +
		"    WHERE " + cronOccKey + " AND status IN ('failed', 'timeout', 'lost'));\n"

	// cronBatchInsert inserts the occurrence, leased from @coordd_now,
	// only if the claim's UPDATE matched (it left the bumped fencing
	// number in LAST_INSERT_ID()). A running occurrence is leased until
	// now + lease; any other status is recorded as finished at once (a
	// skip, with lease 0). A row with the same key fails the script with a
	// duplicate key (the whole script then rolls back; ClaimOccurrences
	// makes the claims one by one). Arguments: task, scheduled_at,
	// attempt, run_id, manual, owner, host, status, lease, status, error.
	cronBatchInsert = "INSERT INTO `{p}cron_occurrences`\n" +
		"  (task, scheduled_at, attempt, run_id, fencing, manual, owner, host, status, started_at, expires_at, finished_at, error)\n" +
		"  SELECT ?, ?, ?, ?, LAST_INSERT_ID(), ?, ?, ?, ?, @coordd_now, @coordd_now + ?,\n" +
		"    IF(? = 'running', NULL, @coordd_now), ? FROM DUAL WHERE LAST_INSERT_ID() > 0;\n"

	// cronBatchInserted records in @coordd_n whether the insert inserted,
	// for a skip's trim.
	cronBatchInserted = "SET @coordd_n = ROW_COUNT();\n"

	// cronBatchResult ends each claim: it appends to @coordd_r the
	// fencing number (0: nothing was claimed), whether the occurrence was
	// inserted (ROW_COUNT() right after the insert, or @coordd_n after a
	// skip's trim) and whether the task was busy. Appending costs less
	// than a result set per claim. Argument: the inserted expression, by
	// fmt.
	cronBatchResult = "SET @coordd_r = CONCAT(@coordd_r, LAST_INSERT_ID(), ' ', %s, ' ', @coordd_busy, ',');\n"

	// cronBatchWhy reads, after a claim script, why a claim was not made:
	// whether the task exists, whether it is paused, whether next_exec is
	// still the claimed time (a scheduled claim refused as busy rather than
	// moved), and whether attempt-1 qualifies (a retry). One row per
	// claim, joined with UNION ALL. Arguments: index, task, task, task, scheduled_at, task,
	// scheduled_at, attempt-1.
	cronBatchWhy = "SELECT ?,\n" +
		"  EXISTS (SELECT 1 FROM `{p}cron_tasks` WHERE name = ?),\n" +
		"  EXISTS (SELECT 1 FROM `{p}cron_tasks` WHERE name = ? AND " + cronPausedSQL + "),\n" +
		"  EXISTS (SELECT 1 FROM `{p}cron_tasks` WHERE name = ? AND next_exec = ?),\n" +
		"  EXISTS (SELECT 1 FROM `{p}cron_occurrences` WHERE " + cronOccKey + " AND status IN ('failed', 'timeout', 'lost'))"

	// cronBatchTail commits and returns @coordd_r and @coordd_now.
	cronBatchTail = "COMMIT;\nSELECT @coordd_r, @coordd_now"

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

	// qCronFinishItem records the result of a run still running under its
	// owner, as one step of a finish script (qCronFinishHead, steps,
	// qCronFinishTail: one round trip, one commit), and trims the task's
	// history the cheap way when one finished run is too many, the usual
	// case once the history is full: a DELETE of the oldest, where
	// qCronTrim ranks every finished run. It appends to @coordd_r two
	// characters: whether the run was recorded (1 or 0), and T when more
	// than one finished run is too many (history_limit was lowered), which
	// FinishOccurrences then trims with qCronTrim. Arguments: status,
	// exit_code, error, output, task, scheduled_at, attempt, owner, task,
	// task, task.
	qCronFinishItem = "UPDATE `{p}cron_occurrences`\n" +
		"  SET status = ?, exit_code = ?, error = ?, output = ?, finished_at = " + nowSQL + "\n" +
		"  WHERE " + cronOccKey + " AND owner = ? AND status = 'running';\n" +
		"SET @coordd_r = CONCAT(@coordd_r, ROW_COUNT());\n" +
		"SELECT IF(RIGHT(@coordd_r, 1) = '1', COUNT(*) - " + cronHistoryLimitSQL + ", 0) INTO @coordd_x\n" +
		"  FROM `{p}cron_occurrences` WHERE task = ? AND status <> 'running';\n" +
		"DELETE FROM `{p}cron_occurrences` WHERE task = ? AND status <> 'running' AND @coordd_x = 1\n" +
		"  ORDER BY started_at, attempt, fencing LIMIT 1;\n" +
		"SET @coordd_r = CONCAT(@coordd_r, IF(@coordd_x > 1, 'T', '-'));\n"

	// qCronFinishHead and qCronFinishTail enclose the steps of a finish
	// script; the tail returns @coordd_r, one digit per step.
	qCronFinishHead = "SET @coordd_r = '';\nSTART TRANSACTION;\n"
	qCronFinishTail = "COMMIT;\nSELECT @coordd_r"

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
	return s.explain(ctx, fn(s.on(nil)))
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
	if err := checkCronClaim(req); err != nil {
		return backends.Occurrence{}, fmt.Errorf("claim cron %q attempt %d: %w", req.Task, req.Attempt, err)
	}
	if req.Manual && req.Attempt == 1 {
		occ, err := s.claimManual(ctx, req)
		if err != nil {
			return backends.Occurrence{}, fmt.Errorf("claim cron %q attempt %d: %w", req.Task, req.Attempt, err)
		}
		return occ, nil
	}
	res, err := s.claimScripted(ctx, []backends.ClaimRequest{req})
	if err != nil {
		return backends.Occurrence{}, err
	}
	return res[0].Occurrence, res[0].Err
}

// ClaimOccurrences implements backends.Crons.ClaimOccurrences: one script
// for the whole batch (see cronBatchHead).
func (s *Store) ClaimOccurrences(ctx context.Context, reqs []backends.ClaimRequest) ([]backends.ClaimResult, error) {
	out := make([]backends.ClaimResult, len(reqs))
	var batch []backends.ClaimRequest
	var at []int // index in reqs of each batch request
	for i, req := range reqs {
		err := checkCronClaim(req)
		if err == nil && req.Manual {
			err = fmt.Errorf("manual runs are claimed one at a time: %w", backends.ErrUnsupported)
		}
		if err != nil {
			out[i].Err = fmt.Errorf("claim cron %q attempt %d: %w", req.Task, req.Attempt, err)
			continue
		}
		batch, at = append(batch, req), append(at, i)
	}
	if len(batch) == 0 {
		return out, nil
	}
	res, err := s.claimScripted(ctx, batch)
	if err != nil {
		return nil, err
	}
	for j, r := range res {
		out[at[j]] = r
	}
	return out, nil
}

// claimScripted claims checked requests that are not a manual attempt 1
// in one script; after a duplicate key, which rolls the script back, it
// claims them one by one, so that each gets its own answer.
func (s *Store) claimScripted(ctx context.Context, batch []backends.ClaimRequest) ([]backends.ClaimResult, error) {
	res, err := s.claimBatch(ctx, batch)
	if isDup(err) && len(batch) > 1 {
		// An occurrence row already exists for a time next_exec still
		// names (a schedule reset into the past): the script rolled back;
		// each claim alone gets its own answer.
		res, err = make([]backends.ClaimResult, len(batch)), nil
		for j, req := range batch {
			r, err1 := s.claimBatch(ctx, []backends.ClaimRequest{req})
			if err1 != nil && !isDup(err1) {
				return nil, err1
			}
			if err1 != nil {
				res[j].Err = fmt.Errorf("claim cron %q attempt %d: occurrence already claimed: %w", req.Task, req.Attempt, backends.ErrConflict)
			} else {
				res[j] = r[0]
			}
		}
	}
	if isDup(err) {
		req := batch[0]
		return []backends.ClaimResult{{Err: fmt.Errorf("claim cron %q attempt %d: occurrence already claimed: %w", req.Task, req.Attempt, backends.ErrConflict)}}, nil
	}
	return res, err
}

// checkCronClaim checks a request before anything is sent.
func checkCronClaim(req backends.ClaimRequest) error {
	switch {
	case req.Task == "":
		return errors.New("empty task name")
	case req.Owner == "":
		return errors.New("empty owner")
	case req.Attempt < 1:
		return fmt.Errorf("attempt %d: must be at least 1", req.Attempt)
	}
	if req.Skip == "" {
		if _, err := leaseMicros(req.Lease); err != nil {
			return err
		}
	}
	return nil
}

// claimBatch claims checked, non-manual requests in one script. Claims
// are sent in task order, so that two batches lock task rows in the same
// order and cannot deadlock; a task's own claims keep the order given.
// The error is the script's (a duplicate key among them).
func (s *Store) claimBatch(ctx context.Context, reqs []backends.ClaimRequest) ([]backends.ClaimResult, error) {
	order := make([]int, len(reqs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(reqs[a].Task, reqs[b].Task) })
	runIDs := make([]string, len(reqs))
	var sb strings.Builder
	sb.WriteString(s.q(cronBatchHead))
	args := make([]any, 0, 24*len(reqs))
	for _, i := range order {
		req := reqs[i]
		runIDs[i] = newCronRunID()
		status, lease, reason := backends.RunRunning, int64(0), sql.NullString{}
		if req.Skip != "" {
			status, reason = backends.RunSkipped, sql.NullString{String: storableText(req.Skip), Valid: true}
		} else {
			lease, _ = leaseMicros(req.Lease) // checked by checkCronClaim
		}
		sched := req.ScheduledAt.UnixMicro()
		if req.Exclusive && req.Skip == "" {
			sb.WriteString(s.q(cronBatchLock))
			sb.WriteString(s.q(cronBatchBusy))
			args = append(args, req.Task, req.Task)
		} else {
			sb.WriteString(cronBatchIdle)
		}
		if req.Attempt > 1 {
			sb.WriteString(s.q(cronBatchBump))
			args = append(args, req.Task, req.Task, sched, req.Attempt-1)
		} else {
			sb.WriteString(s.q(cronBatchAdvance))
			args = append(args, cronNullMicros(req.Next), req.Host, req.Task, sched)
		}
		sb.WriteString(s.q(cronBatchInsert))
		args = append(args, req.Task, sched, req.Attempt, runIDs[i], req.Manual, req.Owner, req.Host, status, lease, status, reason)
		inserted := "ROW_COUNT()"
		if req.Skip != "" {
			sb.WriteString(cronBatchInserted)
			sb.WriteString(s.q(cronScriptTrim))
			sb.WriteString(";\n")
			args = append(args, req.Task, req.Task, req.Task)
			inserted = "@coordd_n"
		}
		sb.WriteString(fmt.Sprintf(cronBatchResult, inserted))
	}
	sb.WriteString(cronBatchTail)
	var text string
	var now int64
	err := s.runScript(ctx, sb.String(), args, func(_ int, rs *sql.Rows) error {
		return rs.Scan(&text, &now)
	})
	if err != nil {
		if isDup(err) {
			return nil, err
		}
		return nil, fmt.Errorf("claim %d cron occurrences: %w", len(reqs), err)
	}
	type done struct {
		fencing, inserted int64
		busy              bool
	}
	dones := make([]done, len(reqs))
	fields := strings.Split(strings.TrimSuffix(text, ","), ",")
	if len(fields) != len(order) {
		return nil, fmt.Errorf("claim %d cron occurrences: the script reported %d", len(reqs), len(fields))
	}
	var failed []int
	for j, f := range fields {
		var d done
		var busy int
		if _, err := fmt.Sscan(f, &d.fencing, &d.inserted, &busy); err != nil {
			return nil, fmt.Errorf("claim %d cron occurrences: the script reported %q: %w", len(reqs), f, err)
		}
		d.busy = busy != 0
		dones[order[j]] = d
		if d.fencing == 0 {
			failed = append(failed, order[j])
		}
	}
	why, err := s.claimWhy(ctx, reqs, failed)
	if err != nil {
		return nil, fmt.Errorf("claim %d cron occurrences: %w", len(reqs), err)
	}
	out := make([]backends.ClaimResult, len(reqs))
	for i, req := range reqs {
		d, w := dones[i], why[i]
		var err error
		switch {
		case d.fencing != 0 && d.inserted == 1:
			// claimed (the task may be deleted by now; the run still is ours)
			lease := int64(0)
			if req.Skip == "" {
				lease, _ = leaseMicros(req.Lease)
			}
			out[i].Occurrence = backends.Occurrence{
				Task: req.Task, ScheduledAt: fromMicros(req.ScheduledAt.UnixMicro()), Attempt: req.Attempt,
				RunID: runIDs[i], Fencing: d.fencing, Owner: req.Owner, Host: req.Host, Manual: req.Manual,
				StartedAt: fromMicros(now), ExpiresAt: fromMicros(now + lease),
			}
			continue
		case d.fencing != 0:
			err = fmt.Errorf("claim script bumped fencing to %d but inserted %d rows", d.fencing, d.inserted)
		case !w.exists:
			err = backends.ErrNotFound
		case w.paused:
			err = backends.ErrPaused
		case req.Attempt > 1 && !w.retryable:
			err = fmt.Errorf("attempt %d has not ended unsuccessfully: %w", req.Attempt-1, backends.ErrConflict)
		case req.Attempt == 1 && !w.pending:
			err = fmt.Errorf("next_exec is no longer %s: %w", req.ScheduledAt.UTC().Format(time.RFC3339Nano), backends.ErrConflict)
		case d.busy:
			err = fmt.Errorf("a run of the task is still live: %w", backends.ErrHeld)
		default:
			// What the claim needed holds now, but did not when it was
			// made: an earlier claim (of this batch or another) came
			// first.
			err = fmt.Errorf("claimed by another claim first: %w", backends.ErrConflict)
		}
		out[i].Err = fmt.Errorf("claim cron %q attempt %d: %w", req.Task, req.Attempt, err)
	}
	return out, nil
}

// claimWhy is what cronBatchWhy reads about the claims at indexes idx of
// reqs, in one query (none when idx is empty).
type claimWhyRow struct{ exists, paused, pending, retryable bool }

func (s *Store) claimWhy(ctx context.Context, reqs []backends.ClaimRequest, idx []int) ([]claimWhyRow, error) {
	out := make([]claimWhyRow, len(reqs))
	if len(idx) == 0 {
		return out, nil
	}
	parts := make([]string, len(idx))
	var args []any
	for j, i := range idx {
		req := reqs[i]
		sched := req.ScheduledAt.UnixMicro()
		parts[j] = cronBatchWhy
		args = append(args, i, req.Task, req.Task, req.Task, sched, req.Task, sched, req.Attempt-1)
	}
	err := s.readAuto(ctx, func(c conn) error {
		rows, err := c.query(ctx, strings.Join(parts, "\nUNION ALL\n"), args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var i int
			var w claimWhyRow
			if err := rows.Scan(&i, &w.exists, &w.paused, &w.pending, &w.retryable); err != nil {
				return err
			}
			if i < 0 || i >= len(out) {
				return fmt.Errorf("index %d of %d", i, len(out))
			}
			out[i] = w
		}
		return rows.Err()
	})
	return out, err
}

// claimManual claims attempt 1 of a manual run: in one transaction it
// bumps the fencing counter (locking the task row), finds the first free
// time from backend now on, and inserts the occurrence.
func (s *Store) claimManual(ctx context.Context, req backends.ClaimRequest) (backends.Occurrence, error) {
	status, lease, reason := backends.RunRunning, int64(0), sql.NullString{}
	if req.Skip != "" {
		status, reason = backends.RunSkipped, sql.NullString{String: storableText(req.Skip), Valid: true}
	} else {
		lease, _ = leaseMicros(req.Lease) // checked by checkCronClaim
	}
	occ := backends.Occurrence{
		Task: req.Task, Attempt: req.Attempt, RunID: newCronRunID(),
		Owner: req.Owner, Host: req.Host, Manual: req.Manual,
	}
	err := s.write(ctx, func(c conn) error {
		fencing, err := lastID(c.exec(ctx, qCronBumpFencing, req.Task))
		if err != nil {
			return err
		}
		occ.Fencing = fencing
		if req.Exclusive && req.Skip == "" {
			// The task row is locked: every run of the task claimed
			// before is committed, and this first plain read sees it.
			var busy bool
			if err := c.row(ctx, qCronBusy, req.Task).Scan(&busy); err != nil {
				return err
			}
			if busy {
				return fmt.Errorf("a run of the task is still live: %w", backends.ErrHeld)
			}
		}
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

// qCronExtendItem is one extension of ExtendOccurrences' script: the
// UPDATE of qCronExtend, then the new expiry appended to @coordd_r, or 0
// when it matched nothing. Arguments: qCronExtend's.
const qCronExtendItem = qCronExtend + ";\nSET @coordd_r = CONCAT(@coordd_r, IF(ROW_COUNT() > 0, LAST_INSERT_ID(), 0), ',');\n"

// ExtendOccurrences implements backends.Crons.ExtendOccurrences: one
// script, one transaction.
func (s *Store) ExtendOccurrences(ctx context.Context, exts []backends.Extension) ([]backends.ExtendResult, error) {
	out := make([]backends.ExtendResult, len(exts))
	var sb strings.Builder
	sb.WriteString("SET @coordd_r = '';\nSTART TRANSACTION;\n")
	var args []any
	var sent []int
	for i, e := range exts {
		us, err := leaseMicros(e.Lease)
		if err != nil {
			out[i].Err = fmt.Errorf("extend cron %q: %w", e.Occurrence.Task, err)
			continue
		}
		o := e.Occurrence
		sb.WriteString(s.q(qCronExtendItem))
		args = append(args, us, o.Task, o.ScheduledAt.UnixMicro(), o.Attempt, o.Owner)
		sent = append(sent, i)
	}
	if len(sent) == 0 {
		return out, nil
	}
	sb.WriteString("COMMIT;\nSELECT @coordd_r")
	var text string
	err := s.runScript(ctx, sb.String(), args, func(_ int, rows *sql.Rows) error { return rows.Scan(&text) })
	fields := strings.Split(strings.TrimSuffix(text, ","), ",")
	if err == nil && len(fields) != len(sent) {
		err = fmt.Errorf("the script reported %q for %d extensions", text, len(sent))
	}
	exp := make([]int64, len(exts))
	for j, f := range fields {
		if err != nil {
			break
		}
		exp[sent[j]], err = strconv.ParseInt(f, 10, 64)
	}
	if err != nil {
		return nil, fmt.Errorf("extend %d cron occurrences: %w", len(sent), err)
	}
	for i, e := range exts {
		switch {
		case out[i].Err != nil:
		case exp[i] == 0:
			out[i].Err = fmt.Errorf("extend cron %q attempt %d: %w", e.Occurrence.Task, e.Occurrence.Attempt, backends.ErrLost)
		default:
			out[i].ExpiresAt = fromMicros(exp[i])
		}
	}
	return out, nil
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
	errs, err := s.FinishOccurrences(ctx, []backends.Finish{{Occurrence: occ, Result: res}})
	if err != nil {
		return fmt.Errorf("finish cron %q attempt %d: %w", occ.Task, occ.Attempt, err)
	}
	return errs[0]
}

// cronFinishScriptBytes bounds the output one finish script carries, well
// under the servers' default max_allowed_packet (16 MiB on MariaDB, 64 MiB
// on MySQL): a batch with more is sent as several scripts.
const cronFinishScriptBytes = 4 << 20

// FinishOccurrences implements backends.Crons.FinishOccurrences: one
// script (one transaction) per cronFinishScriptBytes of output. Finishes
// are sent in task order, so that concurrent scripts take their locks in
// the same order.
func (s *Store) FinishOccurrences(ctx context.Context, fins []backends.Finish) ([]error, error) {
	out := make([]error, len(fins))
	var order []int
	for i, f := range fins {
		if !cronFinal(f.Result.Status) {
			out[i] = fmt.Errorf("finish cron %q: status %q does not end a run", f.Occurrence.Task, f.Result.Status)
			continue
		}
		order = append(order, i)
	}
	slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(fins[a].Occurrence.Task, fins[b].Occurrence.Task) })
	recorded := make([]bool, len(fins))
	for len(order) > 0 {
		var sb strings.Builder
		sb.WriteString(qCronFinishHead)
		var args []any
		size, n := 0, 0
		for ; n < len(order) && (n == 0 || size < cronFinishScriptBytes); n++ {
			i := order[n]
			occ, res := fins[i].Occurrence, fins[i].Result
			o := res.Output
			if len(o) > cronMaxOutput {
				o = o[len(o)-cronMaxOutput:]
			}
			size += len(o) + len(res.Error)
			errText := sql.NullString{String: storableText(res.Error), Valid: res.Error != ""}
			sb.WriteString(s.q(qCronFinishItem))
			args = append(args, res.Status, res.ExitCode, errText, o, occ.Task, occ.ScheduledAt.UnixMicro(), occ.Attempt, occ.Owner,
				occ.Task, occ.Task, occ.Task)
		}
		sb.WriteString(qCronFinishTail)
		var text string
		err := s.runScript(ctx, sb.String(), args, func(_ int, rows *sql.Rows) error { return rows.Scan(&text) })
		if err == nil && len(text) != 2*n {
			err = fmt.Errorf("the script reported %q for %d finishes", text, n)
		}
		if err != nil {
			return nil, fmt.Errorf("finish %d cron occurrences: %w", n, err)
		}
		var trim []string
		for j := range n {
			recorded[order[j]] = text[2*j] == '1'
			if text[2*j+1] == 'T' {
				trim = append(trim, fins[order[j]].Occurrence.Task)
			}
		}
		for _, task := range trim {
			// The results are recorded; a trim that fails leaves the
			// excess to the task's next finish or reap, which trims again.
			_, _ = s.autocommit(ctx, qCronTrim, task, task, task)
		}
		order = order[n:]
	}
	for i, f := range fins {
		if out[i] == nil && !recorded[i] {
			out[i] = fmt.Errorf("finish cron %q attempt %d: %w", f.Occurrence.Task, f.Occurrence.Attempt, backends.ErrLost)
		}
	}
	return out, nil
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
