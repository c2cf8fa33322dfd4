package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/coordd/coordd/backends"
)

var _ backends.CronAdmin = (*Store)(nil)

const (
	// qCronPut stores a task's definition. A new task gets next_exec as
	// given; an existing one keeps its next_exec unless the fourth argument
	// (resetNext) is true, so a definition-only change never moves or
	// repeats a run. A new row's fencing counter starts at backend now in
	// microseconds, so a task deleted and created again still hands out
	// numbers above any it handed out before (an update keeps the counter).
	// Arguments: name, def, next_exec (NULL: none), resetNext.
	qCronPut = "INSERT INTO `{p}cron_tasks` (name, def, next_exec, updated, fencing)\n" +
		`VALUES (?, ?, ?, ` + nowSQL + `, ` + nowSQL + `)
ON DUPLICATE KEY UPDATE def = VALUES(def), updated = VALUES(updated),
  next_exec = IF(?, VALUES(next_exec), next_exec)`

	// qCronDelete removes the task row only; occurrences keep their rows.
	qCronDelete = "DELETE FROM `{p}cron_tasks` WHERE name = ?"

	// qCronObserveHead reads many tasks, each with the number of its
	// occurrences running under an unexpired lease and its operator's
	// pause; the names follow,
	// bound, in IN (...), then qCronObserveTail.
	qCronObserveHead = "SELECT t.name, t.def, t.next_exec,\n" +
		"  (SELECT count(*) FROM `{p}cron_occurrences` o\n" +
		"   WHERE o.task = t.name AND o.status = 'running' AND o.expires_at > " + nowSQL + "),\n" +
		"  t.paused_at, t.paused_by, t.paused_reason\n" +
		"FROM `{p}cron_tasks` t WHERE t.name IN ("
	qCronObserveTail = ")"
)

// cronNullMicros converts a time to stored microseconds, the zero time to
// NULL.
func cronNullMicros(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixMicro(), Valid: true}
}

// cronFromNullMicros converts stored microseconds to UTC, NULL to the zero
// time.
func cronFromNullMicros(us sql.NullInt64) time.Time {
	if !us.Valid {
		return time.Time{}
	}
	return fromMicros(us.Int64)
}

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
		_, err := c.exec(ctx, qCronPut, name, string(def), cronNullMicros(next), resetNext)
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

// ObserveCrons reads many tasks, inChunk names per statement: up to
// inChunk names in one autocommit statement (one round trip), more in one
// read-only transaction (one snapshot).
func (s *Store) ObserveCrons(ctx context.Context, names []string) (map[string]*backends.CronState, error) {
	out := make(map[string]*backends.CronState, len(names))
	if len(names) == 0 {
		return out, nil
	}
	read := func(ctx context.Context, fn func(c conn) error) (bool, error) { return s.read(ctx, fn) }
	if len(names) <= inChunk {
		read = func(ctx context.Context, fn func(c conn) error) (bool, error) { return true, s.readAuto(ctx, fn) }
	}
	_, err := read(ctx, func(c conn) error {
		clear(out)
		for _, chunk := range chunks(names, inChunk) {
			if err := observeCronChunk(ctx, c, chunk, out); err != nil {
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

func observeCronChunk(ctx context.Context, c conn, names []string, out map[string]*backends.CronState) error {
	rows, err := c.query(ctx, qCronObserveHead+placeholders(len(names))+qCronObserveTail, anys(names)...)
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
		st.Def, st.NextExec = json.RawMessage(def), cronFromNullMicros(next)
		if pausedAt.Valid {
			p.At = fromMicros(pausedAt.Int64)
			st.Paused = &p
		}
		out[st.Name] = &st
	}
	return rows.Err()
}
