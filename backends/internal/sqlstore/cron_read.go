package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/coordd/coordd/backends"
)

// A cron occurrence is a row of cron_occurrences, one per attempt of one
// scheduled time of a task, unique on (task, scheduled_at, attempt). The
// rows have no insert-order column: within a task the fencing number is
// handed out in claim order (every claim locks and bumps the task's
// counter in the transaction that inserts the row), so it breaks the ties
// of equal times.

// Fragments of the cron statements, for a store's own statements too (a
// MySQL script).
const (
	// CronPaused is true when the cron_tasks row in scope is paused: by an
	// operator (paused_at, see PauseCron) or by paused: true in its
	// definition.
	CronPaused = `(paused_at IS NOT NULL OR {jsontrue def paused})`

	// CronHistoryLimit is the history_limit of the task named by its one
	// parameter, read from its definition: 100 when the task is absent or
	// its definition has no integer history_limit, never below 0.
	CronHistoryLimit = `coalesce((SELECT CASE WHEN {jsonint def history_limit} < 0 THEN 0 ELSE {jsonint def history_limit} END
  FROM {p}cron_tasks WHERE name = ?), 100)`

	// cronOccCols are the columns scanOcc scans, in its order.
	cronOccCols = `task, scheduled_at, attempt, run_id, fencing, manual, owner, host, started_at, expires_at`
)

var (
	// qCronDue lists due tasks that are not paused, earliest first, up to
	// a limit, and in one more row (kind 1, name NULL) the earliest
	// next_exec of the tasks that are not due (NULL: none; paused ones
	// count, which costs a paused task one wake-up, not an index scan).
	// now is read once, so every task is either due or counted in that
	// minimum (MySQL fixes its clock for the whole statement). Argument:
	// limit.
	qCronDue = Query{
		SQL: `WITH n(now) AS MATERIALIZED (SELECT {now}),
due AS (SELECT name, def, next_exec FROM {p}cron_tasks, n
  WHERE next_exec <= n.now AND NOT ` + CronPaused + ` ORDER BY next_exec, name LIMIT ?)
SELECT 0 AS kind, name, def, next_exec FROM due
UNION ALL
SELECT 1, NULL, NULL, (SELECT min(next_exec) FROM {p}cron_tasks, n WHERE next_exec > n.now)
ORDER BY kind, next_exec, name`,
		MySQL: `SELECT 0 AS kind, d.name, d.def, d.next_exec FROM (
  SELECT name, def, next_exec FROM {p}cron_tasks WHERE next_exec <= {now} AND NOT ` + CronPaused + `
  ORDER BY next_exec, name LIMIT ?) d
UNION ALL
SELECT 1, NULL, NULL, (SELECT min(next_exec) FROM {p}cron_tasks WHERE next_exec > {now})
ORDER BY kind, next_exec, name`,
	}

	// qCronExpired lists running occurrences whose run lease expired, the
	// longest expired first. Argument: limit.
	qCronExpired = Query{SQL: `SELECT ` + cronOccCols + ` FROM {p}cron_occurrences
WHERE status = 'running' AND expires_at <= {now} ORDER BY expires_at, task LIMIT ?`}

	// qCronRunning lists a task's running occurrences whose lease is live,
	// oldest first. Argument: task.
	qCronRunning = Query{SQL: `SELECT ` + cronOccCols + ` FROM {p}cron_occurrences
WHERE task = ? AND status = 'running' AND expires_at > {now}
ORDER BY started_at, attempt, fencing`}

	// qCronPendingRetries lists the latest attempt of each (task,
	// scheduled_at) that ended unsuccessfully and has no higher attempt,
	// earliest finished first; ties (SQLite's clock counts milliseconds)
	// in claim order: started first, then by task and fencing. Argument:
	// limit.
	qCronPendingRetries = Query{SQL: `SELECT ` + cronOccCols + `, status, coalesce(exit_code, 0), coalesce(error, ''), finished_at
FROM {p}cron_occurrences o WHERE status IN ('failed', 'timeout', 'lost')
  AND NOT EXISTS (SELECT 1 FROM {p}cron_occurrences h
    WHERE h.task = o.task AND h.scheduled_at = o.scheduled_at AND h.attempt > o.attempt)
ORDER BY finished_at, started_at, task, fencing LIMIT ?`}

	// qCronHistory lists a task's occurrences of any status, newest first.
	// Arguments: task, limit.
	qCronHistory = Query{SQL: `SELECT ` + cronOccCols + `, status, coalesce(exit_code, 0), coalesce(error, ''), output, finished_at
FROM {p}cron_occurrences WHERE task = ?
ORDER BY started_at DESC, attempt DESC, fencing DESC LIMIT ?`}
)

// Limit maps a non-positive limit to "no limit", as a number every
// database takes in LIMIT.
func Limit(n int) int64 {
	if n <= 0 {
		return math.MaxInt64
	}
	return int64(n)
}

