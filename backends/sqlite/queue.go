package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/coordd/coordd/backends"
)

const (
	// qQueuePut creates the queue or updates its config and partition count.
	qQueuePut = `INSERT INTO queues (name, partitions, config) VALUES (?, ?, ?)
ON CONFLICT (name) DO UPDATE SET partitions = excluded.partitions, config = excluded.config`

	// qQueueAddPartitions creates the missing lock rows 0..?2-1.
	qQueueAddPartitions = `WITH RECURSIVE p(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM p WHERE i + 1 < ?2)
INSERT OR IGNORE INTO queue_partitions (queue, partition) SELECT ?1, i FROM p`

	// qQueueDropPartitions deletes lock rows of partitions that no longer exist.
	qQueueDropPartitions = `DELETE FROM queue_partitions WHERE queue = ?1 AND partition >= ?2`

	// qQueueMoveJobs moves jobs out of partitions that no longer exist into
	// partition % P. Ids (insert order) are kept, so no job is lost or
	// reordered within its new partition's id order.
	qQueueMoveJobs = `UPDATE queue_jobs SET partition = partition % ?2 WHERE queue = ?1 AND partition >= ?2`

	// qQueueJobCount counts a queue's jobs in any state.
	qQueueJobCount = `SELECT count(*) FROM queue_jobs WHERE queue = ?`

	// qQueueDeleteJobs, qQueueDeletePartitions and qQueueDelete remove a queue.
	qQueueDeleteJobs       = `DELETE FROM queue_jobs WHERE queue = ?`
	qQueueDeletePartitions = `DELETE FROM queue_partitions WHERE queue = ?`
	qQueueDelete           = `DELETE FROM queues WHERE name = ?`

	// qQueueObserve reads many queues (a JSON array of names) with the number
	// of lock rows of partitions that exist.
	qQueueObserve = `SELECT q.name, q.config,
  (SELECT count(*) FROM queue_partitions p WHERE p.queue = q.name AND p.partition < q.partitions)
FROM queues q WHERE q.name IN (SELECT value FROM json_each(?))`

	// qQueueObserveJobs counts jobs by queue, state and whether they are
	// stranded in a partition at or above the queue's partition count, with
	// the ready jobs that are delayed (available_at in the future) and the
	// enqueue time of the oldest ready job available now (NULL: none), and
	// the first delayed job's available_at (NULL: none).
	qQueueObserveJobs = `SELECT j.queue, j.state, j.partition >= q.partitions, count(*),
  count(CASE WHEN j.state = 'ready' AND j.available_at > ` + nowSQL + ` THEN 1 END),
  min(CASE WHEN j.state = 'ready' AND j.available_at <= ` + nowSQL + ` THEN j.enqueued_at END),
  min(CASE WHEN j.state = 'ready' AND j.available_at > ` + nowSQL + ` THEN j.available_at END)
FROM queue_jobs j JOIN queues q ON q.name = j.queue
WHERE j.queue IN (SELECT value FROM json_each(?))
GROUP BY j.queue, j.state, j.partition >= q.partitions`
)

// PutQueue creates or updates the queue, its partition lock rows, and moves
// jobs of removed partitions into the remaining ones, all in one
// transaction.
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
			return err
		}
		if _, err := c.exec(ctx, qQueueAddPartitions, cfg.Name, cfg.Partitions); err != nil {
			return err
		}
		if _, err := c.exec(ctx, qQueueDropPartitions, cfg.Name, cfg.Partitions); err != nil {
			return err
		}
		res, err := c.exec(ctx, qQueueMoveJobs, cfg.Name, cfg.Partitions)
		if err != nil {
			return err
		}
		moved, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("put queue %q: %w", cfg.Name, err)
	}
	return moved, nil
}

// DeleteQueue removes the queue, its partitions and (with force) its jobs.
// Absent is not an error.
func (s *Store) DeleteQueue(ctx context.Context, name string, force bool) error {
	var jobs int64
	err := s.write(ctx, func(c conn) error {
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

// ObserveQueues reads many queues in two statements in one snapshot.
func (s *Store) ObserveQueues(ctx context.Context, names []string) (map[string]*backends.QueueState, error) {
	out := make(map[string]*backends.QueueState, len(names))
	if len(names) == 0 {
		return out, nil
	}
	arg, err := namesJSON(names)
	if err != nil {
		return nil, fmt.Errorf("observe queues: %w", err)
	}
	_, err = s.read(ctx, func(c conn) error {
		rows, err := c.query(ctx, qQueueObserve, arg)
		if err != nil {
			return err
		}
		for rows.Next() {
			var st backends.QueueState
			var name, conf string
			if err := rows.Scan(&name, &conf, &st.PartitionsPresent); err != nil {
				rows.Close()
				return err
			}
			if err := json.Unmarshal([]byte(conf), &st.Config); err != nil {
				rows.Close()
				return fmt.Errorf("queue %q config: %w", name, err)
			}
			st.Config.Name = name
			out[name] = &st
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		rows, err = c.query(ctx, qQueueObserveJobs, arg)
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
			if t := fromNullMicros(next); !t.IsZero() && (st.NextDelayed.IsZero() || t.Before(st.NextDelayed)) {
				st.NextDelayed = t
			}
			if t := fromNullMicros(oldest); !t.IsZero() && (st.OldestReady.IsZero() || t.Before(st.OldestReady)) {
				st.OldestReady = t
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
	})
	if err != nil {
		return nil, fmt.Errorf("observe queues: %w", err)
	}
	return out, nil
}
