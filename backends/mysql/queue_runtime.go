package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

var _ backends.Queues = (*Store)(nil)

// The queue runtime, a port of the SQLite store's. A job is a queue_jobs
// row in one of three states:
//
//	ready    waiting, claimable once available_at <= now
//	running  claimed by owner until expires_at (its visibility deadline)
//	dead     its attempts are used up; kept until requeued or purged
//
// The column unique_key holds the job's key (NULL when it has none) whether
// or not the queue is unique: the key also picks the partition.
//
// Push and Claim read the queue row LOCK IN SHARE MODE, so they never run
// against a partition count that a concurrent PutQueue is changing (PutQueue
// takes the row exclusively). Claim serialises per partition: it locks the
// partition's lock row with FOR UPDATE SKIP LOCKED (a point lookup on the
// primary key, so exactly one row), so claimers of one queue spread over its
// partitions instead of queueing behind each other, and then reads the
// partition's claimable jobs with a locking (current) read. A unique push
// locks the key's index range with a locking read before inserting, so two
// pushes of one key serialise (or deadlock, and the store's retry runs the
// loser again, which then finds the winner's job). Every time comparison is
// made in SQL against nowSQL.

// jobColumns are the columns scanJob reads, in order.
const jobColumns = "id, `partition`, payload, unique_key, attempt, enqueued_at, available_at, owner, expires_at, last_error"

