package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/coordd/coordd/backends"
)

// An operator's pause of a cron task or a queue lives on its row, in the
// columns paused_at, paused_by and paused_reason: the same statements for
// both tables.
type pauseQueries struct {
	// what names the object in errors ("cron", "queue").
	what string
	// pause records a pause at store time, unless one is recorded: the
	// first pause is kept. Arguments: host, reason, name.
	pause Query
	// read reads and locks the pause (paused_at NULL: none). Argument:
	// name.
	read Query
	// resume removes the pause. Argument: name.
	resume Query
}

func pauseOn(what, table string) pauseQueries {
	return pauseQueries{
		what: what,
		pause: Query{SQL: `UPDATE {p}` + table + ` SET paused_at = {now}, paused_by = ?, paused_reason = ?
WHERE name = ? AND paused_at IS NULL`},
		read:   Query{SQL: `SELECT paused_at, paused_by, paused_reason FROM {p}` + table + ` WHERE name = ?{lock}`},
		resume: Query{SQL: `UPDATE {p}` + table + ` SET paused_at = NULL, paused_by = '', paused_reason = '' WHERE name = ?`},
	}
}

var (
	cronPauses  = pauseOn("cron", "cron_tasks")
	queuePauses = pauseOn("queue", "queues")

	// qQueuePaused reads a queue's pause without a lock: the workers'
	// read before a claim. Argument: name.
	qQueuePaused = Query{SQL: `SELECT paused_at, paused_by, paused_reason FROM {p}queues WHERE name = ?`}
)

// PauseCron implements backends.Crons in one transaction.
func (s *Core) PauseCron(ctx context.Context, name, host, reason string) (backends.Pause, bool, error) {
	return s.pause(ctx, cronPauses, name, host, reason)
}

// ResumeCron implements backends.Crons in one transaction.
func (s *Core) ResumeCron(ctx context.Context, name string) (*backends.Pause, error) {
	return s.resume(ctx, cronPauses, name)
}

// PauseQueue implements backends.Queues in one transaction.
func (s *Core) PauseQueue(ctx context.Context, name, host, reason string) (backends.Pause, bool, error) {
	return s.pause(ctx, queuePauses, name, host, reason)
}

// ResumeQueue implements backends.Queues in one transaction.
func (s *Core) ResumeQueue(ctx context.Context, name string) (*backends.Pause, error) {
	return s.resume(ctx, queuePauses, name)
}

// QueuePaused implements backends.Queues in one statement.
func (s *Core) QueuePaused(ctx context.Context, name string) (*backends.Pause, error) {
	var p *backends.Pause
	found, err := s.DB.ReadOne(ctx, func(c Conn) error {
		var err error
		p, err = scanPause(c.QueryRow(ctx, s.DB.Dialect().Text(qQueuePaused), name))
		return err
	})
	if err == nil && !found {
		err = backends.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("read the pause of queue %q: %w", name, err)
	}
	return p, nil
}

func (s *Core) pause(ctx context.Context, q pauseQueries, name, host, reason string) (backends.Pause, bool, error) {
	if err := backends.CheckPause(name, host, reason); err != nil {
		return backends.Pause{}, false, fmt.Errorf("pause %s %q: %w", q.what, name, err)
	}
	var p *backends.Pause
	var changed bool
	err := s.DB.Write(ctx, func(c Conn) error {
		n, err := Affected(c.Exec(ctx, s.DB.Dialect().Text(q.pause), host, reason, name))
		if err != nil {
			return err
		}
		changed = n == 1
		p, err = scanPause(c.QueryRow(ctx, s.DB.Dialect().Text(q.read), name))
		return err
	})
	if err != nil {
		return backends.Pause{}, false, fmt.Errorf("pause %s %q: %w", q.what, name, err)
	}
	return *p, changed, nil
}

func (s *Core) resume(ctx context.Context, q pauseQueries, name string) (*backends.Pause, error) {
	var p *backends.Pause
	err := s.DB.Write(ctx, func(c Conn) error {
		var err error
		if p, err = scanPause(c.QueryRow(ctx, s.DB.Dialect().Text(q.read), name)); err != nil || p == nil {
			return err
		}
		_, err = c.Exec(ctx, s.DB.Dialect().Text(q.resume), name)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("resume %s %q: %w", q.what, name, err)
	}
	return p, nil
}

// scanPause reads a row of paused_at, paused_by, paused_reason: nil when
// not paused, ErrNotFound when there is no row.
func scanPause(r Scanner) (*backends.Pause, error) {
	var at sql.NullInt64
	var p backends.Pause
	err := r.Scan(&at, &p.Host, &p.Reason)
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
