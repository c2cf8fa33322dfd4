package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"

	"github.com/coordd/coordd/backends"
)

// The dead set: jobs whose attempts are used up, in id order.
var (
	// qJobDead lists dead jobs, oldest (lowest id) first, up to a limit.
	// Arguments: queue, limit.
	qJobDead = Query{SQL: "SELECT " + jobColumns + " FROM {p}queue_jobs WHERE queue = ? AND state = 'dead' ORDER BY id LIMIT ?"}

	// qJobRequeueDead makes every dead job ready now with attempts reset;
	// last_error is kept as a record of why it died, and the priority as
	// it was pushed. Argument: queue.
	qJobRequeueDead = Query{SQL: `UPDATE {p}queue_jobs{index queue_jobs_state} SET state = 'ready', attempt = 0, owner = NULL, expires_at = 0,
  available_at = {now} WHERE queue = ? AND state = 'dead'`}

	// qJobPurgeDead deletes every dead job. Argument: queue.
	qJobPurgeDead = Query{SQL: `DELETE FROM {p}queue_jobs WHERE queue = ? AND state = 'dead'`}

	// One dead job: the statements of RequeueDead and PurgeDead narrowed
	// to its id. Arguments: queue, id.
	qJobRequeueDeadJob = Query{SQL: qJobRequeueDead.SQL + ` AND id = ?`}
	qJobPurgeDeadJob   = Query{SQL: qJobPurgeDead.SQL + ` AND id = ?`}
)

// Dead jobs read for the dashboard (backends.Queues): the payload
// and the last error cut by the server at a number of bytes, the
// payload's whole length beside it, so that a big payload never crosses
// the network. The payload is binary, so SUBSTR counts bytes; the last
// error is text, whose SUBSTR counts characters, at least a byte each, and
// scanPartialJob cuts what comes back to the bytes. A page takes its ids
// from an index alone and reads only the rows of the page.
const partialJobColumns = "j.id, j.`partition`, SUBSTR(j.payload, 1, ?), LENGTH(j.payload),\n" +
	"  j.unique_key, j.priority, j.attempt, j.enqueued_at, j.available_at, SUBSTR(j.last_error, 1, ?)"

var (
	// qJobDeadPage: cut, cut, queue, limit, offset.
	qJobDeadPage = Query{SQL: "SELECT " + partialJobColumns + ` FROM {p}queue_jobs j
JOIN (SELECT id FROM {p}queue_jobs WHERE queue = ? AND state = 'dead' ORDER BY id LIMIT ? OFFSET ?) d ON d.id = j.id
ORDER BY j.id`}

	// qJobDeadOne: cut, cut, id, queue.
	qJobDeadOne = Query{SQL: "SELECT " + partialJobColumns + ` FROM {p}queue_jobs j WHERE j.id = ? AND j.queue = ? AND j.state = 'dead'`}

	// qJobErrors reads one job's attempt errors: id, queue.
	qJobErrors = Query{SQL: `SELECT COALESCE(attempt_errors, '') FROM {p}queue_jobs WHERE id = ? AND queue = ?`}
)

// readAttemptErrors fills j.Errors in the read that found j.
func readAttemptErrors(ctx context.Context, c Conn, d *Dialect, j *backends.PartialJob) error {
	var hist string
	if err := c.QueryRow(ctx, d.Text(qJobErrors), j.ID, j.Queue).Scan(&hist); err != nil {
		return err
	}
	j.Errors = backends.ParseAttemptErrors(hist)
	return nil
}