// TaskOrder returns the indexes 0..n-1 sorted by task, stably: the order
// in which a batch's writes take their rows' locks, so that two batches
// over the same tasks cannot deadlock. A task's own items keep the order
// given.
func TaskOrder(n int, task func(i int) string) []int {
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(task(a), task(b)) })
	return order
}

// scanOcc scans cronOccCols followed by extra destinations.
func scanOcc(r interface{ Scan(dest ...any) error }, o *backends.Occurrence, extra ...any) error {
	var sched, started, expires int64
	dest := append([]any{&o.Task, &sched, &o.Attempt, &o.RunID, &o.Fencing, &o.Manual, &o.Owner, &o.Host, &started, &expires}, extra...)
	if err := r.Scan(dest...); err != nil {
		return err
	}
	o.ScheduledAt, o.StartedAt, o.ExpiresAt = FromMicros(sched), FromMicros(started), FromMicros(expires)
	return nil
}

// DueTasks lists tasks whose next_exec is at or before the store's now,
// earliest first, up to limit (non-positive: all), and the earliest
// next_exec of the others (zero when none). Both come from one statement
// and one instant.
func (s *Core) DueTasks(ctx context.Context, limit int) ([]backends.DueTask, time.Time, error) {
	var due []backends.DueTask
	var nextAt time.Time
	_, err := s.DB.ReadOne(ctx, func(c Conn) error {
		due, nextAt = nil, time.Time{}
		rows, err := c.Query(ctx, s.DB.Dialect().Text(qCronDue), Limit(limit))
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
				nextAt = FromNullMicros(next)
				continue
			}
			due = append(due, backends.DueTask{Name: name.String, Def: json.RawMessage(def.String), NextExec: FromNullMicros(next)})
		}
		return rows.Err()
	})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("due cron tasks: %w", err)
	}
	return due, nextAt, nil
}

// ExpiredOccurrences lists running occurrences whose run lease expired, the
// longest expired first, up to limit (non-positive: all).
func (s *Core) ExpiredOccurrences(ctx context.Context, limit int) ([]backends.Occurrence, error) {
	out, err := s.listOcc(ctx, qCronExpired, Limit(limit))
	if err != nil {
		return nil, fmt.Errorf("expired cron occurrences: %w", err)
	}
	return out, nil
}

// Running lists task's occurrences whose run lease is live, oldest first.
func (s *Core) Running(ctx context.Context, task string) ([]backends.Occurrence, error) {
	out, err := s.listOcc(ctx, qCronRunning, task)
	if err != nil {
		return nil, fmt.Errorf("running cron %q: %w", task, err)
	}
	return out, nil
}

// listOcc reads the occurrences q selects (cronOccCols).
func (s *Core) listOcc(ctx context.Context, q Query, args ...any) ([]backends.Occurrence, error) {
	var out []backends.Occurrence
	_, err := s.DB.ReadOne(ctx, func(c Conn) error {
		out = nil
		rows, err := c.Query(ctx, s.DB.Dialect().Text(q), args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var o backends.Occurrence
			if err := scanOcc(rows, &o); err != nil {
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
func (s *Core) History(ctx context.Context, task string, limit int) ([]backends.Run, error) {
	out, err := s.listRuns(ctx, qCronHistory, true, task, Limit(limit))
	if err != nil {
		return nil, fmt.Errorf("cron history %q: %w", task, err)
	}
	return out, nil
}

// PendingRetries lists the latest attempt of each (task, scheduled_at) that
// ended failed, timeout or lost and has no higher attempt, earliest finished
// first, up to limit (non-positive: all), without output.
func (s *Core) PendingRetries(ctx context.Context, limit int) ([]backends.Run, error) {
	out, err := s.listRuns(ctx, qCronPendingRetries, false, Limit(limit))
	if err != nil {
		return nil, fmt.Errorf("pending cron retries: %w", err)
	}
	return out, nil
}

// listRuns reads the runs q selects: cronOccCols, status, exit code,
// error, the output when withOutput, and finished_at.
func (s *Core) listRuns(ctx context.Context, q Query, withOutput bool, args ...any) ([]backends.Run, error) {
	var out []backends.Run
	_, err := s.DB.ReadOne(ctx, func(c Conn) error {
		out = nil
		rows, err := c.Query(ctx, s.DB.Dialect().Text(q), args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r backends.Run
			var fin sql.NullInt64
			dest := []any{&r.Status, &r.ExitCode, &r.Error}
			if withOutput {
				dest = append(dest, &r.Output)
			}
			if err := scanOcc(rows, &r.Occurrence, append(dest, &fin)...); err != nil {
				return err
			}
			r.FinishedAt = FromNullMicros(fin)
			out = append(out, r)
		}
		return rows.Err()
	})
	return out, err
}
