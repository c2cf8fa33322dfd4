package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

var _ backends.Queues = (*Store)(nil)

// The queue runtime. A job is a queue_jobs row in one of three states:
//
//	ready    waiting, claimable once available_at <= now
//	running  claimed by owner until expires_at (its visibility deadline)
//	dead     its attempts are used up; kept until requeued or purged
//
// The column unique_key holds the job's key (NULL when it has none) whether
// or not the queue is unique: the key also picks the partition.
//
// Every write runs in an IMMEDIATE transaction and every time comparison is
// made in SQL against nowSQL.

// jobColumns are the columns scanJob reads, in order.
const jobColumns = `id, partition, payload, unique_key, attempt, enqueued_at, available_at, owner, expires_at, last_error`

const (
	// qQueueConfig reads a queue's partition count and config. No row: the
	// queue is absent.
	qQueueConfig = `SELECT partitions, config FROM queues WHERE name = ?`

	// qJobDuplicate finds the oldest job of a queue with key ?2 that is
	// ready, or (?3 true) running: the job a unique push collides with.
	qJobDuplicate = `SELECT ` + jobColumns + ` FROM queue_jobs
WHERE queue = ?1 AND unique_key = ?2 AND (state = 'ready' OR (?3 AND state = 'running'))
ORDER BY id LIMIT 1`

	// qJobPush inserts a ready job available at now + ?5 microseconds. A
	// partition ?2 below 0 means "spread": the job goes to the partition of
	// its own id (the next AUTOINCREMENT value) modulo the ?6 partitions,
	// which is round robin under the write lock.
	qJobPush = `INSERT INTO queue_jobs (queue, partition, payload, unique_key, attempt, state, available_at, enqueued_at)
VALUES (?1,
  CASE WHEN ?2 >= 0 THEN ?2
    ELSE (COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'queue_jobs'), 0) + 1) % ?6 END,
  ?3, ?4, 0, 'ready', ` + nowSQL + ` + ?5, ` + nowSQL + `)
RETURNING ` + jobColumns

	// qJobExpire returns running jobs whose visibility deadline passed to
	// the queue: ready again (the attempt they used stays counted), or dead
	// once they used ?2 attempts (?2 <= 0: unlimited).
	qJobExpire = `UPDATE queue_jobs
SET state = CASE WHEN ?2 > 0 AND attempt >= ?2 THEN 'dead' ELSE 'ready' END,
  owner = NULL, expires_at = 0, last_error = 'visibility timeout'
WHERE queue = ?1 AND state = 'running' AND expires_at <= ` + nowSQL

	// jobKeyFree is true when job j (a queue_jobs row aliased j) may start
	// as far as its key goes: it has no key, or no job of its key is
	// running and no older one is ready (a delayed one included), so that
	// the jobs of one key run one at a time in push order. Two point
	// lookups in queue_jobs_key.
	jobKeyFree = `(j.unique_key IS NULL OR (
  NOT EXISTS (SELECT 1 FROM queue_jobs k INDEXED BY queue_jobs_key
    WHERE k.queue = j.queue AND k.unique_key = j.unique_key AND k.state = 'running')
  AND NOT EXISTS (SELECT 1 FROM queue_jobs k INDEXED BY queue_jobs_key
    WHERE k.queue = j.queue AND k.unique_key = j.unique_key AND k.state = 'ready' AND k.id < j.id)))`

	// jobClaimable is true when job j is ready, available now and free as
	// far as its key goes.
	jobClaimable = `j.state = 'ready' AND j.available_at <= ` + nowSQL + ` AND ` + jobKeyFree

	// qJobClaim leases up to ?4 claimable jobs of queue ?1, whatever their
	// partition, in id (push) order, to owner ?2 until now + ?3
	// microseconds, counting an attempt. The sub-select reads the jobs as
	// they were before the update, so it takes at most one job of a key
	// (the later ones have an older one ready). RETURNING does not promise
	// an order: the caller sorts by id.
	qJobClaim = `UPDATE queue_jobs
SET state = 'running', owner = ?2, attempt = attempt + 1, expires_at = ` + nowSQL + ` + ?3
WHERE id IN (SELECT j.id FROM queue_jobs j INDEXED BY queue_jobs_ready
  WHERE j.queue = ?1 AND ` + jobClaimable + `
  ORDER BY j.id LIMIT ?4)
RETURNING ` + jobColumns

	// qJobAck deletes a job, only while owner holds it.
	qJobAck = `DELETE FROM queue_jobs WHERE id = ?1 AND queue = ?2 AND owner = ?3 AND state = 'running'`

	// qJobRetry returns a job owner holds to the queue, available after
	// ?5 microseconds, or moves it to the dead set once it used ?4
	// attempts (?4 <= 0: unlimited), recording the reason.
	qJobRetry = `UPDATE queue_jobs
SET state = CASE WHEN ?4 > 0 AND attempt >= ?4 THEN 'dead' ELSE 'ready' END,
  owner = NULL, expires_at = 0, available_at = ` + nowSQL + ` + ?5, last_error = ?6
WHERE id = ?1 AND queue = ?2 AND owner = ?3 AND state = 'running'`

	// qJobExtend renews a job's visibility deadline to now + ?4
	// microseconds, only for its owner and only while it has not expired.
	qJobExtend = `UPDATE queue_jobs SET expires_at = ` + nowSQL + ` + ?4
WHERE id = ?1 AND queue = ?2 AND owner = ?3 AND state = 'running' AND expires_at > ` + nowSQL + `
RETURNING expires_at`

	// qJobMayClaim is WaitQueue's poll: true when a job is claimable now or
	// a running job's visibility expired (Claim makes it ready again). No
	// row: the queue is absent.
	qJobMayClaim = `SELECT EXISTS (SELECT 1 FROM queue_jobs j INDEXED BY queue_jobs_ready
  WHERE j.queue = q.name AND ` + jobClaimable + `)
  OR EXISTS (SELECT 1 FROM queue_jobs
  WHERE queue = q.name AND state = 'running' AND expires_at <= ` + nowSQL + `)
FROM queues q WHERE q.name = ?1`

	// qJobDead lists dead jobs, oldest (lowest id) first; ?2 < 0: all.
	qJobDead = `SELECT ` + jobColumns + ` FROM queue_jobs WHERE queue = ?1 AND state = 'dead' ORDER BY id LIMIT ?2`

	// qJobRequeueDead makes every dead job ready now with attempts reset;
	// last_error is kept as a record of why it died.
	qJobRequeueDead = `UPDATE queue_jobs SET state = 'ready', attempt = 0, owner = NULL, expires_at = 0,
  available_at = ` + nowSQL + ` WHERE queue = ?1 AND state = 'dead'`

	// qJobPurgeDead deletes every dead job.
	qJobPurgeDead = `DELETE FROM queue_jobs WHERE queue = ?1 AND state = 'dead'`
)

