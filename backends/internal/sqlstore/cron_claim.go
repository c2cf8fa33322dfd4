package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/coordd/coordd/backends"
)

// The claims of the Standard flavor: one write transaction per call, in
// which every claim first writes its task's row (the compare-and-swap of
// next_exec, or the fencing counter's bump), so that the row's lock orders
// the claims of one task: on SQLite the transaction holds the whole file
// anyway; at READ COMMITTED (PostgreSQL) each later statement reads what
// every earlier claim of the task committed. Each decision is a
// conditional UPDATE whose RETURNING tells whether it matched, or a read
// made under that lock. A MySQL store brings its own claims (scripts).
var (
	// qCronAdvance is the compare-and-swap of a scheduled claim (or skip):
	// it moves next_exec from the claimed time to the next one, records
	// the claiming host and bumps the task's fencing counter, unless the
	// task is paused. No row: another host claimed first, next_exec moved,
	// or the task is paused or absent (qCronTaskState tells which).
	// Arguments: next_exec (NULL: none), host, task, scheduled_at.
	qCronAdvance = Query{SQL: `UPDATE {p}cron_tasks SET next_exec = ?, exec_by = ?, fencing = {next:fencing}
WHERE name = ? AND next_exec = ? AND NOT ` + CronPaused + ` RETURNING fencing`}

	// qCronBumpRetry bumps the fencing counter for a retry, which leaves
	// next_exec alone and which a pause refuses. No row: the task is
	// paused or absent. Argument: task.
	qCronBumpRetry = Query{SQL: `UPDATE {p}cron_tasks SET fencing = {next:fencing}
WHERE name = ? AND NOT ` + CronPaused + ` RETURNING fencing`}

	// qCronBumpManual bumps the fencing counter for a manual run, which
	// leaves next_exec alone and which a pause does not refuse. No row:
	// the task is absent. Argument: task.
	qCronBumpManual = Query{SQL: `UPDATE {p}cron_tasks SET fencing = {next:fencing} WHERE name = ? RETURNING fencing`}

	// qCronTaskState reads whether a task is paused, after a claim's
	// UPDATE matched nothing (no row: the task is absent). Argument: task.
	qCronTaskState = Query{SQL: `SELECT ` + CronPaused + ` FROM {p}cron_tasks WHERE name = ?`}

	// qCronRetryable reports whether an attempt ended unsuccessfully
	// (failed, timeout or lost), the condition for starting the next one.
	// Arguments: task, scheduled_at, attempt.
	qCronRetryable = Query{SQL: `SELECT EXISTS (SELECT 1 FROM {p}cron_occurrences
WHERE task = ? AND scheduled_at = ? AND attempt = ? AND status IN ('failed', 'timeout', 'lost'))`}

	// qCronBusy reports whether a task has a run whose lease is live: an
	// Exclusive claim (overlap forbid) is then refused. Argument: task.
	qCronBusy = Query{SQL: `SELECT EXISTS (SELECT 1 FROM {p}cron_occurrences
WHERE task = ? AND status = 'running' AND expires_at > {now})`}

	// qCronManualTaken reports whether a manual run at a time would collide
	// with an existing attempt 1 of the task or with its pending
	// next_exec. Arguments: task, time, task, time.
	qCronManualTaken = Query{SQL: `SELECT EXISTS (SELECT 1 FROM {p}cron_occurrences WHERE task = ? AND scheduled_at = ? AND attempt = 1)
  OR EXISTS (SELECT 1 FROM {p}cron_tasks WHERE name = ? AND next_exec = ?)`}

	// qCronInsert inserts an occurrence started at the store's now. A
	// running one is leased until now + lease; a finished one (a skip,
	// with lease 0) is recorded as finished at once. An existing row with
	// the same key inserts nothing and returns no row. Arguments: task,
	// scheduled_at, attempt, run_id, fencing, manual, owner, host, status,
	// lease µs, finished (bool), error.
	qCronInsert = Query{SQL: `INSERT INTO {p}cron_occurrences
  (task, scheduled_at, attempt, run_id, fencing, manual, owner, host, status, started_at, expires_at, finished_at, error)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, {now}, {now} + ?, CASE WHEN ? <> 0 THEN {now} END, ?)
ON CONFLICT (task, scheduled_at, attempt) DO NOTHING
RETURNING started_at, expires_at`}

	// The savepoint each claim of a batch runs in, so that a refused claim
	// leaves no trace while the others commit.
	qClaimSavepoint = Query{SQL: `SAVEPOINT claim`}
	qClaimRollback  = Query{SQL: `ROLLBACK TO claim`}
	qClaimRelease   = Query{SQL: `RELEASE claim`}
)

