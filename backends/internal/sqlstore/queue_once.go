package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/coordd/coordd/backends"
)

// The queue_once table: the job each once key pushed (Queues.PushOnce).
var (
	// qOnceRead reads the job a once key pushed, locking the row where
	// the store locks rows. Arguments: queue, once key.
	qOnceRead = Query{SQL: `SELECT job_id FROM {p}queue_once WHERE queue = ? AND once_key = ?{lock}`}
	// qOnceRecord records a once key's job. A racing push of the same key
	// fails on the primary key and runs again (ErrRetry): it then finds
	// this row. Arguments: queue, once key, job id.
	qOnceRecord = Query{SQL: `INSERT INTO {p}queue_once (queue, once_key, job_id, at) VALUES (?, ?, ?, {now})`}
	// qOncePrune deletes the records older than ? µs (queue_once_at).
	qOncePrune = Query{SQL: `DELETE FROM {p}queue_once WHERE at < {now} - ?`}
)

// PushOnce pushes req unless once was pushed to queue before, in one write
// transaction with Push's rules (the queue's row in share mode, or locked
// for a key): the record read, the push, the record written.
func (s *Core) PushOnce(ctx context.Context, queue, once string, req backends.PushRequest) (backends.Job, bool, error) {
	if err := backends.CheckPushOnce(once); err != nil {
		return backends.Job{}, false, fmt.Errorf("push to queue %q: %w", queue, err)
	}
	if err := backends.CheckPush(req); err != nil {
		return backends.Job{}, false, fmt.Errorf("push to queue %q: %w", queue, err)
	}
	d := s.DB.Dialect()
	lock := "{share}"
	if req.Key != "" {
		lock = "{lock}"
	}
	var job backends.Job
	var pushed bool
	err := s.DB.Write(ctx, func(c Conn) error {
		job, pushed = backends.Job{}, false
		cfg, err := LoadQueueConfig(ctx, c, d, queue, lock)
		if err != nil {
			return err
		}
		var id int64
		switch err := c.QueryRow(ctx, d.Text(qOnceRead), queue, once).Scan(&id); {
		case err == nil:
			job = backends.Job{ID: id, Queue: queue}
			return nil
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		job, err = PushJob(ctx, c, d, cfg, s.JobPartition(req.Key, cfg.Partitions), req)
		switch {
		case errors.Is(err, backends.ErrDuplicate):
			// The pending job of the key stands for this push.
		case err != nil:
			return err
		default:
			pushed = true
		}
		if _, err := c.Exec(ctx, d.Text(qOnceRecord), queue, once, job.ID); err != nil {
			if d.IsDuplicate(err) {
				return ErrRetry
			}
			return err
		}
		return nil
	})
	if err != nil {
		return backends.Job{}, false, fmt.Errorf("push to queue %q once as %q: %w", queue, once, err)
	}
	return job, pushed, nil
}

// PrunePushOnce deletes the once records older than olderThan.
func (s *Core) PrunePushOnce(ctx context.Context, olderThan time.Duration) (int, error) {
	n, err := Affected(s.DB.WriteOne(ctx, s.DB.Dialect().Text(qOncePrune), NonNegMicros(olderThan)))
	if err != nil {
		return 0, fmt.Errorf("prune push-once records: %w", err)
	}
	return int(n), nil
}
