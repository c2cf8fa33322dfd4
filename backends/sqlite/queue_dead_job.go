package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/coordd/coordd/backends"
)

// One dead job: the statements of RequeueDead and PurgeDead narrowed to
// ?2, the job's id.
const (
	qJobRequeueDeadJob = qJobRequeueDead + ` AND id = ?2`
	qJobPurgeDeadJob   = qJobPurgeDead + ` AND id = ?2`
)

// RequeueDeadJob makes dead job id of queue ready again (backends.DeadJobs).
func (s *Store) RequeueDeadJob(ctx context.Context, queue string, id int64) error {
	return s.deadJob(ctx, "requeue", qJobRequeueDeadJob, queue, id)
}

// PurgeDeadJob deletes dead job id of queue (backends.DeadJobs).
func (s *Store) PurgeDeadJob(ctx context.Context, queue string, id int64) error {
	return s.deadJob(ctx, "purge", qJobPurgeDeadJob, queue, id)
}

func (s *Store) deadJob(ctx context.Context, verb, query, queue string, id int64) error {
	n, err := s.queueWriteCount(ctx, query, queue, id)
	return backends.DeadJobOutcome(verb, queue, id, n, err)
}

// Dead jobs read for the dashboard (backends.DeadJobReader): the payload
// and the last error cut by SQLite at ?2 bytes (SUBSTR of the BLOB), the
// payload's whole length beside it. A page takes its ids from the index
// queue_jobs_ready alone and reads only the rows of the page.
const (
	partialJobColumns = `j.id, j.partition, SUBSTR(CAST(j.payload AS BLOB), 1, ?2), LENGTH(CAST(j.payload AS BLOB)),
  j.unique_key, j.attempt, j.enqueued_at, j.available_at, SUBSTR(CAST(j.last_error AS BLOB), 1, ?2)`

	// qJobDeadPage: ?1 queue, ?2 cut, ?3 limit, ?4 offset.
	qJobDeadPage = `SELECT ` + partialJobColumns + ` FROM queue_jobs j
JOIN (SELECT id FROM queue_jobs WHERE queue = ?1 AND state = 'dead' ORDER BY id LIMIT ?3 OFFSET ?4) d ON d.id = j.id
ORDER BY j.id`

	// qJobDeadOne: ?1 queue, ?2 cut, ?3 id.
	qJobDeadOne = `SELECT ` + partialJobColumns + ` FROM queue_jobs j WHERE j.id = ?3 AND j.queue = ?1 AND j.state = 'dead'`
)

// DeadPage lists up to limit dead jobs of queue after the first offset,
// oldest first, payload and last error cut at cut bytes
// (backends.DeadJobReader).
func (s *Store) DeadPage(ctx context.Context, queue string, offset, limit, cut int) ([]backends.PartialJob, error) {
	jobs := []backends.PartialJob{}
	_, err := s.read(ctx, func(c conn) error {
		rows, err := c.Query(ctx, qJobDeadPage, queue, max(cut, 0), max(limit, 0), max(offset, 0))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			j, err := scanPartialJob(rows, queue)
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

// DeadJob reads dead job id of queue, payload and last error cut at cut bytes
// (backends.DeadJobReader).
func (s *Store) DeadJob(ctx context.Context, queue string, id int64, cut int) (backends.PartialJob, error) {
	var j backends.PartialJob
	found, err := s.read(ctx, func(c conn) error {
		var err error
		j, err = scanPartialJob(c.QueryRow(ctx, qJobDeadOne, queue, max(cut, 0), id), queue)
		return err
	})
	switch {
	case errors.Is(err, sql.ErrNoRows) || (err == nil && !found):
		return backends.PartialJob{}, fmt.Errorf("queue %q has no dead job %d: %w", queue, id, backends.ErrNotFound)
	case err != nil:
		return backends.PartialJob{}, fmt.Errorf("read dead job %d of queue %q: %w", id, queue, err)
	}
	return j, nil
}

// scanPartialJob reads a row of partialJobColumns.
func scanPartialJob(r jobScanner, queue string) (backends.PartialJob, error) {
	j := backends.PartialJob{Job: backends.Job{Queue: queue}}
	var key sql.NullString
	var enq, avail int64
	var lastErr []byte
	if err := r.Scan(&j.ID, &j.Partition, &j.Payload, &j.PayloadSize, &key, &j.Attempt, &enq, &avail, &lastErr); err != nil {
		return j, err
	}
	j.Key, j.LastError = key.String, string(lastErr)
	j.EnqueuedAt, j.AvailableAt = fromMicros(enq), fromMicros(avail)
	if j.Payload == nil {
		j.Payload = []byte{}
	}
	return j, nil
}