// standard refuses a call whose Standard-flavor statements the store's
// dialect cannot run: a MySQL store brings its own.
func (s *Core) standard() error {
	if s.DB.Dialect().Flavor != Standard {
		return fmt.Errorf("the shared cron writes are Standard SQL, this store's is not: %w", backends.ErrUnsupported)
	}
	return nil
}

// storable is text as the store's text columns accept it.
func storable(d *Dialect, text string) string {
	if d.StorableText == nil {
		return text
	}
	return d.StorableText(text)
}

// ClaimOccurrence implements backends.Crons.ClaimOccurrence in one write
// transaction.
func (s *Core) ClaimOccurrence(ctx context.Context, req backends.ClaimRequest) (backends.Occurrence, error) {
	err := backends.CheckClaim(req)
	if err == nil {
		err = s.standard()
	}
	var occ backends.Occurrence
	if err == nil {
		err = s.DB.Write(ctx, func(c Conn) (err error) {
			occ, err = s.claim(ctx, c, req)
			return err
		})
	}
	if err != nil {
		return backends.Occurrence{}, backends.ClaimError(req, err)
	}
	return occ, nil
}

// ClaimOccurrences implements backends.Crons.ClaimOccurrences in one write
// transaction: each claim runs inside a savepoint, so that a claim that is
// refused (backends.Refused) leaves no trace while the others commit. Any
// other error fails the whole call. The claims are made in task order
// (TaskOrder).
func (s *Core) ClaimOccurrences(ctx context.Context, reqs []backends.ClaimRequest) ([]backends.ClaimResult, error) {
	if err := s.standard(); err != nil {
		return nil, backends.ClaimsError(len(reqs), err)
	}
	return backends.ClaimBatch(reqs, func(batch []backends.ClaimRequest) ([]backends.ClaimResult, error) {
		return s.claimBatch(ctx, batch)
	})
}

