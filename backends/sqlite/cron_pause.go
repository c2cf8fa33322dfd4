package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/coordd/coordd/backends"
)

var _ backends.CronPauser = (*Store)(nil)

const (
	// qCronPause records an operator's pause of task ?1 by host ?2 for
	// reason ?3 at backend now, unless the task is already paused: the
	// first pause is kept.
	qCronPause = `UPDATE cron_tasks SET paused_at = ` + nowSQL + `, paused_by = ?2, paused_reason = ?3
WHERE name = ?1 AND paused_at IS NULL`

	// qCronPauseRead reads task ?1's pause (paused_at NULL: none).
	qCronPauseRead = `SELECT paused_at, paused_by, paused_reason FROM cron_tasks WHERE name = ?1`

	// qCronResume removes task ?1's pause.
	qCronResume = `UPDATE cron_tasks SET paused_at = NULL, paused_by = '', paused_reason = '' WHERE name = ?1`
)

// PauseCron implements backends.CronPauser in one IMMEDIATE transaction.
func (s *Store) PauseCron(ctx context.Context, name, host, reason string) (backends.CronPause, bool, error) {
	if err := backends.CheckPause(name, host, reason); err != nil {
		return backends.CronPause{}, false, fmt.Errorf("pause cron %q: %w", name, err)
	}
	var p *backends.CronPause
	var changed bool
	err := s.write(ctx, func(c conn) error {
		r, err := c.exec(ctx, qCronPause, name, host, reason)
		if err != nil {
			return err
		}
		n, err := r.RowsAffected()
		if err != nil {
			return err
		}
		changed = n == 1
		p, err = readPause(ctx, c, name)
		return err
	})
	if err != nil {
		return backends.CronPause{}, false, fmt.Errorf("pause cron %q: %w", name, err)
	}
	return *p, changed, nil
}

// ResumeCron implements backends.CronPauser in one IMMEDIATE transaction.
func (s *Store) ResumeCron(ctx context.Context, name string) (*backends.CronPause, error) {
	var p *backends.CronPause
	err := s.write(ctx, func(c conn) error {
		var err error
		if p, err = readPause(ctx, c, name); err != nil || p == nil {
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

// readPause reads task name's pause: nil when none, ErrNotFound when the
// task is absent.
func readPause(ctx context.Context, c conn, name string) (*backends.CronPause, error) {
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