const (
	// qQueueConfig reads a queue's partition count and config under a
	// shared lock. No row: the queue is absent.
	qQueueConfig = "SELECT partitions, config FROM `{p}queues` WHERE name = ? LOCK IN SHARE MODE"

	// qJobDuplicate finds (and locks, with the key's index range) the oldest
	// job of a queue with a key that is ready, or (third argument true)
	// running: the job a unique push collides with.
	qJobDuplicate = "SELECT " + jobColumns + " FROM `{p}queue_jobs`\n" +
		"WHERE queue = ? AND unique_key = ? AND (state = 'ready' OR (? AND state = 'running'))\n" +
		"ORDER BY id LIMIT 1 FOR UPDATE"

	// qJobPush inserts a ready job available at now + the delay in
	// microseconds (arguments: queue, partition, payload, key, delay).
	qJobPush = "INSERT INTO `{p}queue_jobs` (queue, `partition`, payload, unique_key, attempt, state, available_at, enqueued_at, last_error)\n" +
		"VALUES (?, ?, ?, ?, 0, 'ready', " + nowSQL + " + ?, " + nowSQL + ", '')"

	// qJobSetPartition places a keyless job: the partition of its own id
	// modulo the partition count, which is round robin.
	qJobSetPartition = "UPDATE `{p}queue_jobs` SET `partition` = ? WHERE id = ?"

	// qJobByID reads one job back.
	qJobByID = "SELECT " + jobColumns + " FROM `{p}queue_jobs` WHERE id = ?"

	// qJobAnyExpired is the cheap, non-locking check Claim makes before the
	// visibility sweep, so that the sweep's locking UPDATE runs only when a
	// lease expired.
	qJobAnyExpired = "SELECT EXISTS (SELECT 1 FROM `{p}queue_jobs`\n" +
		"  WHERE queue = ? AND state = 'running' AND expires_at <= " + nowSQL + ")"

	// qJobExpire returns running jobs whose visibility deadline passed to
	// the queue: ready again (the attempt they used stays counted), or dead
	// once they used max_attempts attempts (<= 0: unlimited). Arguments:
	// max_attempts, max_attempts, queue.
	qJobExpire = "UPDATE `{p}queue_jobs`\n" +
		"SET state = CASE WHEN ? > 0 AND attempt >= ? THEN 'dead' ELSE 'ready' END,\n" +
		"  owner = NULL, expires_at = 0, last_error = 'visibility timeout'\n" +
		"WHERE queue = ? AND state = 'running' AND expires_at <= " + nowSQL

	// qJobCandidates lists the partitions that have a job claimable now,
	// least recently claimed first (ties: the lowest number), so that no
	// partition starves. It is a plain snapshot read; Claim then locks them
	// one at a time. Arguments: queue, partition count.
	qJobCandidates = "SELECT p.`partition` FROM `{p}queue_partitions` p\n" +
		"WHERE p.queue = ? AND p.`partition` < ? AND EXISTS (SELECT 1 FROM `{p}queue_jobs` j\n" +
		"  WHERE j.queue = p.queue AND j.`partition` = p.`partition` AND j.state = 'ready' AND j.available_at <= " + nowSQL + ")\n" +
		"ORDER BY p.claimed_at, p.`partition`"

	// qJobLockPartition locks one partition's lock row unless another
	// claimer holds it (no row: skip to the next partition).
	qJobLockPartition = "SELECT `partition` FROM `{p}queue_partitions` WHERE queue = ? AND `partition` = ? FOR UPDATE SKIP LOCKED"

	// qJobClaimable lists (and locks) up to a number of jobs of one
	// partition that are claimable now, in id (insert) order. Arguments:
	// queue, partition, limit.
	qJobClaimable = "SELECT id FROM `{p}queue_jobs`\n" +
		"WHERE queue = ? AND `partition` = ? AND state = 'ready' AND available_at <= " + nowSQL + "\n" +
		"ORDER BY id LIMIT ? FOR UPDATE"

	// qJobPartitionClaimed records when Claim last served a partition.
	qJobPartitionClaimed = "UPDATE `{p}queue_partitions` SET claimed_at = " + nowSQL + " WHERE queue = ? AND `partition` = ?"

	// qJobClaimHead leases the listed jobs (ids bound in IN (...)) to an
	// owner until now + the visibility timeout in microseconds, counting an
	// attempt. Arguments: owner, visibility, queue, then the ids.
	qJobClaimHead = "UPDATE `{p}queue_jobs`\n" +
		"SET state = 'running', owner = ?, attempt = attempt + 1, expires_at = " + nowSQL + " + ?\n" +
		"WHERE queue = ? AND state = 'ready' AND id IN ("

	// qJobClaimedHead reads the claimed jobs back in id order (MariaDB has
	// no UPDATE ... RETURNING); arguments: queue, owner, then the ids.
	qJobClaimedHead = "SELECT " + jobColumns + " FROM `{p}queue_jobs` WHERE queue = ? AND owner = ? AND id IN ("
	qJobClaimedTail = ") ORDER BY id"

	// qJobAck deletes a job, only while owner holds it.
	qJobAck = "DELETE FROM `{p}queue_jobs` WHERE id = ? AND queue = ? AND owner = ? AND state = 'running'"

	// qJobRetry returns a job owner holds to the queue, available after the
	// backoff in microseconds, or moves it to the dead set once it used
	// max_attempts attempts (<= 0: unlimited), recording the reason.
	// Arguments: max_attempts, max_attempts, backoff, reason, id, queue,
	// owner.
	qJobRetry = "UPDATE `{p}queue_jobs`\n" +
		"SET state = CASE WHEN ? > 0 AND attempt >= ? THEN 'dead' ELSE 'ready' END,\n" +
		"  owner = NULL, expires_at = 0, available_at = " + nowSQL + " + ?, last_error = ?\n" +
		"WHERE id = ? AND queue = ? AND owner = ? AND state = 'running'"

	// qJobExtend renews a job's visibility deadline to now + the visibility
	// timeout in microseconds, only for its owner and only while it has not
	// expired. Arguments: visibility, id, queue, owner.
	qJobExtend = "UPDATE `{p}queue_jobs` SET expires_at = " + nowSQL + " + ?\n" +
		"WHERE id = ? AND queue = ? AND owner = ? AND state = 'running' AND expires_at > " + nowSQL

	// qJobExpiry reads back the renewed deadline in the same transaction.
	qJobExpiry = "SELECT expires_at FROM `{p}queue_jobs` WHERE id = ? AND owner = ?"

	// qJobMayClaim is WaitQueue's poll: true when a job is claimable now or
	// a running job's visibility expired (Claim makes it ready again). No
	// row: the queue is absent.
	qJobMayClaim = "SELECT EXISTS (SELECT 1 FROM `{p}queue_jobs`\n" +
		"  WHERE queue = q.name AND state = 'ready' AND available_at <= " + nowSQL + ")\n" +
		"  OR EXISTS (SELECT 1 FROM `{p}queue_jobs`\n" +
		"  WHERE queue = q.name AND state = 'running' AND expires_at <= " + nowSQL + ")\n" +
		"FROM `{p}queues` q WHERE q.name = ?"

	// qJobDead lists dead jobs, oldest (lowest id) first, up to a limit.
	qJobDead = "SELECT " + jobColumns + " FROM `{p}queue_jobs` WHERE queue = ? AND state = 'dead' ORDER BY id LIMIT ?"

	// qJobRequeueDead makes every dead job ready now with attempts reset;
	// last_error is kept as a record of why it died.
	qJobRequeueDead = "UPDATE `{p}queue_jobs` SET state = 'ready', attempt = 0, owner = NULL, expires_at = 0,\n" +
		"  available_at = " + nowSQL + " WHERE queue = ? AND state = 'dead'"

	// qJobPurgeDead deletes every dead job.
	qJobPurgeDead = "DELETE FROM `{p}queue_jobs` WHERE queue = ? AND state = 'dead'"
)

