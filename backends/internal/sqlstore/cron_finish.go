package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/coordd/coordd/backends"
)

// The writes on a claimed occurrence in the Standard flavor: each decision
// is the WHERE of one UPDATE, whose RETURNING or row count says whether it
// held. A MySQL store brings its own (scripts).
var (
	// qCronExtend renews a run lease, only for its owner, only while the
	// run is running and its lease unexpired. Arguments: lease µs, task,
	// scheduled_at, attempt, owner.
	qCronExtend = Query{SQL: `UPDATE {p}cron_occurrences SET expires_at = {now} + ?
WHERE task = ? AND scheduled_at = ? AND attempt = ? AND owner = ? AND status = 'running' AND expires_at > {now}
RETURNING expires_at`}

	// qCronFinish records the result of a run still running under its
	// owner. Arguments: status, exit_code, error, output, task,
	// scheduled_at, attempt, owner.
	qCronFinish = Query{SQL: `UPDATE {p}cron_occurrences
SET status = ?, exit_code = ?, error = ?, output = ?, finished_at = {now}
WHERE task = ? AND scheduled_at = ? AND attempt = ? AND owner = ? AND status = 'running'`}

	// qCronReap marks a running occurrence whose lease expired as lost.
	// Arguments: task, scheduled_at, attempt.
	qCronReap = Query{SQL: `UPDATE {p}cron_occurrences
SET status = 'lost', finished_at = {now}, error = 'run lease expired: host lost'
WHERE task = ? AND scheduled_at = ? AND attempt = ? AND status = 'running' AND expires_at <= {now}`}

	// qCronTrim deletes a task's finished occurrences beyond the newest
	// history_limit; running ones are never deleted. The subquery lists
	// only the rows to delete (usually one, or none), each then found by
	// its key; SQLite takes an OFFSET only after a LIMIT, hence the
	// largest one. Arguments: task, task, task.
	qCronTrim = Query{SQL: `DELETE FROM {p}cron_occurrences WHERE task = ? AND status <> 'running' AND (scheduled_at, attempt) IN (
  SELECT scheduled_at, attempt FROM {p}cron_occurrences WHERE task = ? AND status <> 'running'
  ORDER BY started_at DESC, attempt DESC, fencing DESC LIMIT 9223372036854775807 OFFSET ` + CronHistoryLimit + `)`}
)

// trim deletes task's finished occurrences beyond its history_limit.
func (s *Core) trim(ctx context.Context, c Conn, task string) error {
	_, err := c.Exec(ctx, s.DB.Dialect().Text(qCronTrim), task, task, task)
	return err
}

// ExtendOccurrences implements backends.Crons.ExtendOccurrences in one
// write transaction.
func (s *Core) ExtendOccurrences(ctx context.Context, exts []backends.Extension) ([]backends.ExtendResult, error) {
	out := make([]backends.ExtendResult, len(exts))
	var todo []int
	for i, e := range exts {
		if out[i].Err = backends.CheckExtension(e); out[i].Err == nil {
			todo = append(todo, i)
		}
	}
	if len(todo) == 0 {
		return out, nil
	}
	if err := s.standard(); err != nil {
		return nil, fmt.Errorf("extend %d cron occurrences: %w", len(todo), err)
	}
	q := s.DB.Dialect().Text(qCronExtend)
	exp := make([]int64, len(exts))
	err := s.DB.Write(ctx, func(c Conn) error {
		clear(exp)
		for _, i := range todo {
			o := exts[i].Occurrence
			err := c.QueryRow(ctx, q, exts[i].Lease.Microseconds(), o.Task, o.ScheduledAt.UnixMicro(), o.Attempt, o.Owner).Scan(&exp[i])
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("extend %d cron occurrences: %w", len(todo), err)
	}
	for _, i := range todo {
		if exp[i] == 0 {
			out[i].Err = backends.OccurrenceError("extend", exts[i].Occurrence, backends.ErrLost)
		} else {
			out[i].ExpiresAt = FromMicros(exp[i])
		}
	}
	return out, nil
}

// FinishOccurrences implements backends.Crons.FinishOccurrences in one
// write transaction: each result is recorded if its owner still runs the
// occurrence (ErrLost otherwise), with the last backends.MaxRunOutput
// bytes of output, and the task's finished occurrences are trimmed to its
// history_limit. Results are recorded in task order (TaskOrder), so that
// concurrent calls lock and trim rows in the same order.
func (s *Core) FinishOccurrences(ctx context.Context, fins []backends.Finish) ([]error, error) {
	out := make([]error, len(fins))
	var todo []int
	for _, i := range TaskOrder(len(fins), func(i int) string { return fins[i].Occurrence.Task }) {
		if out[i] = backends.CheckFinish(fins[i]); out[i] == nil {
			todo = append(todo, i)
		}
	}
	if len(todo) == 0 {
		return out, nil
	}
	if err := s.standard(); err != nil {
		return nil, fmt.Errorf("finish %d cron occurrences: %w", len(todo), err)
	}
	d := s.DB.Dialect()
	lost := make([]bool, len(fins))
	err := s.DB.Write(ctx, func(c Conn) error {
		clear(lost)
		for _, i := range todo {
			occ, res := fins[i].Occurrence, fins[i].Result
			errText := sql.NullString{String: storable(d, res.Error), Valid: res.Error != ""}
			n, err := Affected(c.Exec(ctx, d.Text(qCronFinish), res.Status, res.ExitCode, errText, backends.OutputTail(res.Output),
				occ.Task, occ.ScheduledAt.UnixMicro(), occ.Attempt, occ.Owner))
			if err != nil {
				return err
			}
			if n == 0 {
				lost[i] = true
				continue
			}
			if err := s.trim(ctx, c, occ.Task); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("finish %d cron occurrences: %w", len(todo), err)
	}
	for _, i := range todo {
		if lost[i] {
			out[i] = backends.OccurrenceError("finish", fins[i].Occurrence, backends.ErrLost)
		}
	}
	return out, nil
}

// ReapOccurrence marks occ lost if it is still running with an expired
// lease (backends.ErrNotExpired otherwise), then trims the task's history,
// in one write transaction.
func (s *Core) ReapOccurrence(ctx context.Context, occ backends.Occurrence) error {
	err := s.standard()
	if err == nil {
		err = s.DB.Write(ctx, func(c Conn) error {
			n, err := Affected(c.Exec(ctx, s.DB.Dialect().Text(qCronReap), occ.Task, occ.ScheduledAt.UnixMicro(), occ.Attempt))
			if err != nil {
				return err
			}
			if n == 0 {
				return backends.ErrNotExpired
			}
			return s.trim(ctx, c, occ.Task)
		})
	}
	if err != nil {
		return backends.OccurrenceError("reap", occ, err)
	}
	return nil
}
