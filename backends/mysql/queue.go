package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/coordd/coordd/backends"
)

var _ backends.QueueAdmin = (*Store)(nil)

// The queue tables (see migrations/0001_init.sql): queues holds each
// queue's config and partition count, queue_partitions one lock row per
// partition, queue_jobs every job. `partition` is a reserved word on both
// servers, so it is always quoted.
const (
	// qQueuePut creates the queue or updates its config and partition count.
	qQueuePut = "INSERT INTO `{p}queues` (name, partitions, config) VALUES (?, ?, ?)\n" +
		"ON DUPLICATE KEY UPDATE partitions = VALUES(partitions), config = VALUES(config)"

	// qQueueLock reads and locks the queue row: PutQueue and DeleteQueue
	// take it (PutQueue through its upsert) so they serialise with each
	// other and with Push and Claim, which read it LOCK IN SHARE MODE.
	qQueueLock = "SELECT partitions FROM `{p}queues` WHERE name = ? FOR UPDATE"

	// qQueueAddPartitionsHead and qQueueAddPartitionRow create the missing
	// lock rows 0..P-1: the head, then one (queue, partition) row each;
	// existing rows are kept as they are (claimed_at included).
	qQueueAddPartitionsHead = "INSERT INTO `{p}queue_partitions` (queue, `partition`) VALUES "
	qQueueAddPartitionRow   = "(?, ?)"
	qQueueAddPartitionsTail = " ON DUPLICATE KEY UPDATE `partition` = `partition`"

	// qQueueDropPartitions deletes lock rows of partitions that no longer
	// exist (queue, partition count).
	qQueueDropPartitions = "DELETE FROM `{p}queue_partitions` WHERE queue = ? AND `partition` >= ?"

	// qQueueMoveJobs moves jobs out of partitions that no longer exist into
	// partition % P (arguments: P, queue, P). Ids (insert order) are kept,
	// so no job is lost or reordered within its new partition's id order.
	// With clientFoundRows the rows matched are the rows moved.
	qQueueMoveJobs = "UPDATE `{p}queue_jobs` SET `partition` = `partition` % ? WHERE queue = ? AND `partition` >= ?"

	// qQueueJobCount counts a queue's jobs in any state.
	qQueueJobCount = "SELECT count(*) FROM `{p}queue_jobs` WHERE queue = ?"

	// qQueueDeleteJobs, qQueueDeletePartitions and qQueueDelete remove a queue.
	qQueueDeleteJobs       = "DELETE FROM `{p}queue_jobs` WHERE queue = ?"
	qQueueDeletePartitions = "DELETE FROM `{p}queue_partitions` WHERE queue = ?"
	qQueueDelete           = "DELETE FROM `{p}queues` WHERE name = ?"

	// qQueueObserveHead reads many queues with the number of lock rows of
	// partitions that exist; the names follow, bound, in IN (...), then
	// qQueueObserveTail.
	qQueueObserveHead = "SELECT q.name, q.partitions, q.config,\n" +
		"  (SELECT count(*) FROM `{p}queue_partitions` p WHERE p.queue = q.name AND p.`partition` < q.partitions)\n" +
		"FROM `{p}queues` q WHERE q.name IN ("
	qQueueObserveTail = ")"

	// qQueueObserveJobsHead counts jobs by queue, state and whether they are
	// stranded in a partition at or above the queue's partition count, with
	// the ready jobs that are delayed (available_at in the future) and the
	// enqueue time of the oldest ready job available now (NULL: none) and
	// the first delayed job's available_at (NULL: none), all against one
	// instant; the names follow in IN (...), then qQueueObserveJobsTail.
	qQueueObserveJobsHead = "SELECT j.queue, j.state, j.`partition` >= q.partitions, count(*),\n" +
		"  count(CASE WHEN j.state = 'ready' AND j.available_at > " + nowSQL + " THEN 1 END),\n" +
		"  min(CASE WHEN j.state = 'ready' AND j.available_at <= " + nowSQL + " THEN j.enqueued_at END),\n" +
		"  min(CASE WHEN j.state = 'ready' AND j.available_at > " + nowSQL + " THEN j.available_at END)\n" +
		"FROM `{p}queue_jobs` j JOIN `{p}queues` q ON q.name = j.queue\n" +
		"WHERE j.queue IN ("
	qQueueObserveJobsTail = ") GROUP BY 1, 2, 3"
)