// Poll backoff of WaitQueue: until the push wake-up arrives, WaitQueue
// polls qJobMayClaim, doubling the interval from queueWaitMin up to
// queueWaitMax.
const (
	queueWaitMin = 5 * time.Millisecond
	queueWaitMax = 100 * time.Millisecond
)

// loadQueueConfig reads a queue's config with its stored partition count
// under a shared lock on the queue row; ErrNotFound when the queue is
// absent.
func loadQueueConfig(ctx context.Context, c conn, name string) (backends.QueueConfig, error) {
	var cfg backends.QueueConfig
	var partitions int
	var conf string
	err := c.row(ctx, qQueueConfig, name).Scan(&partitions, &conf)
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
// partition count, stable across processes, versions and backends (the
// SQLite store uses the same function).
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
	var job backends.Job
	err := s.write(ctx, func(c conn) error {
		job = backends.Job{}
		cfg, err := loadQueueConfig(ctx, c, queue)
		if err != nil {
			return err
		}
		if cfg.MaxPayload > 0 && int64(len(req.Payload)) > cfg.MaxPayload {
			return fmt.Errorf("payload of %d bytes exceeds max_payload %d: %w", len(req.Payload), cfg.MaxPayload, backends.ErrPayloadTooLarge)
		}
		var key sql.NullString
		partition := 0
		if req.Key != "" {
			key = sql.NullString{String: req.Key, Valid: true}
			partition = keyPartition(req.Key, cfg.Partitions)
			if cfg.Unique == spec.UniquePending || cfg.Unique == spec.UniquePendingOrRunning {
				j, err := scanJob(c.row(ctx, qJobDuplicate, queue, req.Key, cfg.Unique == spec.UniquePendingOrRunning), queue)
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
		res, err := c.exec(ctx, qJobPush, queue, partition, payload, key, nonNegMicros(req.Delay))
		if err != nil {
			return err
		}
		id, err := res.LastInsertId()
		if err != nil {
			return err
		}
		if req.Key == "" && cfg.Partitions > 1 {
			if _, err := c.exec(ctx, qJobSetPartition, int(id%int64(cfg.Partitions)), id); err != nil {
				return err
			}
		}
		job, err = scanJob(c.row(ctx, qJobByID, id), queue)
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
// (or the dead set), then leases up to max claimable jobs of the least
// recently claimed partition that has one and that no other claimer holds,
// in insert order, all in one transaction.
func (s *Store) Claim(ctx context.Context, queue, owner string, max int) ([]backends.Job, error) {
	if owner == "" {
		return nil, fmt.Errorf("claim from queue %q: empty owner", queue)
	}
	if max < 1 {
		return nil, fmt.Errorf("claim from queue %q: max %d: must be at least 1", queue, max)
	}
	var jobs []backends.Job
	err := s.write(ctx, func(c conn) error {
		jobs = nil
		cfg, err := loadQueueConfig(ctx, c, queue)
		if err != nil {
			return err
		}
		vis, err := leaseMicros(cfg.VisibilityTimeout)
		if err != nil {
			return fmt.Errorf("visibility_timeout: %w", err)
		}
		var expired bool
		if err := c.row(ctx, qJobAnyExpired, queue).Scan(&expired); err != nil {
			return err
		}
		if expired {
			if _, err := c.exec(ctx, qJobExpire, cfg.MaxAttempts, cfg.MaxAttempts, queue); err != nil {
				return err
			}
		}
		candidates, err := claimCandidates(ctx, c, queue, cfg.Partitions)
		if err != nil {
			return err
		}
		for _, partition := range candidates {
			var got int
			err := c.row(ctx, qJobLockPartition, queue, partition).Scan(&got)
			if errors.Is(err, sql.ErrNoRows) {
				continue // another claimer holds it
			}
			if err != nil {
				return err
			}
			ids, err := claimableIDs(ctx, c, queue, partition, max)
			if err != nil {
				return err
			}
			if len(ids) == 0 {
				continue // claimed since the snapshot
			}
			if _, err := c.exec(ctx, qJobPartitionClaimed, queue, partition); err != nil {
				return err
			}
			in := placeholders(len(ids))
			if _, err := c.exec(ctx, qJobClaimHead+in+")", anys(ids, owner, vis, queue)...); err != nil {
				return err
			}
			rows, err := c.query(ctx, qJobClaimedHead+in+qJobClaimedTail, anys(ids, queue, owner)...)
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
		}
		return nil // nothing claimable
	})
	if err != nil {
		return nil, fmt.Errorf("claim from queue %q as %q: %w", queue, owner, err)
	}
	if jobs == nil {
		jobs = []backends.Job{}
	}
	return jobs, nil
}

// claimCandidates lists the partitions with a job claimable now, least
// recently claimed first.
func claimCandidates(ctx context.Context, c conn, queue string, partitions int) ([]int, error) {
	rows, err := c.query(ctx, qJobCandidates, queue, partitions)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var p int
		if err := rows.Scan(&p); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// claimableIDs locks and lists up to max claimable jobs of a partition.
func claimableIDs(ctx context.Context, c conn, queue string, partition, max int) ([]int64, error) {
	rows, err := c.query(ctx, qJobClaimable, queue, partition, max)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// jobAffected returns ErrLost when res matched no row.
func jobAffected(res sql.Result, err error) error {
	n, err := affected(res, err)
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
		return jobAffected(c.exec(ctx, qJobAck, j.ID, j.Queue, j.Owner))
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
		return jobAffected(c.exec(ctx, qJobRetry, cfg.MaxAttempts, cfg.MaxAttempts, nonNegMicros(cfg.RetryBackoff), reason, j.ID, j.Queue, j.Owner))
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
		if err := jobAffected(c.exec(ctx, qJobExtend, vis, j.ID, j.Queue, j.Owner)); err != nil {
			return err
		}
		return c.row(ctx, qJobExpiry, j.ID, j.Owner).Scan(&exp)
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
	ok, err := s.hasSchema(ctx)
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
		err := s.on(nil).row(ctx, qJobMayClaim, queue).Scan(&may)
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
	lim := int64(limit)
	if limit <= 0 {
		lim = math.MaxInt64
	}
	jobs := []backends.Job{}
	_, err := s.read(ctx, func(c conn) error {
		jobs = jobs[:0]
		rows, err := c.query(ctx, qJobDead, queue, lim)
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
// number of rows it matched.
func (s *Store) queueWriteCount(ctx context.Context, query string, args ...any) (int64, error) {
	var n int64
	err := s.write(ctx, func(c conn) error {
		var err error
		n, err = affected(c.exec(ctx, query, args...))
		return err
	})
	return n, err
}
