package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/coordd/coordd/backends"
)

// A cron task is a row of cron_tasks: its applied definition (canonical
// JSON), next_exec, its fencing counter and an operator's pause.
var (
	// qCronPut stores a task's definition. A new task gets next_exec as
	// given; an existing one keeps its next_exec unless resetNext is true,
	// so a definition-only change never moves or repeats a run. A new
	// row's fencing counter starts at the store's clock in microseconds,
	// so a task deleted and created again still hands out numbers above
	// any it handed out before (an update keeps the counter). Arguments:
	// name, def, next_exec (NULL: none), resetNext.
	qCronPut = Query{
		SQL: `INSERT INTO {p}cron_tasks AS t (name, def, next_exec, updated, fencing) VALUES (?, ?, ?, {now}, {now})
ON CONFLICT (name) DO UPDATE SET def = excluded.def, updated = excluded.updated,
  next_exec = CASE WHEN ? <> 0 THEN excluded.next_exec ELSE t.next_exec END`,
		MySQL: `INSERT INTO {p}cron_tasks (name, def, next_exec, updated, fencing) VALUES (?, ?, ?, {now}, {now})
ON DUPLICATE KEY UPDATE def = VALUES(def), updated = VALUES(updated),
  next_exec = IF(?, VALUES(next_exec), next_exec)`,
	}

	// qCronSetNext and qCronSetNextFromNone set a task's next_exec when it
	// holds the given time, or none. Arguments: next_exec (NULL: none),
	// name[, the time it must hold].
	qCronSetNext         = Query{SQL: `UPDATE {p}cron_tasks SET next_exec = ? WHERE name = ? AND next_exec = ?`}
	qCronSetNextFromNone = Query{SQL: `UPDATE {p}cron_tasks SET next_exec = ? WHERE name = ? AND next_exec IS NULL`}

	// qCronDelete removes the task row only; occurrences keep their rows.
	qCronDelete = Query{SQL: `DELETE FROM {p}cron_tasks WHERE name = ?`}

	// qCronObserve reads many tasks, each with the number of its
	// occurrences running under an unexpired lease and its operator's
	// pause.
	qCronObserve = Query{SQL: `SELECT t.name, t.def, t.next_exec,
  (SELECT count(*) FROM {p}cron_occurrences o
   WHERE o.task = t.name AND o.status = 'running' AND o.expires_at > {now}),
  t.paused_at, t.paused_by, t.paused_reason
FROM {p}cron_tasks t WHERE t.name {in}`}
)

// PutCron stores the definition and, when resetNext (or the task is new),
// next_exec. A zero next means no next occurrence.
func (s *Core) PutCron(ctx context.Context, name string, def json.RawMessage, next time.Time, resetNext bool) error {
	if name == "" {
		return errors.New("put cron: empty name")
	}
	if !json.Valid(def) {
		return fmt.Errorf("put cron %q: definition is not valid JSON", name)
	}
	if _, err := s.DB.WriteOne(ctx, s.DB.Dialect().Text(qCronPut), name, string(def), ToNullMicros(next), resetNext); err != nil {
		return fmt.Errorf("put cron %q: %w", name, err)
	}
	return nil
}

// SetNextExec sets next_exec to to if it holds from (zero: none).
func (s *Core) SetNextExec(ctx context.Context, name string, from, to time.Time) (bool, error) {
	if err := backends.CheckSetNextExec(name, from, to); err != nil {
		return false, err
	}
	q, args := qCronSetNext, []any{ToNullMicros(to), name, from.UnixMicro()}
	if from.IsZero() {
		q, args = qCronSetNextFromNone, args[:2]
	}
	n, err := Affected(s.DB.WriteOne(ctx, s.DB.Dialect().Text(q), args...))
	if err != nil {
		return false, fmt.Errorf("set next_exec of cron %q: %w", name, err)
	}
	return n == 1, nil
}

// DeleteCron removes the task; absent is not an error.
func (s *Core) DeleteCron(ctx context.Context, name string) error {
	if _, err := s.DB.WriteOne(ctx, s.DB.Dialect().Text(qCronDelete), name); err != nil {
		return fmt.Errorf("delete cron %q: %w", name, err)
	}
	return nil
}

// ObserveCrons reads many tasks: one statement when the names fit in one
// list, else one per list in a read snapshot.
func (s *Core) ObserveCrons(ctx context.Context, names []string) (map[string]*backends.CronState, error) {
	out := make(map[string]*backends.CronState, len(names))
	if len(names) == 0 {
		return out, nil
	}
	d := s.DB.Dialect()
	lists := ListChunks(d, names)
	_, err := s.readLists(ctx, len(lists), func(c Conn) error {
		clear(out)
		for _, l := range lists {
			rows, err := QueryIn(ctx, c, d, qCronObserve, l)
			if err != nil {
				return err
			}
			err = scanCronStates(rows, out)
			rows.Close()
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("observe crons: %w", err)
	}
	return out, nil
}

// readLists reads with one statement per list: ReadOne for one, Read (one
// snapshot) for more.
func (s *Core) readLists(ctx context.Context, n int, fn func(Conn) error) (bool, error) {
	if n == 1 {
		return s.DB.ReadOne(ctx, fn)
	}
	return s.DB.Read(ctx, fn)
}

// scanCronStates reads qCronObserve's rows into out.
func scanCronStates(rows *sql.Rows, out map[string]*backends.CronState) error {
	for rows.Next() {
		var st backends.CronState
		var def string
		var next, pausedAt sql.NullInt64
		var p backends.CronPause
		if err := rows.Scan(&st.Name, &def, &next, &st.Running, &pausedAt, &p.Host, &p.Reason); err != nil {
			return err
		}
		st.Def, st.NextExec = json.RawMessage(def), FromNullMicros(next)
		if pausedAt.Valid {
			p.At = FromMicros(pausedAt.Int64)
			st.Paused = &p
		}
		out[st.Name] = &st
	}
	return rows.Err()
}
