package sqlite

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/coordd/coordd/backends"
)

var _ backends.Crons = (*Store)(nil)

// cronPausedSQL is true when the task row t is paused: by an operator
// (paused_at, see PauseCron) or by paused: true in its definition.
const cronPausedSQL = `(t.paused_at IS NOT NULL OR json_extract(t.def, '$.paused') IS 1)`

// maxOutput is the most of a run's output that FinishOccurrence keeps: the
// tail, where the error usually is.
const maxOutput = 64 << 10

// maxManualProbe bounds the search for a free scheduled_at of a manual run
// (see ClaimOccurrence); each step is one microsecond after backend now.
const maxManualProbe = 1000

// occCols are the columns scanned by scanOcc, in its order.
const occCols = `task, scheduled_at, attempt, run_id, fencing, manual, owner, host, started_at, expires_at`

// occKey matches one occurrence row by its unique key: ?1 task,
// ?2 scheduled_at, ?3 attempt.
const occKey = `task = ?1 AND scheduled_at = ?2 AND attempt = ?3`

// historyLimitSQL is the history_limit of task ?1, read from its definition:
// 100 when the task is absent or its definition has no integer
// history_limit, never below 0.
const historyLimitSQL = `max(0, coalesce((SELECT CASE WHEN json_type(def, '$.history_limit') = 'integer'
  THEN json_extract(def, '$.history_limit') ELSE 100 END FROM cron_tasks WHERE name = ?1), 100))`

