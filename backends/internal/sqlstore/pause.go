package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/coordd/coordd/backends"
)

// An operator's pause of a cron task lives on the task's row.
var (
	// qCronPause records a pause at store time, unless the task is already
	// paused: the first pause is kept. Arguments: host, reason, name.
	qCronPause = Query{SQL: `UPDATE {p}cron_tasks SET paused_at = {now}, paused_by = ?, paused_reason = ?
WHERE name = ? AND paused_at IS NULL`}

	// qCronPauseRead reads and locks a task's pause (paused_at NULL: none).
	// Argument: name.
	qCronPauseRead = Query{SQL: `SELECT paused_at, paused_by, paused_reason FROM {p}cron_tasks WHERE name = ?{lock}`}

	// qCronResume removes a task's pause. Argument: name.
	qCronResume = Query{SQL: `UPDATE {p}cron_tasks SET paused_at = NULL, paused_by = '', paused_reason = '' WHERE name = ?`}
)

// PauseCron implements backends.Crons in one transaction.
func (s *Core) PauseCron(ctx context.Context, name, host, reason string) (backends.CronPause, bool, error) {
	if err := backends.CheckPause(name, host, reason); err != nil {
		return backends.CronPause{}, false, fmt.Errorf("pause cron %q: %w", name, err)
	}
	var p *backends.CronPause
	var changed bool
	err := s.DB.Write(ctx, func(c Conn) error {
		n, err := Affected(c.Exec(ctx, s.DB.Dialect().Text(qCronPause), host, reason, name))
		if err != nil {
			return err
		}
		changed = n == 1
		p, err = s.readCronPause(ctx, c, name)
		return err
	})
	if err != nil {
		return backends.CronPause{}, false, fmt.Errorf("pause cron %q: %w", name, err)
	}
	return *p, changed, nil
}

// ResumeCron implements backends.Crons in one transaction.
func (s *Core) ResumeCron(ctx context.Context, name string) (*backends.CronPause, error) {
	var p *backends.CronPause
	err := s.DB.Write(ctx, func(c Conn) error {
		var err error
		if p, err = s.readCronPause(ctx, c, name); err != nil || p == nil {
			return err
		}
		_, err = c.Exec(ctx, s.DB.Dialect().Text(qCronResume), name)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("resume cron %q: %w", name, err)
	}
	return p, nil
}

// readCronPause reads and locks task name's pause: nil when none,
// ErrNotFound when the task is absent.
func (s *Core) readCronPause(ctx context.Context, c Conn, name string) (*backends.CronPause, error) {
	var at sql.NullInt64
	var p backends.CronPause
	err := c.QueryRow(ctx, s.DB.Dialect().Text(qCronPauseRead), name).Scan(&at, &p.Host, &p.Reason)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, backends.ErrNotFound
	case err != nil:
		return nil, err
	case !at.Valid:
		return nil, nil
	}
	p.At = FromMicros(at.Int64)
	return &p, nil
}
