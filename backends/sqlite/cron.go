package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/coordd/coordd/backends"
)

const (
	// qCronPut stores a task's definition. A new task gets next_exec as
	// given; an existing one keeps its next_exec unless ?4 (resetNext) is
	// true, so a definition-only change never moves or repeats a run.
	// A new row's fencing counter starts at backend now in microseconds, so
	// a task deleted and created again still hands out numbers above any it
	// handed out before (an update keeps the counter).
	qCronPut = `INSERT INTO cron_tasks (name, def, next_exec, updated, fencing) VALUES (?1, ?2, ?3, ` + nowSQL + `, ` + nowSQL + `)
ON CONFLICT (name) DO UPDATE SET def = excluded.def, updated = excluded.updated,
  next_exec = CASE WHEN ?4 THEN excluded.next_exec ELSE cron_tasks.next_exec END`

	// qCronDelete removes the task row only; occurrences keep their rows.
	qCronDelete = `DELETE FROM cron_tasks WHERE name = ?`

	// qCronObserve reads many tasks (a JSON array of names), each with the
	// number of its occurrences running under an unexpired lease and its
	// operator's pause.
	qCronObserve = `SELECT t.name, t.def, t.next_exec,
  (SELECT count(*) FROM cron_occurrences o
   WHERE o.task = t.name AND o.status = 'running' AND o.expires_at > ` + nowSQL + `),
  t.paused_at, t.paused_by, t.paused_reason
FROM cron_tasks t WHERE t.name IN (SELECT value FROM json_each(?))`
)

// PutCron stores the definition and, when resetNext (or the task is new),
// next_exec. A zero next means no next occurrence.
func (s *Store) PutCron(ctx context.Context, name string, def json.RawMessage, next time.Time, resetNext bool) error {
	if name == "" {
		return errors.New("put cron: empty name")
	}
	if !json.Valid(def) {
		return fmt.Errorf("put cron %q: definition is not valid JSON", name)
	}
	err := s.write(ctx, func(c conn) error {
		_, err := c.exec(ctx, qCronPut, name, string(def), toNullMicros(next), resetNext)
		return err
	})
	if err != nil {
		return fmt.Errorf("put cron %q: %w", name, err)
	}
	return nil
}

// DeleteCron removes the task; absent is not an error.
func (s *Store) DeleteCron(ctx context.Context, name string) error {
	err := s.write(ctx, func(c conn) error {
		_, err := c.exec(ctx, qCronDelete, name)
		return err
	})
	if err != nil {
		return fmt.Errorf("delete cron %q: %w", name, err)
	}
	return nil
}

// ObserveCrons reads many tasks in one statement.
func (s *Store) ObserveCrons(ctx context.Context, names []string) (map[string]*backends.CronState, error) {
	out := make(map[string]*backends.CronState, len(names))
	if len(names) == 0 {
		return out, nil
	}
	arg, err := namesJSON(names)
	if err != nil {
		return nil, fmt.Errorf("observe crons: %w", err)
	}
	_, err = s.read(ctx, func(c conn) error {
		rows, err := c.query(ctx, qCronObserve, arg)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var st backends.CronState
			var def string
			var next, pausedAt sql.NullInt64
			var p backends.CronPause
			if err := rows.Scan(&st.Name, &def, &next, &st.Running, &pausedAt, &p.Host, &p.Reason); err != nil {
				return err
			}
			st.Def, st.NextExec = json.RawMessage(def), fromNullMicros(next)
			if pausedAt.Valid {
				p.At = fromMicros(pausedAt.Int64)
				st.Paused = &p
			}
			out[st.Name] = &st
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("observe crons: %w", err)
	}
	return out, nil
}
