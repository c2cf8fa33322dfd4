package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/coordd/coordd/backends"
)

var _ backends.CronPauser = (*Store)(nil)

const (
	// qCronPause records an operator's pause at backend now, unless the
	// task is already paused: the first pause is kept. Arguments: host,
	// reason, name.
	qCronPause = "UPDATE `{p}cron_tasks` SET paused_at = " + nowSQL + ", paused_by = ?, paused_reason = ?\n" +
		"WHERE name = ? AND paused_at IS NULL"

	// qCronPauseRead reads and locks a task's pause (paused_at NULL:
	// none). Argument: name.
	qCronPauseRead = "SELECT paused_at, paused_by, paused_reason FROM `{p}cron_tasks` WHERE name = ? FOR UPDATE"

	// qCronResume removes a task's pause. Argument: name.
	qCronResume = "UPDATE `{p}cron_tasks` SET paused_at = NULL, paused_by = '', paused_reason = '' WHERE name = ?"
)

// PauseCron implements backends.CronPauser in one transaction.
func (s *Store) PauseCron(ctx context.Context, name, host, reason string) (backends.CronPause, bool, error) {
	if err := backends.CheckPause(name, host, reason); err != nil {
		return backends.CronPause{}, false, fmt.Errorf("pause cron %q: %w", name, err)
	}
	var p *backends.CronPause
	var changed bool
	err := s.write(ctx, func(c conn) error {
		r, err := c.exec(ctx, qCronPause, host, reason, name)
		if err != nil {
			return err
		}
		n, err := r.RowsAffected()
		if err != nil {
			return err
		}
		changed = n == 1
		p, err = readCronPause(ctx, c, name)
		return err
	})
	if err != nil {
		return backends.CronPause{}, false, fmt.Errorf("pause cron %q: %w", name, err)
	}
	return *p, changed, nil
}

// ResumeCron implements backends.CronPauser in one transaction.
func (s *Store) ResumeCron(ctx context.Context, name string) (*backends.CronPause, error) {
	var p *backends.CronPause
	err := s.write(ctx, func(c conn) error {
		var err error
		if p, err = readCronPause(ctx, c, name); err != nil || p == nil {
			return err
		}
		_, err = c.exec(ctx, qCronResume, name)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("resume cron %q: %w", name, err)
	}
	return p, nil
}

// readCronPause reads and locks task name's pause: nil when none,
// ErrNotFound when the task is absent.
func readCronPause(ctx context.Context, c conn, name string) (*backends.CronPause, error) {
	var at sql.NullInt64
	var p backends.CronPause
	err := c.row(ctx, qCronPauseRead, name).Scan(&at, &p.Host, &p.Reason)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, backends.ErrNotFound
	case err != nil:
		return nil, err
	case !at.Valid:
		return nil, nil
	}
	p.At = fromMicros(at.Int64)
	return &p, nil
}
