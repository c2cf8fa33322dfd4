package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/coordd/coordd/backends"
)

// What the owner of a claimed job does with it. Each statement acts only
// while the owner holds the job (owner and state in its WHERE); a row
// count of 0 is ErrLost.
var (
	// qJobAck deletes a job. Arguments: id, queue, owner.
	qJobAck = Query{SQL: `DELETE FROM {p}queue_jobs WHERE id = ? AND {held}`}

	// qJobRetry returns a job to the queue, available after the backoff in
	// microseconds, or moves it to the dead set once it used max_attempts
	// attempts (<= 0: unlimited), with available_at the time of death,
	// recording the reason and the attempt errors. Arguments:
	// max_attempts four times, backoff, reason, attempt errors, id, queue,
	// owner.
	qJobRetry = Query{SQL: `UPDATE {p}queue_jobs
SET state = CASE WHEN ? > 0 AND attempt >= ? THEN 'dead' ELSE 'ready' END,
  owner = NULL, expires_at = 0,
  available_at = CASE WHEN ? > 0 AND attempt >= ? THEN {now} ELSE {now} + ? END, last_error = ?,
  attempt_errors = ?
WHERE id = ? AND {held}`}

	// qJobAttemptErrors reads a held job's attempt errors and the store's
	// clock, for the retry to add one (no row: the owner lost the job).
	// Arguments: id, queue, owner.
	qJobAttemptErrors = Query{SQL: `SELECT COALESCE(attempt_errors, ''), {now} FROM {p}queue_jobs
WHERE id = ? AND {held}`}

	// qJobExtend renews a job's visibility deadline to now + the
	// visibility timeout in microseconds, only while it has not expired,
	// and returns it (MySQL, which has no RETURNING: reads it back,
	// qJobExpiry). Arguments: visibility, id, queue, owner.
	qJobExtend = Query{
		SQL: `UPDATE {p}queue_jobs SET expires_at = {now} + ?
WHERE id = ? AND {held} AND expires_at > {now}
RETURNING expires_at`,
		MySQL: `UPDATE {p}queue_jobs SET expires_at = {now} + ?
WHERE id = ? AND {held} AND expires_at > {now}`,
	}

	// qJobExpiry reads back the renewed deadline in the same transaction
	// (MySQL). Arguments: id, owner.
	qJobExpiry = Query{SQL: `SELECT expires_at FROM {p}queue_jobs WHERE id = ? AND owner = ?`}

	// qJobReturn puts a job back as ready, taking back the attempt its
	// claim counted. available_at, the priority and the id are unchanged,
	// so the job keeps its place (in (priority, id) claim order, and in
	// (priority, available_at, id) order for MySQL's skip_locked claims);
	// last_error is kept. Arguments: id, queue, owner.
	qJobReturn = Query{SQL: `UPDATE {p}queue_jobs
SET state = 'ready', owner = NULL, expires_at = 0, attempt = CASE WHEN attempt > 0 THEN attempt - 1 ELSE 0 END
WHERE id = ? AND {held}`}
)

// HeldJobQueries are the statements that act on one claimed job while its
// owner holds it ({held}), for the stores' tests of their query plans.
var HeldJobQueries = map[string]Query{
	"ack": qJobAck, "retry": qJobRetry, "attempt errors": qJobAttemptErrors, "extend": qJobExtend, "return": qJobReturn,
}

// Ack deletes a finished job while j.Owner still holds it (ErrLost).
func (s *Core) Ack(ctx context.Context, j backends.Job) error {
	if err := s.AckJob(ctx, j); err != nil {
		return JobError("ack", j, err)
	}
	return nil
}

// AckJob is Ack's statement, its error bare.
func (s *Core) AckJob(ctx context.Context, j backends.Job) error {
	return Owned(s.DB.WriteOne(ctx, s.DB.Dialect().Text(qJobAck), j.ID, j.Queue, j.Owner))
}

// Retry returns a job j.Owner still holds (ErrLost) to the queue after
// retry_backoff, or to the dead set when it used max_attempts attempts.
func (s *Core) Retry(ctx context.Context, j backends.Job, reason string) error {
	_, err := s.RetryJob(ctx, j, reason)
	return err
}

// RetryJob is Retry, and reports whether the job went back to the queue
// rather than to the dead set. It reads the job's attempt errors first and
// writes them back with this one added: a read of the row the owner holds,
// which no other writer changes while it holds it (the update checks the
// owner again).
func (s *Core) RetryJob(ctx context.Context, j backends.Job, reason string) (ready bool, err error) {
	d := s.DB.Dialect()
	err = s.DB.Write(ctx, func(c Conn) error {
		cfg, err := loadLiveQueueConfig(ctx, c, d, j.Queue)
		if err != nil {
			return err
		}
		ready = cfg.MaxAttempts <= 0 || j.Attempt < cfg.MaxAttempts
		var hist string
		var now int64
		err = c.QueryRow(ctx, d.Text(qJobAttemptErrors), j.ID, j.Queue, j.Owner).Scan(&hist, &now)
		if errors.Is(err, sql.ErrNoRows) {
			return backends.ErrLost
		}
		if err != nil {
			return err
		}
		hist = backends.AppendAttemptError(hist, backends.AttemptError{Attempt: j.Attempt, At: FromMicros(now), Worker: backends.OwnerWorker(j.Owner), Error: reason})
		return Owned(c.Exec(ctx, d.Text(qJobRetry), cfg.MaxAttempts, cfg.MaxAttempts, cfg.MaxAttempts, cfg.MaxAttempts, NonNegMicros(cfg.RetryBackoff), reason, hist, j.ID, j.Queue, j.Owner))
	})
	if err != nil {
		return false, JobError("retry", j, err)
	}
	return ready, nil
}

// ExtendJob renews j.Owner's visibility lease to now + visibility_timeout,
// only while it holds the job and the lease has not expired (ErrLost).
func (s *Core) ExtendJob(ctx context.Context, j backends.Job) (time.Time, error) {
	d := s.DB.Dialect()
	var exp int64
	err := s.DB.Write(ctx, func(c Conn) error {
		cfg, err := loadLiveQueueConfig(ctx, c, d, j.Queue)
		if err != nil {
			return err
		}
		vis, err := LeaseMicros(cfg.VisibilityTimeout)
		if err != nil {
			return fmt.Errorf("visibility_timeout: %w", err)
		}
		if d.Flavor != MySQL {
			err = c.QueryRow(ctx, d.Text(qJobExtend), vis, j.ID, j.Queue, j.Owner).Scan(&exp)
			if errors.Is(err, sql.ErrNoRows) {
				return backends.ErrLost
			}
			return err
		}
		if err := Owned(c.Exec(ctx, d.Text(qJobExtend), vis, j.ID, j.Queue, j.Owner)); err != nil {
			return err
		}
		return c.QueryRow(ctx, d.Text(qJobExpiry), j.ID, j.Owner).Scan(&exp)
	})
	if err != nil {
		return time.Time{}, JobError("extend", j, err)
	}
	return FromMicros(exp), nil
}

// ReturnJob puts a job j.Owner still holds (ErrLost) back as ready now,
// with its attempt not counted.
func (s *Core) ReturnJob(ctx context.Context, j backends.Job) error {
	if err := Owned(s.DB.WriteOne(ctx, s.DB.Dialect().Text(qJobReturn), j.ID, j.Queue, j.Owner)); err != nil {
		return JobError("return", j, err)
	}
	return nil
}