const (
	// qCronDue lists due tasks that are not paused, earliest first, up to
	// ?1 (-1: all), and in one more row (kind 1, name NULL) the earliest
	// next_exec of the tasks that are not due (NULL: none; paused ones
	// count, which costs a paused task one wake-up, not an index scan).
	// now is read once, so every task is either due or counted in that
	// minimum.
	qCronDue = `WITH n(now) AS MATERIALIZED (SELECT ` + nowSQL + `),
due AS (SELECT t.name, t.def, t.next_exec FROM cron_tasks t, n
  WHERE t.next_exec <= n.now AND NOT ` + cronPausedSQL + ` ORDER BY t.next_exec, t.name LIMIT ?1)
SELECT 0 AS kind, name, def, next_exec FROM due
UNION ALL
SELECT 1, NULL, NULL, (SELECT min(t.next_exec) FROM cron_tasks t, n WHERE t.next_exec > n.now)
ORDER BY kind, next_exec, name`

	// qCronAdvance is the compare-and-swap of a scheduled claim: it moves
	// next_exec from the claimed time ?2 to ?3, records the claiming host
	// ?4 and bumps the task's fencing counter, unless the task is paused.
	// No row: another host claimed first, next_exec moved, the task is
	// paused or absent (qCronTaskState tells which).
	qCronAdvance = `UPDATE cron_tasks AS t SET next_exec = ?3, exec_by = ?4, fencing = fencing + 1
WHERE name = ?1 AND next_exec = ?2 AND NOT ` + cronPausedSQL + ` RETURNING fencing`

	// qCronBumpRetry is qCronBumpFencing for a retry, which a pause
	// refuses. No row: the task is paused or absent.
	qCronBumpRetry = `UPDATE cron_tasks AS t SET fencing = fencing + 1
WHERE name = ?1 AND NOT ` + cronPausedSQL + ` RETURNING fencing`

	// qCronTaskState reads whether task ?1 exists and whether it is
	// paused, after a claim changed nothing.
	qCronTaskState = `SELECT count(*) > 0, coalesce(max(` + cronPausedSQL + `), 0) FROM cron_tasks t WHERE name = ?1`

	// qCronBumpFencing bumps the task's fencing counter for a manual run or
	// a retry, which leave next_exec alone. No row: the task is absent.
	qCronBumpFencing = `UPDATE cron_tasks SET fencing = fencing + 1 WHERE name = ?1 RETURNING fencing`

	// qCronRetryable reports whether attempt ?3 of (?1, ?2) ended
	// unsuccessfully (failed, timeout or lost), the condition for starting
	// the next attempt.
	qCronRetryable = `SELECT EXISTS (SELECT 1 FROM cron_occurrences
WHERE ` + occKey + ` AND status IN ('failed', 'timeout', 'lost'))`

	// qCronBusy reports whether task ?1 has a run whose lease is live: an
	// Exclusive claim (overlap forbid) is then refused.
	qCronBusy = `SELECT EXISTS (SELECT 1 FROM cron_occurrences
WHERE task = ?1 AND status = 'running' AND expires_at > ` + nowSQL + `)`

	// qCronManualTaken reports whether a manual run at ?2 would collide with
	// an existing attempt 1 of task ?1 or with its pending next_exec.
	qCronManualTaken = `SELECT EXISTS (SELECT 1 FROM cron_occurrences WHERE task = ?1 AND scheduled_at = ?2 AND attempt = 1)
  OR EXISTS (SELECT 1 FROM cron_tasks WHERE name = ?1 AND next_exec = ?2)`

	// qCronInsert inserts an occurrence started at backend now. A running
	// one (?9 = 'running') is leased until now + ?10; any other status is
	// recorded as finished at once (a skip, with ?10 = 0). An existing row
	// with the same key inserts nothing and returns no row.
	qCronInsert = `INSERT INTO cron_occurrences
  (task, scheduled_at, attempt, run_id, fencing, manual, owner, host, status, started_at, expires_at, finished_at, error)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ` + nowSQL + `, ` + nowSQL + ` + ?10,
  CASE WHEN ?9 = 'running' THEN NULL ELSE ` + nowSQL + ` END, ?11)
ON CONFLICT (task, scheduled_at, attempt) DO NOTHING
RETURNING started_at, expires_at`

	// qCronExtend renews a run lease, only for its owner ?4, only while the
	// run is running and its lease unexpired.
	qCronExtend = `UPDATE cron_occurrences SET expires_at = ` + nowSQL + ` + ?5
WHERE ` + occKey + ` AND owner = ?4 AND status = 'running' AND expires_at > ` + nowSQL + `
RETURNING expires_at`

	// qCronFinish records the result of a run still running under owner ?4.
	qCronFinish = `UPDATE cron_occurrences
SET status = ?5, exit_code = ?6, error = ?7, output = ?8, finished_at = ` + nowSQL + `
WHERE ` + occKey + ` AND owner = ?4 AND status = 'running'`

	// qCronTrim deletes task ?1's finished occurrences beyond the newest
	// history_limit; running ones are never deleted.
	qCronTrim = `DELETE FROM cron_occurrences WHERE task = ?1 AND status <> 'running' AND rowid NOT IN (
  SELECT rowid FROM cron_occurrences WHERE task = ?1 AND status <> 'running'
  ORDER BY started_at DESC, attempt DESC, rowid DESC LIMIT ` + historyLimitSQL + `)`

	// qCronExpired lists running occurrences whose run lease expired, the
	// longest expired first, up to ?1 (-1: all).
	qCronExpired = `SELECT ` + occCols + ` FROM cron_occurrences
WHERE status = 'running' AND expires_at <= ` + nowSQL + ` ORDER BY expires_at, task LIMIT ?1`

	// qCronReap marks a running occurrence whose lease expired as lost.
	qCronReap = `UPDATE cron_occurrences
SET status = 'lost', finished_at = ` + nowSQL + `, error = 'run lease expired: host lost'
WHERE ` + occKey + ` AND status = 'running' AND expires_at <= ` + nowSQL

	// qCronRunning lists task ?1's running occurrences whose lease is live.
	qCronRunning = `SELECT ` + occCols + ` FROM cron_occurrences
WHERE task = ?1 AND status = 'running' AND expires_at > ` + nowSQL + `
ORDER BY started_at, attempt, rowid`

	// qCronPendingRetries lists the latest attempt of each (task,
	// scheduled_at) that ended unsuccessfully and has no higher attempt,
	// earliest finished first (ties, within the clock's millisecond, in insert
	// order), up to ?1 (-1: all).
	qCronPendingRetries = `SELECT ` + occCols + `, status, coalesce(exit_code, 0), coalesce(error, ''), finished_at
FROM cron_occurrences o WHERE status IN ('failed', 'timeout', 'lost')
  AND NOT EXISTS (SELECT 1 FROM cron_occurrences h
    WHERE h.task = o.task AND h.scheduled_at = o.scheduled_at AND h.attempt > o.attempt)
ORDER BY finished_at, rowid LIMIT ?1`

	// qCronHistory lists task ?1's occurrences of any status, newest first,
	// up to ?2 (-1: all).
	qCronHistory = `SELECT ` + occCols + `, status, coalesce(exit_code, 0), coalesce(error, ''), output, finished_at
FROM cron_occurrences WHERE task = ?1
ORDER BY started_at DESC, attempt DESC, rowid DESC LIMIT ?2`
)