// Poll backoff of WaitQueue: SQLite cannot push a wake-up to another
// process, so WaitQueue polls qJobMayClaim, doubling the interval from
// queueWaitMin up to queueWaitMax.
const (
	queueWaitMin = 5 * time.Millisecond
	queueWaitMax = 100 * time.Millisecond
)

// loadQueueConfig reads a queue's config with its stored partition count;
// ErrNotFound when the queue is absent.
func loadQueueConfig(ctx context.Context, c conn, name string) (backends.QueueConfig, error) {
	var cfg backends.QueueConfig
	var partitions int
	var conf string
	err := c.QueryRow(ctx, qQueueConfig, name).Scan(&partitions, &conf)
	if errors.Is(err, sql.ErrNoRows) {
		return cfg, backends.ErrNotFound
	}
	if err != nil {
		return cfg, err
	}
	if err := json.Unmarshal([]byte(conf), &cfg); err != nil {
		return cfg, fmt.Errorf("queue config: %w", err)
	}
	cfg.Name, cfg.Partitions = name, partitions
	return cfg, nil
}

// jobScanner is *sql.Row or *sql.Rows.
type jobScanner interface{ Scan(dest ...any) error }

// scanJob reads jobColumns.
func scanJob(r jobScanner, queue string) (backends.Job, error) {
	j := backends.Job{Queue: queue}
	var key, owner sql.NullString
	var enq, avail, exp int64
	if err := r.Scan(&j.ID, &j.Partition, &j.Payload, &key, &j.Attempt, &enq, &avail, &owner, &exp, &j.LastError); err != nil {
		return j, err
	}
	j.Key, j.Owner = key.String, owner.String
	j.EnqueuedAt, j.AvailableAt = fromMicros(enq), fromMicros(avail)
	if owner.Valid {
		j.ExpiresAt = fromMicros(exp)
	}
	if j.Payload == nil {
		j.Payload = []byte{}
	}
	return j, nil
}

// keyPartition is the partition of a key: FNV-1a 32 of the key modulo the
// partition count, stable across processes and versions.
func keyPartition(key string, partitions int) int {
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % uint32(max(partitions, 1)))
}