// claimBatch makes checked, non-manual claims in one write transaction.
func (s *Core) claimBatch(ctx context.Context, reqs []backends.ClaimRequest) ([]backends.ClaimResult, error) {
	d := s.DB.Dialect()
	order := TaskOrder(len(reqs), func(i int) string { return reqs[i].Task })
	out := make([]backends.ClaimResult, len(reqs))
	err := s.DB.Write(ctx, func(c Conn) error {
		clear(out)
		for _, i := range order {
			if _, err := c.Exec(ctx, d.Text(qClaimSavepoint)); err != nil {
				return err
			}
			occ, err := s.claim(ctx, c, reqs[i])
			switch {
			case err == nil:
				out[i].Occurrence = occ
			case !backends.Refused(err):
				return err
			default:
				out[i].Err = backends.ClaimError(reqs[i], err)
				if _, err := c.Exec(ctx, d.Text(qClaimRollback)); err != nil {
					return err
				}
			}
			if _, err := c.Exec(ctx, d.Text(qClaimRelease)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, backends.ClaimsError(len(reqs), err)
	}
	return out, nil
}

// claim makes one checked claim in c's write transaction. A refusal is its
// error (backends.Refused); the caller rolls back what it wrote.
func (s *Core) claim(ctx context.Context, c Conn, req backends.ClaimRequest) (backends.Occurrence, error) {
	d := s.DB.Dialect()
	occ := backends.Occurrence{
		Task: req.Task, Attempt: req.Attempt, RunID: backends.NewCronRunID(),
		Owner: req.Owner, Host: req.Host, Manual: req.Manual,
	}
	sched := req.ScheduledAt.UnixMicro()
	var err error
	switch {
	case req.Attempt > 1:
		occ.Fencing, err = s.lockRetry(ctx, c, req)
	case req.Manual:
		occ.Fencing, sched, err = s.lockManual(ctx, c, req)
	default:
		occ.Fencing, err = s.lockScheduled(ctx, c, req)
	}
	if err != nil {
		return occ, err
	}
	if req.Exclusive && req.Skip == "" {
		// The task row is locked: every run of the task claimed before is
		// committed, and this read sees it.
		var busy bool
		if err := c.QueryRow(ctx, d.Text(qCronBusy), req.Task).Scan(&busy); err != nil {
			return occ, err
		}
		if busy {
			return occ, backends.ClaimRunLive.Err(req)
		}
	}
	status, lease, reason := backends.RunRunning, req.Lease.Microseconds(), sql.NullString{}
	if req.Skip != "" {
		status, lease, reason = backends.RunSkipped, 0, sql.NullString{String: storable(d, req.Skip), Valid: true}
	}
	var started, expires int64
	err = c.QueryRow(ctx, d.Text(qCronInsert), req.Task, sched, req.Attempt, occ.RunID, occ.Fencing, req.Manual,
		req.Owner, req.Host, status, lease, status != backends.RunRunning, reason).Scan(&started, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return occ, backends.ClaimTaken.Err(req)
	} else if err != nil {
		return occ, err
	}
	occ.ScheduledAt, occ.StartedAt, occ.ExpiresAt = FromMicros(sched), FromMicros(started), FromMicros(expires)
	if status != backends.RunRunning {
		if err := s.trim(ctx, c, req.Task); err != nil {
			return occ, err
		}
	}
	return occ, nil
}

// lockScheduled makes a scheduled claim's compare-and-swap, which locks
// the task row, and returns the fencing number.
func (s *Core) lockScheduled(ctx context.Context, c Conn, req backends.ClaimRequest) (int64, error) {
	var fencing int64
	err := c.QueryRow(ctx, s.DB.Dialect().Text(qCronAdvance), ToNullMicros(req.Next), req.Host, req.Task, req.ScheduledAt.UnixMicro()).Scan(&fencing)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, s.whyRefused(ctx, c, req, backends.ClaimNextMoved)
	}
	return fencing, err
}

// lockRetry locks the task row of a retry, bumping its fencing counter
// unless the task is paused, then checks that the previous attempt ended
// unsuccessfully.
func (s *Core) lockRetry(ctx context.Context, c Conn, req backends.ClaimRequest) (int64, error) {
	d := s.DB.Dialect()
	var fencing int64
	err := c.QueryRow(ctx, d.Text(qCronBumpRetry), req.Task).Scan(&fencing)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, s.whyRefused(ctx, c, req, backends.ClaimTaskAbsent)
	} else if err != nil {
		return 0, err
	}
	var retryable bool
	if err := c.QueryRow(ctx, d.Text(qCronRetryable), req.Task, req.ScheduledAt.UnixMicro(), req.Attempt-1).Scan(&retryable); err != nil {
		return 0, err
	}
	if !retryable {
		return 0, backends.ClaimPreviousNotFailed.Err(req)
	}
	return fencing, nil
}

// lockManual locks the task row of a manual run, bumping its fencing
// counter (a pause does not refuse an operator's run), and finds the first
// free time from the store's now on. It returns the fencing number and
// that time.
func (s *Core) lockManual(ctx context.Context, c Conn, req backends.ClaimRequest) (fencing, sched int64, err error) {
	d := s.DB.Dialect()
	err = c.QueryRow(ctx, d.Text(qCronBumpManual), req.Task).Scan(&fencing)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, 0, backends.ClaimTaskAbsent.Err(req)
	} else if err != nil {
		return 0, 0, err
	}
	if err := c.QueryRow(ctx, d.Text(qNow)).Scan(&sched); err != nil {
		return 0, 0, err
	}
	for range backends.ManualProbes {
		var taken bool
		if err := c.QueryRow(ctx, d.Text(qCronManualTaken), req.Task, sched, req.Task, sched).Scan(&taken); err != nil {
			return 0, 0, err
		}
		if !taken {
			return fencing, sched, nil
		}
		sched++
	}
	return 0, 0, backends.ClaimNoManualTime.Err(req)
}

// whyRefused tells an absent or a paused task from other, after a claim's
// UPDATE of the task row matched nothing.
func (s *Core) whyRefused(ctx context.Context, c Conn, req backends.ClaimRequest, other backends.ClaimRefusal) error {
	var paused bool
	err := c.QueryRow(ctx, s.DB.Dialect().Text(qCronTaskState), req.Task).Scan(&paused)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return backends.ClaimTaskAbsent.Err(req)
	case err != nil:
		return err
	case paused:
		return backends.ClaimPaused.Err(req)
	}
	return other.Err(req)
}