// PutQueue creates or updates the queue, its partition lock rows, and moves
// jobs of removed partitions into the remaining ones, all in one
// transaction; then it wakes parked workers for the jobs it moved.
func (s *Store) PutQueue(ctx context.Context, cfg backends.QueueConfig) (int64, error) {
	if cfg.Name == "" {
		return 0, errors.New("put queue: empty name")
	}
	if cfg.Partitions < 1 {
		return 0, fmt.Errorf("put queue %q: partitions %d: must be at least 1", cfg.Name, cfg.Partitions)
	}
	conf, err := json.Marshal(cfg)
	if err != nil {
		return 0, fmt.Errorf("put queue %q: %w", cfg.Name, err)
	}
	var moved int64
	err = s.write(ctx, func(c conn) error {
		if _, err := c.exec(ctx, qQueuePut, cfg.Name, cfg.Partitions, string(conf)); err != nil {
			if isDup(err) {
				return errRetry
			}
			return err
		}
		parts := make([]int, cfg.Partitions)
		for i := range parts {
			parts[i] = i
		}
		for _, ch := range chunks(parts, inChunk) {
			args := make([]any, 0, 2*len(ch))
			for _, p := range ch {
				args = append(args, cfg.Name, p)
			}
			q := qQueueAddPartitionsHead + tuples(qQueueAddPartitionRow, len(ch)) + qQueueAddPartitionsTail
			if _, err := c.exec(ctx, q, args...); err != nil {
				return err
			}
		}
		if _, err := c.exec(ctx, qQueueDropPartitions, cfg.Name, cfg.Partitions); err != nil {
			return err
		}
		moved, err = affected(c.exec(ctx, qQueueMoveJobs, cfg.Partitions, cfg.Name, cfg.Partitions))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("put queue %q: %w", cfg.Name, err)
	}
	if moved > 0 {
		// Jobs of removed partitions were not claimable (claim partition
		// takes only partitions below the count); now they are.
		s.wakeQueue(ctx, cfg.Name, int(min(moved, maxWake)))
	}
	return moved, nil
}

// DeleteQueue removes the queue, its partitions and (with force) its jobs.
// Absent is not an error.
func (s *Store) DeleteQueue(ctx context.Context, name string, force bool) error {
	var jobs int64
	err := s.write(ctx, func(c conn) error {
		var partitions int
		err := c.row(ctx, qQueueLock, name).Scan(&partitions)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if err := c.row(ctx, qQueueJobCount, name).Scan(&jobs); err != nil {
			return err
		}
		if jobs > 0 && !force {
			return nil
		}
		for _, q := range []string{qQueueDeleteJobs, qQueueDeletePartitions, qQueueDelete} {
			if _, err := c.exec(ctx, q, name); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil && jobs > 0 && !force {
		err = fmt.Errorf("%d jobs: %w", jobs, backends.ErrHasJobs)
	}
	if err != nil {
		return fmt.Errorf("delete queue %q: %w", name, err)
	}
	return nil
}

// ObserveQueues reads many queues in two statements per chunk of names, in
// one snapshot.
func (s *Store) ObserveQueues(ctx context.Context, names []string) (map[string]*backends.QueueState, error) {
	out := make(map[string]*backends.QueueState, len(names))
	if len(names) == 0 {
		return out, nil
	}
	_, err := s.read(ctx, func(c conn) error {
		for _, ch := range chunks(names, inChunk) {
			if err := observeQueueChunk(ctx, c, ch, out); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("observe queues: %w", err)
	}
	return out, nil
}

// observeQueueChunk reads the configs and job counts of one chunk of names.
func observeQueueChunk(ctx context.Context, c conn, names []string, out map[string]*backends.QueueState) error {
	in := placeholders(len(names))
	rows, err := c.query(ctx, qQueueObserveHead+in+qQueueObserveTail, anys(names)...)
	if err != nil {
		return err
	}
	for rows.Next() {
		var st backends.QueueState
		var name, conf string
		var partitions int
		if err := rows.Scan(&name, &partitions, &conf, &st.PartitionsPresent); err != nil {
			rows.Close()
			return err
		}
		if err := json.Unmarshal([]byte(conf), &st.Config); err != nil {
			rows.Close()
			return fmt.Errorf("queue %q config: %w", name, err)
		}
		st.Config.Name, st.Config.Partitions = name, partitions
		out[name] = &st
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	rows, err = c.query(ctx, qQueueObserveJobsHead+in+qQueueObserveJobsTail, anys(names)...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var name, state string
		var stranded bool
		var n, delayed int64
		var oldest, next sql.NullInt64
		if err := rows.Scan(&name, &state, &stranded, &n, &delayed, &oldest, &next); err != nil {
			return err
		}
		st := out[name]
		if st == nil {
			continue
		}
		st.Delayed += delayed
		if next.Valid {
			if t := fromMicros(next.Int64); st.NextDelayed.IsZero() || t.Before(st.NextDelayed) {
				st.NextDelayed = t
			}
		}
		if oldest.Valid {
			if t := fromMicros(oldest.Int64); st.OldestReady.IsZero() || t.Before(st.OldestReady) {
				st.OldestReady = t
			}
		}
		switch state {
		case "ready":
			st.Ready += n
		case "running":
			st.InFlight += n
		case "dead":
			st.Dead += n
		}
		if stranded {
			st.Stranded += n
		}
	}
	return rows.Err()
}
