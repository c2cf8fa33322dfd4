package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/coordd/coordd/backends"
)

// The queue runtime. A job is a queue_jobs row in one of three states:
//
//	ready    waiting, claimable once available_at <= now
//	running  claimed by owner until expires_at (its visibility deadline)
//	dead     its attempts are used up; kept until requeued or purged
//
// The column unique_key holds the job's key (NULL when it has none)
// whether or not the queue is unique: the key also picks the partition
// (backends.KeyPartition), and the jobs of one key run one at a time in
// push order (Claim). The column priority holds the job's priority, set by
// its push and never changed after: a claim takes the highest first.
//
// Every time comparison is made in SQL against {now}. Every write that
// acts on a job someone holds is one conditional statement on the job's
// row (owner and state in its WHERE) whose row count says whether the
// caller still held it (ErrLost): correct at READ COMMITTED, where the
// statement waits for a concurrent writer of the row and then checks its
// WHERE again. A push reads the queue's row in share mode, so that it
// never runs against a partition count that a concurrent PutQueue is
// changing (PutQueue takes the row exclusively).
//
// These are the Standard flavor's; the MySQL store brings its own push and
// claim (one statement or one script a round trip, batched) and wakes its
// parked workers after the writes that make jobs claimable, and reuses the
// building blocks here.

// jobColumns are the columns ScanJob reads, in order.
const jobColumns = "id, `partition`, payload, unique_key, priority, attempt, enqueued_at, available_at, owner, expires_at, last_error"

// qQueueConfig reads a queue's partition count and config; the caller adds
// the lock it needs ("", "{share}" or "{lock}"). No row: the queue is
// absent.
const qQueueConfig = `SELECT partitions, config FROM {p}queues WHERE name = ?`

// LoadQueueConfig reads a queue's config with its stored partition count,
// the row read with lock ("", "{share}" or "{lock}"); ErrNotFound when
// the queue is absent.
func LoadQueueConfig(ctx context.Context, c Conn, d *Dialect, name, lock string) (backends.QueueConfig, error) {
	var partitions int
	var conf string
	err := c.QueryRow(ctx, d.Render(qQueueConfig+lock), name).Scan(&partitions, &conf)
	if errors.Is(err, sql.ErrNoRows) {
		return backends.QueueConfig{}, backends.ErrNotFound
	}
	if err != nil {
		return backends.QueueConfig{}, err
	}
	return ParseQueueConfig(name, conf, partitions)
}

// ParseQueueConfig reads a queue's stored config text; partitions, the
// stored count, is the one that counts.
func ParseQueueConfig(name, conf string, partitions int) (backends.QueueConfig, error) {
	var cfg backends.QueueConfig
	if err := json.Unmarshal([]byte(conf), &cfg); err != nil {
		return cfg, fmt.Errorf("queue config: %w", err)
	}
	cfg.Name, cfg.Partitions = name, partitions
	return cfg, nil
}

// loadLiveQueueConfig is LoadQueueConfig for a write on a job someone
// holds: a queue that is gone took its jobs with it (ErrLost).
func loadLiveQueueConfig(ctx context.Context, c Conn, d *Dialect, name string) (backends.QueueConfig, error) {
	cfg, err := LoadQueueConfig(ctx, c, d, name, "{share}")
	if errors.Is(err, backends.ErrNotFound) {
		return cfg, fmt.Errorf("queue is gone: %w", backends.ErrLost)
	}
	return cfg, err
}

// Scanner is *sql.Row or *sql.Rows.
type Scanner interface{ Scan(dest ...any) error }

// ScanJob reads a row of jobColumns.
func ScanJob(r Scanner, queue string) (backends.Job, error) {
	j := backends.Job{Queue: queue}
	var key, owner sql.NullString
	var enq, avail, exp int64
	if err := r.Scan(&j.ID, &j.Partition, &j.Payload, &key, &j.Priority, &j.Attempt, &enq, &avail, &owner, &exp, &j.LastError); err != nil {
		return j, err
	}
	j.Key, j.Owner = key.String, owner.String
	j.EnqueuedAt, j.AvailableAt = FromMicros(enq), FromMicros(avail)
	if owner.Valid {
		j.ExpiresAt = FromMicros(exp)
	}
	if j.Payload == nil {
		j.Payload = []byte{}
	}
	return j, nil
}

// scanJobs reads every row of jobColumns and closes rows.
func scanJobs(rows *sql.Rows, queue string, jobs []backends.Job) ([]backends.Job, error) {
	defer rows.Close()
	for rows.Next() {
		j, err := ScanJob(rows, queue)
		if err != nil {
			return jobs, err
		}
		jobs = append(jobs, j)
	}
	return jobs, rows.Err()
}

// JobPartition is the partition a pushed job goes to: its key's
// (backends.KeyPartition), or, without a key, the next of a round robin
// of this store. Partitions only spread the stored jobs: no claim order
// depends on them.
func (s *Core) JobPartition(key string, partitions int) int {
	if key != "" {
		return backends.KeyPartition(key, partitions)
	}
	return int(s.jobSeq.Add(1) % uint64(max(partitions, 1)))
}

// NullKey is a job's key as the unique_key column holds it: NULL for none.
func NullKey(key string) sql.NullString {
	return sql.NullString{String: key, Valid: key != ""}
}

// NonNegMicros converts a delay or backoff to microseconds, negative as 0.
func NonNegMicros(d time.Duration) int64 { return max(d, 0).Microseconds() }

// Owned returns the error of a write on a job its owner holds: ErrLost
// when it matched no row (the owner no longer holds the job).
func Owned(res sql.Result, err error) error {
	n, err := Affected(res, err)
	if err != nil {
		return err
	}
	if n == 0 {
		return backends.ErrLost
	}
	return nil
}

// JobError wraps err of a write on job j with what it was.
func JobError(verb string, j backends.Job, err error) error {
	return fmt.Errorf("%s job %d of queue %q as %q: %w", verb, j.ID, j.Queue, j.Owner, err)
}