// sqlLimit maps a non-positive limit to SQLite's "no limit".
func sqlLimit(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}

// newRunID returns 16 random bytes in hex.
func newRunID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// scanner is *sql.Rows or *sql.Row.
type scanner interface{ Scan(dest ...any) error }

// scanOcc scans occCols followed by extra destinations.
func scanOcc(r scanner, o *backends.Occurrence, extra ...any) error {
	var sched, started, expires int64
	dest := append([]any{&o.Task, &sched, &o.Attempt, &o.RunID, &o.Fencing, &o.Manual, &o.Owner, &o.Host, &started, &expires}, extra...)
	if err := r.Scan(dest...); err != nil {
		return err
	}
	o.ScheduledAt, o.StartedAt, o.ExpiresAt = fromMicros(sched), fromMicros(started), fromMicros(expires)
	return nil
}

// DueTasks lists tasks whose next_exec is at or before backend now, earliest
// first, up to limit (non-positive: all), and the earliest next_exec of the
// others (zero when none). Both come from one statement and one instant.
func (s *Store) DueTasks(ctx context.Context, limit int) ([]backends.DueTask, time.Time, error) {
	var due []backends.DueTask
	var nextAt time.Time
	_, err := s.read(ctx, func(c conn) error {
		rows, err := c.Query(ctx, qCronDue, sqlLimit(limit))
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
				nextAt = fromNullMicros(next)
				continue
			}
			due = append(due, backends.DueTask{Name: name.String, Def: json.RawMessage(def.String), NextExec: fromNullMicros(next)})
		}
		return rows.Err()
	})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("due cron tasks: %w", err)
	}
	return due, nextAt, nil
}

// ClaimOccurrence implements backends.Crons.ClaimOccurrence in one
// IMMEDIATE transaction.
func (s *Store) ClaimOccurrence(ctx context.Context, req backends.ClaimRequest) (backends.Occurrence, error) {
	occ, err := s.claimOne(ctx, req)
	if err != nil {
		return backends.Occurrence{}, fmt.Errorf("claim cron %q attempt %d: %w", req.Task, req.Attempt, err)
	}
	return occ, nil
}

func (s *Store) claimOne(ctx context.Context, req backends.ClaimRequest) (backends.Occurrence, error) {
	cl, err := newCronClaim(req)
	if err != nil {
		return backends.Occurrence{}, err
	}
	err = s.write(ctx, func(c conn) error { return cl.run(ctx, c) })
	return cl.occ, err
}