// nonNegMicros converts a delay or backoff to microseconds, negative as 0.
func nonNegMicros(d time.Duration) int64 { return max(d, 0).Microseconds() }

// Push enqueues a job. With unique set on the queue and a key, a job with
// the same key that is ready (or, under pending_or_running, running) is
// returned with ErrDuplicate instead.
func (s *Store) Push(ctx context.Context, queue string, req backends.PushRequest) (backends.Job, error) {
	if err := backends.CheckPush(req); err != nil {
		return backends.Job{}, fmt.Errorf("push to queue %q: %w", queue, err)
	}
	var job backends.Job
	err := s.write(ctx, func(c conn) error {
		cfg, err := loadQueueConfig(ctx, c, queue)
		if err != nil {
			return err
		}
		if err := backends.CheckPayload(len(req.Payload), cfg.MaxPayload); err != nil {
			return err
		}
		var key sql.NullString
		partition := -1
		if req.Key != "" {
			key = sql.NullString{String: req.Key, Valid: true}
			partition = keyPartition(req.Key, cfg.Partitions)
			if cfg.Unique == spec.UniquePending || cfg.Unique == spec.UniquePendingOrRunning {
				j, err := scanJob(c.QueryRow(ctx, qJobDuplicate, queue, req.Key, cfg.Unique == spec.UniquePendingOrRunning), queue)
				switch {
				case err == nil:
					job = j
					return fmt.Errorf("key %q is %s as job %d: %w", req.Key, cfg.Unique, j.ID, backends.ErrDuplicate)
				case !errors.Is(err, sql.ErrNoRows):
					return err
				}
			}
		}
		payload := req.Payload
		if payload == nil {
			payload = []byte{} // the column is NOT NULL
		}
		job, err = scanJob(c.QueryRow(ctx, qJobPush, queue, partition, payload, key, nonNegMicros(req.Delay), cfg.Partitions), queue)
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

// Claim first returns running jobs whose visibility expired to the queue
// (or the dead set), then leases up to max claimable jobs of the queue, in
// push order, all in one transaction. SQLite has one writer at a time, so
// claims never run at once and the partitions play no part in them: each
// claim takes the oldest claimable jobs of the whole queue.
func (s *Store) Claim(ctx context.Context, queue, owner string, max int) ([]backends.Job, error) {
	if owner == "" {
		return nil, fmt.Errorf("claim from queue %q: empty owner", queue)
	}
	if max < 1 {
		return nil, fmt.Errorf("claim from queue %q: max %d: must be at least 1", queue, max)
	}
	var jobs []backends.Job
	err := s.write(ctx, func(c conn) error {
		jobs = jobs[:0]
		cfg, err := loadQueueConfig(ctx, c, queue)
		if err != nil {
			return err
		}
		vis, err := leaseMicros(cfg.VisibilityTimeout)
		if err != nil {
			return fmt.Errorf("visibility_timeout: %w", err)
		}
		if _, err := c.Exec(ctx, qJobExpire, queue, cfg.MaxAttempts); err != nil {
			return err
		}
		rows, err := c.Query(ctx, qJobClaim, queue, owner, vis, max)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			j, err := scanJob(rows, queue)
			if err != nil {
				return err
			}
			jobs = append(jobs, j)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("claim from queue %q as %q: %w", queue, owner, err)
	}
	slices.SortFunc(jobs, func(a, b backends.Job) int { return cmp.Compare(a.ID, b.ID) })
	if jobs == nil {
		jobs = []backends.Job{}
	}
	return jobs, nil
}

// jobAffected returns ErrLost when res changed no row.
func jobAffected(res sql.Result) error {
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return backends.ErrLost
	}
	return nil
}

// Ack deletes a finished job while j.Owner still holds it (ErrLost).
func (s *Store) Ack(ctx context.Context, j backends.Job) error {
	err := s.write(ctx, func(c conn) error {
		res, err := c.Exec(ctx, qJobAck, j.ID, j.Queue, j.Owner)
		if err != nil {
			return err
		}
		return jobAffected(res)
	})
	if err != nil {
		return fmt.Errorf("ack job %d of queue %q as %q: %w", j.ID, j.Queue, j.Owner, err)
	}
	return nil
}

// Retry returns a job j.Owner still holds (ErrLost) to the queue after
// retry_backoff, or to the dead set when it used max_attempts attempts.
func (s *Store) Retry(ctx context.Context, j backends.Job, reason string) error {
	err := s.write(ctx, func(c conn) error {
		cfg, err := loadQueueConfig(ctx, c, j.Queue)
		if errors.Is(err, backends.ErrNotFound) {
			return fmt.Errorf("queue is gone: %w", backends.ErrLost)
		}
		if err != nil {
			return err
		}
		res, err := c.Exec(ctx, qJobRetry, j.ID, j.Queue, j.Owner, cfg.MaxAttempts, nonNegMicros(cfg.RetryBackoff), reason)
		if err != nil {
			return err
		}
		return jobAffected(res)
	})
	if err != nil {
		return fmt.Errorf("retry job %d of queue %q as %q: %w", j.ID, j.Queue, j.Owner, err)
	}
	return nil
}

// ExtendJob renews j.Owner's visibility lease to now + visibility_timeout,
// only while it holds the job and the lease has not expired (ErrLost).
func (s *Store) ExtendJob(ctx context.Context, j backends.Job) (time.Time, error) {
	var exp int64
	err := s.write(ctx, func(c conn) error {
		cfg, err := loadQueueConfig(ctx, c, j.Queue)
		if errors.Is(err, backends.ErrNotFound) {
			return fmt.Errorf("queue is gone: %w", backends.ErrLost)
		}
		if err != nil {
			return err
		}
		vis, err := leaseMicros(cfg.VisibilityTimeout)
		if err != nil {
			return fmt.Errorf("visibility_timeout: %w", err)
		}
		err = c.QueryRow(ctx, qJobExtend, j.ID, j.Queue, j.Owner, vis).Scan(&exp)
		if errors.Is(err, sql.ErrNoRows) {
			return backends.ErrLost
		}
		return err
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("extend job %d of queue %q as %q: %w", j.ID, j.Queue, j.Owner, err)
	}
	return fromMicros(exp), nil
}

// WaitQueue polls, with a backoff from 5 ms to 100 ms, until a job may be
// claimable (one is ready and available, or a running job's visibility
// expired), maxWait elapsed or ctx ended. It returns nil in the first two
// cases and ctx's error in the last. An absent queue (or a store never
// migrated) returns nil at once, so that Claim reports it.
func (s *Store) WaitQueue(ctx context.Context, queue string, maxWait time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	waitErr := func(err error) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("wait queue %q: %w", queue, err)
	}
	ok, err := s.pool.HasSchema(ctx)
	if err != nil {
		return waitErr(err)
	}
	if !ok {
		return nil
	}
	deadline := time.Now().Add(maxWait)
	timer := time.NewTimer(queueWaitMax)
	timer.Stop()
	defer timer.Stop()
	for backoff := queueWaitMin; ; backoff = min(2*backoff, queueWaitMax) {
		var may bool
		err := s.pool.On(nil).QueryRow(ctx, qJobMayClaim, queue).Scan(&may)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return nil
		case err != nil:
			return waitErr(err)
		case may:
			return nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil
		}
		timer.Reset(min(backoff, left))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
		}
	}
}

// Dead lists up to limit dead jobs (limit <= 0: all), oldest first.
func (s *Store) Dead(ctx context.Context, queue string, limit int) ([]backends.Job, error) {
	if limit <= 0 {
		limit = -1
	}
	jobs := []backends.Job{}
	_, err := s.read(ctx, func(c conn) error {
		rows, err := c.Query(ctx, qJobDead, queue, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			j, err := scanJob(rows, queue)
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

// RequeueDead makes every dead job of queue ready now with attempts reset,
// and returns how many.
func (s *Store) RequeueDead(ctx context.Context, queue string) (int64, error) {
	n, err := s.queueWriteCount(ctx, qJobRequeueDead, queue)
	if err != nil {
		return 0, fmt.Errorf("requeue dead jobs of queue %q: %w", queue, err)
	}
	return n, nil
}

// PurgeDead deletes every dead job of queue and returns how many.
func (s *Store) PurgeDead(ctx context.Context, queue string) (int64, error) {
	n, err := s.queueWriteCount(ctx, qJobPurgeDead, queue)
	if err != nil {
		return 0, fmt.Errorf("purge dead jobs of queue %q: %w", queue, err)
	}
	return n, nil
}

// queueWriteCount runs one statement in a write transaction and returns the
// number of rows it changed.
func (s *Store) queueWriteCount(ctx context.Context, query string, args ...any) (int64, error) {
	var n int64
	err := s.write(ctx, func(c conn) error {
		res, err := c.Exec(ctx, query, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}