// Dead lists up to limit dead jobs (limit <= 0: all), oldest first.
func (s *Core) Dead(ctx context.Context, queue string, limit int) ([]backends.Job, error) {
	lim := int64(limit)
	if limit <= 0 {
		lim = math.MaxInt64
	}
	d := s.DB.Dialect()
	jobs := []backends.Job{}
	_, err := s.DB.Read(ctx, func(c Conn) error {
		rows, err := c.Query(ctx, d.Text(qJobDead), queue, lim)
		if err != nil {
			return err
		}
		jobs, err = scanJobs(rows, queue, jobs[:0])
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list dead jobs of queue %q: %w", queue, err)
	}
	return jobs, nil
}

// RequeueDead makes every dead job of queue ready now with attempts reset,
// and returns how many.
func (s *Core) RequeueDead(ctx context.Context, queue string) (int64, error) {
	n, err := Affected(s.DB.WriteOne(ctx, s.DB.Dialect().Text(qJobRequeueDead), queue))
	if err != nil {
		return 0, fmt.Errorf("requeue dead jobs of queue %q: %w", queue, err)
	}
	return n, nil
}

// PurgeDead deletes every dead job of queue and returns how many.
func (s *Core) PurgeDead(ctx context.Context, queue string) (int64, error) {
	n, err := Affected(s.DB.WriteOne(ctx, s.DB.Dialect().Text(qJobPurgeDead), queue))
	if err != nil {
		return 0, fmt.Errorf("purge dead jobs of queue %q: %w", queue, err)
	}
	return n, nil
}

// RequeueDeadJob makes dead job id of queue ready again (backends.Queues).
func (s *Core) RequeueDeadJob(ctx context.Context, queue string, id int64) error {
	return s.deadJob(ctx, "requeue", qJobRequeueDeadJob, queue, id)
}

// PurgeDeadJob deletes dead job id of queue (backends.Queues).
func (s *Core) PurgeDeadJob(ctx context.Context, queue string, id int64) error {
	return s.deadJob(ctx, "purge", qJobPurgeDeadJob, queue, id)
}

func (s *Core) deadJob(ctx context.Context, verb string, q Query, queue string, id int64) error {
	n, err := Affected(s.DB.WriteOne(ctx, s.DB.Dialect().Text(q), queue, id))
	return backends.DeadJobOutcome(verb, queue, id, n, err)
}

// DeadPage lists up to limit dead jobs of queue after the first offset,
// oldest first, payload and last error cut at cut bytes
// (backends.Queues).
func (s *Core) DeadPage(ctx context.Context, queue string, offset, limit, cut int) ([]backends.PartialJob, error) {
	cut = max(cut, 0)
	d := s.DB.Dialect()
	jobs := []backends.PartialJob{}
	_, err := s.DB.Read(ctx, func(c Conn) error {
		jobs = jobs[:0]
		rows, err := c.Query(ctx, d.Text(qJobDeadPage), cut, cut, queue, max(limit, 0), max(offset, 0))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			j, err := scanPartialJob(rows, queue, cut)
			if err != nil {
				return err
			}
			jobs = append(jobs, j)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("list dead jobs of queue %q: %w", queue, err)
	}
	return jobs, nil
}

// DeadJob reads dead job id of queue, payload and last error cut at cut
// bytes (backends.Queues).
func (s *Core) DeadJob(ctx context.Context, queue string, id int64, cut int) (backends.PartialJob, error) {
	cut = max(cut, 0)
	d := s.DB.Dialect()
	var j backends.PartialJob
	found, err := s.DB.Read(ctx, func(c Conn) error {
		var err error
		j, err = scanPartialJob(c.QueryRow(ctx, d.Text(qJobDeadOne), cut, cut, id, queue), queue, cut)
		if err != nil {
			return err
		}
		return readAttemptErrors(ctx, c, d, &j)
	})
	switch {
	case errors.Is(err, sql.ErrNoRows) || (err == nil && !found):
		return backends.PartialJob{}, fmt.Errorf("queue %q has no dead job %d: %w", queue, id, backends.ErrNotFound)
	case err != nil:
		return backends.PartialJob{}, fmt.Errorf("read dead job %d of queue %q: %w", id, queue, err)
	}
	return j, nil
}

// scanPartialJob reads a row of partialJobColumns, the last error cut at
// cut bytes.
func scanPartialJob(r Scanner, queue string, cut int) (backends.PartialJob, error) {
	j := backends.PartialJob{Job: backends.Job{Queue: queue}}
	var key sql.NullString
	var enq, avail int64
	var lastErr []byte
	if err := r.Scan(&j.ID, &j.Partition, &j.Payload, &j.PayloadSize, &key, &j.Priority, &j.Attempt, &enq, &avail, &lastErr); err != nil {
		return j, err
	}
	j.Key, j.LastError = key.String, string(lastErr[:min(len(lastErr), cut)])
	j.EnqueuedAt, j.AvailableAt = FromMicros(enq), FromMicros(avail)
	if j.Payload == nil {
		j.Payload = []byte{}
	}
	return j, nil
}