// ClaimOccurrences implements backends.Crons.ClaimOccurrences in one
// IMMEDIATE transaction: each request runs inside a savepoint, so a
// request that is refused (ErrConflict, ErrNotFound, ErrHeld, ErrPaused)
// leaves no trace while the others commit. Any other error fails the
// whole call.
func (s *Store) ClaimOccurrences(ctx context.Context, reqs []backends.ClaimRequest) ([]backends.ClaimResult, error) {
	out := make([]backends.ClaimResult, len(reqs))
	claims := make([]*cronClaim, len(reqs))
	for i, req := range reqs {
		if req.Manual {
			out[i].Err = fmt.Errorf("claim cron %q: manual runs are claimed one at a time: %w", req.Task, backends.ErrUnsupported)
			continue
		}
		cl, err := newCronClaim(req)
		if err != nil {
			out[i].Err = fmt.Errorf("claim cron %q attempt %d: %w", req.Task, req.Attempt, err)
			continue
		}
		claims[i] = cl
	}
	errs := make([]error, len(reqs))
	err := s.write(ctx, func(c conn) error {
		clear(errs)
		for i, cl := range claims {
			if cl == nil {
				continue
			}
			if _, err := c.Exec(ctx, `SAVEPOINT claim`); err != nil {
				return err
			}
			err := cl.run(ctx, c)
			if err != nil {
				if !refusal(err) {
					return err
				}
				errs[i] = err
				if _, err := c.Exec(ctx, `ROLLBACK TO claim`); err != nil {
					return err
				}
			}
			if _, err := c.Exec(ctx, `RELEASE claim`); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim %d cron occurrences: %w", len(reqs), err)
	}
	for i, cl := range claims {
		switch {
		case cl == nil:
		case errs[i] != nil:
			out[i].Err = fmt.Errorf("claim cron %q attempt %d: %w", cl.req.Task, cl.req.Attempt, errs[i])
		default:
			out[i].Occurrence = cl.occ
		}
	}
	return out, nil
}

// refusal reports whether a claim's error is the claim being refused,
// rather than the store failing.
func refusal(err error) bool {
	return errors.Is(err, backends.ErrConflict) || errors.Is(err, backends.ErrNotFound) || errors.Is(err, backends.ErrHeld) ||
		errors.Is(err, backends.ErrPaused)
}

// cronClaim is one claim: its request, checked, and the occurrence it
// makes.
type cronClaim struct {
	req    backends.ClaimRequest
	status string
	lease  int64
	reason sql.NullString
	occ    backends.Occurrence
}

func newCronClaim(req backends.ClaimRequest) (*cronClaim, error) {
	switch {
	case req.Task == "":
		return nil, errors.New("empty task name")
	case req.Owner == "":
		return nil, errors.New("empty owner")
	case req.Attempt < 1:
		return nil, fmt.Errorf("attempt %d: must be at least 1", req.Attempt)
	}
	cl := &cronClaim{req: req, status: backends.RunRunning}
	if req.Skip != "" {
		cl.status, cl.reason = backends.RunSkipped, sql.NullString{String: req.Skip, Valid: true}
	} else {
		var err error
		if cl.lease, err = leaseMicros(req.Lease); err != nil {
			return nil, err
		}
	}
	return cl, nil
}

// run makes the claim in c's transaction; on error the caller rolls back
// what it wrote.
func (cl *cronClaim) run(ctx context.Context, c conn) error {
	req := cl.req
	occ := backends.Occurrence{
		Task: req.Task, Attempt: req.Attempt, RunID: newRunID(),
		Owner: req.Owner, Host: req.Host, Manual: req.Manual,
	}
	// notFoundOr tells an absent or paused task from a lost
	// compare-and-swap (or an attempt that may not run).
	notFoundOr := func(other error) error {
		var exists, paused bool
		if err := c.QueryRow(ctx, qCronTaskState, req.Task).Scan(&exists, &paused); err != nil {
			return err
		}
		switch {
		case !exists:
			return backends.ErrNotFound
		case paused:
			return backends.ErrPaused
		}
		return other
	}
	var sched int64
	switch {
	case req.Attempt > 1:
		sched = req.ScheduledAt.UnixMicro()
		var retryable bool
		if err := c.QueryRow(ctx, qCronRetryable, req.Task, sched, req.Attempt-1).Scan(&retryable); err != nil {
			return err
		}
		if !retryable {
			return fmt.Errorf("attempt %d has not ended unsuccessfully: %w", req.Attempt-1, backends.ErrConflict)
		}
		err := c.QueryRow(ctx, qCronBumpRetry, req.Task).Scan(&occ.Fencing)
		if errors.Is(err, sql.ErrNoRows) {
			return notFoundOr(backends.ErrNotFound)
		} else if err != nil {
			return err
		}
	case req.Manual:
		err := c.QueryRow(ctx, qCronBumpFencing, req.Task).Scan(&occ.Fencing)
		if errors.Is(err, sql.ErrNoRows) {
			return backends.ErrNotFound
		} else if err != nil {
			return err
		}
		if err := c.QueryRow(ctx, qNow).Scan(&sched); err != nil {
			return err
		}
		for i := 0; ; i, sched = i+1, sched+1 {
			if i == maxManualProbe {
				return fmt.Errorf("no free time for a manual run: %w", backends.ErrConflict)
			}
			var taken bool
			if err := c.QueryRow(ctx, qCronManualTaken, req.Task, sched).Scan(&taken); err != nil {
				return err
			}
			if !taken {
				break
			}
		}
	default:
		sched = req.ScheduledAt.UnixMicro()
		err := c.QueryRow(ctx, qCronAdvance, req.Task, sched, toNullMicros(req.Next), req.Host).Scan(&occ.Fencing)
		if errors.Is(err, sql.ErrNoRows) {
			return notFoundOr(fmt.Errorf("next_exec is no longer %s: %w", req.ScheduledAt.UTC().Format(time.RFC3339Nano), backends.ErrConflict))
		} else if err != nil {
			return err
		}
	}
	if req.Exclusive && req.Skip == "" {
		var busy bool
		if err := c.QueryRow(ctx, qCronBusy, req.Task).Scan(&busy); err != nil {
			return err
		}
		if busy {
			return fmt.Errorf("a run of the task is still live: %w", backends.ErrHeld)
		}
	}
	var started, expires int64
	err := c.QueryRow(ctx, qCronInsert, req.Task, sched, req.Attempt, occ.RunID, occ.Fencing, req.Manual,
		req.Owner, req.Host, cl.status, cl.lease, cl.reason).Scan(&started, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("occurrence already claimed: %w", backends.ErrConflict)
	} else if err != nil {
		return err
	}
	occ.ScheduledAt, occ.StartedAt, occ.ExpiresAt = fromMicros(sched), fromMicros(started), fromMicros(expires)
	if cl.status != backends.RunRunning {
		if _, err = c.Exec(ctx, qCronTrim, req.Task); err != nil {
			return err
		}
	}
	cl.occ = occ
	return nil
}

// ExtendOccurrence renews occ.Owner's run lease to backend now + lease.
func (s *Store) ExtendOccurrence(ctx context.Context, occ backends.Occurrence, lease time.Duration) (time.Time, error) {
	us, err := leaseMicros(lease)
	if err != nil {
		return time.Time{}, fmt.Errorf("extend cron %q: %w", occ.Task, err)
	}
	var exp int64
	err = s.write(ctx, func(c conn) error {
		err := c.QueryRow(ctx, qCronExtend, occ.Task, occ.ScheduledAt.UnixMicro(), occ.Attempt, occ.Owner, us).Scan(&exp)
		if errors.Is(err, sql.ErrNoRows) {
			return backends.ErrLost
		}
		return err
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("extend cron %q attempt %d: %w", occ.Task, occ.Attempt, err)
	}
	return fromMicros(exp), nil
}

// ExtendOccurrences implements backends.Crons.ExtendOccurrences in one
// IMMEDIATE transaction.
func (s *Store) ExtendOccurrences(ctx context.Context, exts []backends.Extension) ([]backends.ExtendResult, error) {
	out := make([]backends.ExtendResult, len(exts))
	us := make([]int64, len(exts))
	for i, e := range exts {
		var err error
		if us[i], err = leaseMicros(e.Lease); err != nil {
			out[i].Err = fmt.Errorf("extend cron %q: %w", e.Occurrence.Task, err)
		}
	}
	exp := make([]int64, len(exts))
	err := s.write(ctx, func(c conn) error {
		clear(exp)
		for i, e := range exts {
			if out[i].Err != nil {
				continue
			}
			o := e.Occurrence
			err := c.QueryRow(ctx, qCronExtend, o.Task, o.ScheduledAt.UnixMicro(), o.Attempt, o.Owner, us[i]).Scan(&exp[i])
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("extend %d cron occurrences: %w", len(exts), err)
	}
	for i, e := range exts {
		switch {
		case out[i].Err != nil:
		case exp[i] == 0:
			out[i].Err = fmt.Errorf("extend cron %q attempt %d: %w", e.Occurrence.Task, e.Occurrence.Attempt, backends.ErrLost)
		default:
			out[i].ExpiresAt = fromMicros(exp[i])
		}
	}
	return out, nil
}

// finished reports whether status ends a run.
func finished(status string) bool {
	switch status {
	case backends.RunSucceeded, backends.RunFailed, backends.RunTimedOut, backends.RunLost, backends.RunSkipped:
		return true
	}
	return false
}

// FinishOccurrence records res if occ.Owner still runs occ (ErrLost
// otherwise), keeping the last 64 KiB of output, and trims the task's
// finished occurrences to its history_limit in the same transaction.
func (s *Store) FinishOccurrence(ctx context.Context, occ backends.Occurrence, res backends.RunResult) error {
	errs, err := s.FinishOccurrences(ctx, []backends.Finish{{Occurrence: occ, Result: res}})
	if err != nil {
		return fmt.Errorf("finish cron %q attempt %d: %w", occ.Task, occ.Attempt, err)
	}
	return errs[0]
}

// FinishOccurrences implements backends.Crons.FinishOccurrences in one
// IMMEDIATE transaction.
func (s *Store) FinishOccurrences(ctx context.Context, fins []backends.Finish) ([]error, error) {
	out := make([]error, len(fins))
	for i, f := range fins {
		if !finished(f.Result.Status) {
			out[i] = fmt.Errorf("finish cron %q: status %q does not end a run", f.Occurrence.Task, f.Result.Status)
		}
	}
	lost := make([]bool, len(fins))
	err := s.write(ctx, func(c conn) error {
		clear(lost)
		for i, f := range fins {
			if out[i] != nil {
				continue
			}
			occ, res := f.Occurrence, f.Result
			o := res.Output
			if len(o) > maxOutput {
				o = o[len(o)-maxOutput:]
			}
			errText := sql.NullString{String: res.Error, Valid: res.Error != ""}
			r, err := c.Exec(ctx, qCronFinish, occ.Task, occ.ScheduledAt.UnixMicro(), occ.Attempt, occ.Owner,
				res.Status, res.ExitCode, errText, o)
			if err != nil {
				return err
			}
			if n, err := r.RowsAffected(); err != nil {
				return err
			} else if n == 0 {
				lost[i] = true
				continue
			}
			if _, err := c.Exec(ctx, qCronTrim, occ.Task); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("finish %d cron occurrences: %w", len(fins), err)
	}
	for i, f := range fins {
		if lost[i] {
			out[i] = fmt.Errorf("finish cron %q attempt %d: %w", f.Occurrence.Task, f.Occurrence.Attempt, backends.ErrLost)
		}
	}
	return out, nil
}

// ExpiredOccurrences lists running occurrences whose run lease expired, up
// to limit (non-positive: all).
func (s *Store) ExpiredOccurrences(ctx context.Context, limit int) ([]backends.Occurrence, error) {
	out, err := s.listOcc(ctx, qCronExpired, sqlLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("expired cron occurrences: %w", err)
	}
	return out, nil
}

// ReapOccurrence marks occ lost if it is still running with an expired
// lease (ErrConflict otherwise), then trims the task's history.
func (s *Store) ReapOccurrence(ctx context.Context, occ backends.Occurrence) error {
	err := s.write(ctx, func(c conn) error {
		r, err := c.Exec(ctx, qCronReap, occ.Task, occ.ScheduledAt.UnixMicro(), occ.Attempt)
		if err != nil {
			return err
		}
		if n, err := r.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return fmt.Errorf("not running with an expired lease: %w", backends.ErrConflict)
		}
		_, err = c.Exec(ctx, qCronTrim, occ.Task)
		return err
	})
	if err != nil {
		return fmt.Errorf("reap cron %q attempt %d: %w", occ.Task, occ.Attempt, err)
	}
	return nil
}

// Running lists task's occurrences whose run lease is live, oldest first.
func (s *Store) Running(ctx context.Context, task string) ([]backends.Occurrence, error) {
	out, err := s.listOcc(ctx, qCronRunning, task)
	if err != nil {
		return nil, fmt.Errorf("running cron %q: %w", task, err)
	}
	return out, nil
}

// listOcc runs a query that selects occCols.
func (s *Store) listOcc(ctx context.Context, query string, args ...any) ([]backends.Occurrence, error) {
	var out []backends.Occurrence
	_, err := s.read(ctx, func(c conn) error {
		rows, err := c.Query(ctx, query, args...)
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
func (s *Store) History(ctx context.Context, task string, limit int) ([]backends.Run, error) {
	var out []backends.Run
	_, err := s.read(ctx, func(c conn) error {
		rows, err := c.Query(ctx, qCronHistory, task, sqlLimit(limit))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r backends.Run
			var fin sql.NullInt64
			if err := scanOcc(rows, &r.Occurrence, &r.Status, &r.ExitCode, &r.Error, &r.Output, &fin); err != nil {
				return err
			}
			r.FinishedAt = fromNullMicros(fin)
			out = append(out, r)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("cron history %q: %w", task, err)
	}
	return out, nil
}

// PendingRetries lists the latest attempt of each (task, scheduled_at) that
// ended failed, timeout or lost and has no higher attempt, earliest finished
// first, up to limit (non-positive: all), without output.
func (s *Store) PendingRetries(ctx context.Context, limit int) ([]backends.Run, error) {
	var out []backends.Run
	_, err := s.read(ctx, func(c conn) error {
		rows, err := c.Query(ctx, qCronPendingRetries, sqlLimit(limit))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r backends.Run
			var fin sql.NullInt64
			if err := scanOcc(rows, &r.Occurrence, &r.Status, &r.ExitCode, &r.Error, &fin); err != nil {
				return err
			}
			r.FinishedAt = fromNullMicros(fin)
			out = append(out, r)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("pending cron retries: %w", err)
	}
	return out, nil
}
