package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/internal/sqlstore"
)

// MySQL's writes on claimed cron occurrences: each call is one script
// (several statements in one round trip on a dedicated connection, see
// runScript), one transaction. The shared store's reads (due tasks,
// expired and running occurrences, history, pending retries) serve as
// they are; its writes are Standard SQL, a transaction of statements that
// each decide from the one before.

// cronOccKey matches one occurrence row by its primary key; arguments:
// task, scheduled_at, attempt.
const cronOccKey = `task = ? AND scheduled_at = ? AND attempt = ?`

const (
	// qCronExtendItem is one extension of ExtendOccurrences' script: it
	// renews a run lease, only for its owner, only while the run is
	// running and its lease unexpired, then appends the new expiry to
	// @coordd_r, or 0 when it matched nothing. Arguments: lease,
	// task, scheduled_at, attempt, owner.
	qCronExtendItem = "UPDATE `{p}cron_occurrences` SET expires_at = LAST_INSERT_ID(" + nowSQL + " + ?)\n" +
		"WHERE " + cronOccKey + " AND owner = ? AND status = 'running' AND expires_at > " + nowSQL + ";\n" +
		"SET @coordd_r = CONCAT(@coordd_r, IF(ROW_COUNT() > 0, LAST_INSERT_ID(), 0), ',');\n"

	// qCronExtendHead and qCronExtendTail enclose the items of an extend
	// script; the tail returns @coordd_r, one expiry per item.
	qCronExtendHead = "SET @coordd_r = '';\nSTART TRANSACTION;\n"
	qCronExtendTail = "COMMIT;\nSELECT @coordd_r"

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
		"  WHERE r.rn > " + sqlstore.CronHistoryLimit + ") d\n" +
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
		"SELECT IF(RIGHT(@coordd_r, 1) = '1', COUNT(*) - " + sqlstore.CronHistoryLimit + ", 0) INTO @coordd_x\n" +
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
)

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

// ExtendOccurrences implements backends.Crons.ExtendOccurrences: one
// script, one transaction.
func (s *Store) ExtendOccurrences(ctx context.Context, exts []backends.Extension) ([]backends.ExtendResult, error) {
	out := make([]backends.ExtendResult, len(exts))
	var sb strings.Builder
	sb.WriteString(qCronExtendHead)
	var args []any
	var sent []int
	for i, e := range exts {
		if out[i].Err = backends.CheckExtension(e); out[i].Err != nil {
			continue
		}
		o := e.Occurrence
		sb.WriteString(s.q(qCronExtendItem))
		args = append(args, e.Lease.Microseconds(), o.Task, o.ScheduledAt.UnixMicro(), o.Attempt, o.Owner)
		sent = append(sent, i)
	}
	if len(sent) == 0 {
		return out, nil
	}
	sb.WriteString(qCronExtendTail)
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
	for _, i := range sent {
		if exp[i] == 0 {
			out[i].Err = backends.OccurrenceError("extend", exts[i].Occurrence, backends.ErrLost)
		} else {
			out[i].ExpiresAt = fromMicros(exp[i])
		}
	}
	return out, nil
}

// cronFinishScriptBytes bounds the output one finish script carries, well
// under the servers' default max_allowed_packet (16 MiB on MariaDB, 64 MiB
// on MySQL): a batch with more is sent as several scripts.
const cronFinishScriptBytes = 4 << 20

// FinishOccurrences implements backends.Crons.FinishOccurrences: one
// script (one transaction) per cronFinishScriptBytes of output, each
// result recorded if its owner still runs the occurrence (ErrLost
// otherwise), with the last backends.MaxRunOutput bytes of output, and the
// task's history trimmed. Finishes are sent in task order
// (sqlstore.TaskOrder), so that concurrent scripts take their locks in
// the same order.
func (s *Store) FinishOccurrences(ctx context.Context, fins []backends.Finish) ([]error, error) {
	out := make([]error, len(fins))
	var order []int
	for _, i := range sqlstore.TaskOrder(len(fins), func(i int) string { return fins[i].Occurrence.Task }) {
		if out[i] = backends.CheckFinish(fins[i]); out[i] == nil {
			order = append(order, i)
		}
	}
	recorded := make([]bool, len(fins))
	for len(order) > 0 {
		n, err := s.finishScript(ctx, fins, order, recorded)
		if err != nil {
			return nil, fmt.Errorf("finish %d cron occurrences: %w", n, err)
		}
		order = order[n:]
	}
	for i, f := range fins {
		if out[i] == nil && !recorded[i] {
			out[i] = backends.OccurrenceError("finish", f.Occurrence, backends.ErrLost)
		}
	}
	return out, nil
}

// finishScript records the finishes at the head of order, up to
// cronFinishScriptBytes of output, in one script, marks in recorded those
// recorded, trims the histories it was told to, and returns how many it
// sent.
func (s *Store) finishScript(ctx context.Context, fins []backends.Finish, order []int, recorded []bool) (int, error) {
	var sb strings.Builder
	sb.WriteString(qCronFinishHead)
	var args []any
	size, n := 0, 0
	for ; n < len(order) && (n == 0 || size < cronFinishScriptBytes); n++ {
		occ, res := fins[order[n]].Occurrence, fins[order[n]].Result
		o := backends.OutputTail(res.Output)
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
		return n, err
	}
	for j := range n {
		recorded[order[j]] = text[2*j] == '1'
		if text[2*j+1] == 'T' {
			// The results are recorded; a trim that fails leaves the
			// excess to the task's next finish or reap, which trims again.
			task := fins[order[j]].Occurrence.Task
			_, _ = s.autocommit(ctx, qCronTrim, task, task, task)
		}
	}
	return n, nil
}

// ReapOccurrence marks occ lost if it is still running with an expired
// lease (backends.ErrNotExpired otherwise), and trims the task's history,
// in one script.
func (s *Store) ReapOccurrence(ctx context.Context, occ backends.Occurrence) error {
	var n int64
	err := s.runScript(ctx, qCronReap, []any{occ.Task, occ.ScheduledAt.UnixMicro(), occ.Attempt, occ.Task, occ.Task, occ.Task},
		func(_ int, rows *sql.Rows) error { return rows.Scan(&n) })
	if err == nil && n == 0 {
		err = backends.ErrNotExpired
	}
	if err != nil {
		return backends.OccurrenceError("reap", occ, err)
	}
	return nil
}
