package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

var (
	// qJobDuplicate finds the oldest job of a queue with a key that is
	// ready, or (third argument true) running: the job a unique push
	// collides with. MySQL locks it, with the gap of the key's index range
	// when there is none, so that two pushes of one key serialise (or
	// deadlock, and the loser runs again and finds the winner's job); the
	// Standard flavor's push holds the queue's row exclusively instead
	// (Core.Push). Arguments: queue, key, whether running jobs count.
	qJobDuplicate = Query{
		SQL: "SELECT " + jobColumns + ` FROM {p}queue_jobs
WHERE queue = ? AND unique_key = ? AND (state = 'ready' OR (? <> 0 AND state = 'running'))
ORDER BY id LIMIT 1`,
		MySQL: "SELECT " + jobColumns + ` FROM {p}queue_jobs{index queue_jobs_unique}
WHERE queue = ? AND unique_key = ? AND (state = 'ready' OR (? <> 0 AND state = 'running'))
ORDER BY id LIMIT 1 FOR UPDATE`,
	}

	// qJobPush inserts a ready job available at now + the delay in
	// microseconds, and returns it (MySQL, which has no RETURNING: reads it
	// back by id, qJobByID). Arguments: queue, partition, payload, key,
	// priority, delay.
	qJobPush = Query{
		SQL: "INSERT INTO {p}queue_jobs (queue, `partition`, payload, unique_key, priority, attempt, state, available_at, enqueued_at, last_error)\n" +
			"VALUES (?, ?, ?, ?, ?, 0, 'ready', {now} + ?, {now}, '')\nRETURNING " + jobColumns,
		MySQL: "INSERT INTO {p}queue_jobs (queue, `partition`, payload, unique_key, priority, attempt, state, available_at, enqueued_at, last_error)\n" +
			"VALUES (?, ?, ?, ?, ?, 0, 'ready', {now} + ?, {now}, '')",
	}

	// qJobByID reads one job back (MySQL's push).
	qJobByID = Query{SQL: "SELECT " + jobColumns + " FROM {p}queue_jobs WHERE id = ?"}
)

// Push enqueues a job in one write transaction: the queue's config, the
// unique check, the insert. With unique set on the queue and a key, a job
// with the same key that is ready (or, under pending_or_running, running)
// is returned with ErrDuplicate instead.
//
// The queue's row is read in share mode, so that pushes run side by side
// and a PutQueue (which may change the partition count) waits for them;
// a push with a key reads it exclusively, so that two pushes that look for
// a duplicate of one key see each other's job (READ COMMITTED has no lock
// on a row that does not exist yet). SQLite's write transaction holds the
// whole file either way.
func (s *Core) Push(ctx context.Context, queue string, req backends.PushRequest) (backends.Job, error) {
	if err := backends.CheckPush(req); err != nil {
		return backends.Job{}, fmt.Errorf("push to queue %q: %w", queue, err)
	}
	d := s.DB.Dialect()
	lock := "{share}"
	if req.Key != "" {
		lock = "{lock}"
	}
	var job backends.Job
	err := s.DB.Write(ctx, func(c Conn) error {
		cfg, err := LoadQueueConfig(ctx, c, d, queue, lock)
		if err != nil {
			return err
		}
		job, err = PushJob(ctx, c, d, cfg, s.JobPartition(req.Key, cfg.Partitions), req)
		return err
	})
	if err != nil {
		if !errors.Is(err, backends.ErrDuplicate) {
			job = backends.Job{}
		}
		return job, fmt.Errorf("push to queue %q: %w", queue, err)
	}
	return job, nil
}

// PushJob pushes req to the queue of cfg, in partition, within the
// caller's transaction, which holds the queue's row as Push says: it
// checks the payload against max_payload and, with a key on a unique
// queue, looks for the duplicate (which it returns, with ErrDuplicate),
// then inserts the job.
func PushJob(ctx context.Context, c Conn, d *Dialect, cfg backends.QueueConfig, partition int, req backends.PushRequest) (backends.Job, error) {
	if err := backends.CheckPayload(len(req.Payload), cfg.MaxPayload); err != nil {
		return backends.Job{}, err
	}
	if req.Key != "" && (cfg.Unique == spec.UniquePending || cfg.Unique == spec.UniquePendingOrRunning) {
		j, err := ScanJob(c.QueryRow(ctx, d.Text(qJobDuplicate), cfg.Name, req.Key, cfg.Unique == spec.UniquePendingOrRunning), cfg.Name)
		switch {
		case err == nil:
			return j, fmt.Errorf("key %q is %s as job %d: %w", req.Key, cfg.Unique, j.ID, backends.ErrDuplicate)
		case !errors.Is(err, sql.ErrNoRows):
			return backends.Job{}, err
		}
	}
	payload := req.Payload
	if payload == nil {
		payload = []byte{} // the column is NOT NULL
	}
	args := []any{cfg.Name, partition, payload, NullKey(req.Key), req.Priority, NonNegMicros(req.Delay)}
	if d.Flavor != MySQL {
		return ScanJob(c.QueryRow(ctx, d.Text(qJobPush), args...), cfg.Name)
	}
	res, err := c.Exec(ctx, d.Text(qJobPush), args...)
	if err != nil {
		return backends.Job{}, err
	}
	id, err := res.LastInsertId()
	if err != nil {
		return backends.Job{}, err
	}
	return ScanJob(c.QueryRow(ctx, d.Text(qJobByID), id), cfg.Name)
}
