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

// The queue tables: queues holds each queue's config and partition count,
// queue_partitions one lock row per partition, queue_jobs every job.
// `partition` is reserved on MySQL, so it is always quoted.
var (
	// qQueuePut creates the queue or updates its config and partition
	// count.
	qQueuePut = Query{
		SQL: `INSERT INTO {p}queues (name, partitions, config) VALUES (?, ?, ?)
ON CONFLICT (name) DO UPDATE SET partitions = excluded.partitions, config = excluded.config`,
		MySQL: `INSERT INTO {p}queues (name, partitions, config) VALUES (?, ?, ?)
ON DUPLICATE KEY UPDATE partitions = VALUES(partitions), config = VALUES(config)`,
	}

	// qQueueLock reads and locks the queue row: DeleteQueue takes it
	// (PutQueue through its upsert) so that they serialise with each other
	// and with pushes and claims, which read it in share mode.
	qQueueLock = Query{SQL: `SELECT partitions FROM {p}queues WHERE name = ?{lock}`}

	// qQueueAddPartitionsHead, qQueueAddPartitionRow (one (queue,
	// partition) row each, joined with commas) and qQueueAddPartitionsTail
	// create the missing lock rows 0..P-1; existing rows are kept as they
	// are.
	qQueueAddPartitionsHead = Query{SQL: "INSERT INTO {p}queue_partitions (queue, `partition`) VALUES "}
	qQueueAddPartitionRow   = `(?, ?)`
	qQueueAddPartitionsTail = Query{SQL: ` ON CONFLICT DO NOTHING`, MySQL: " ON DUPLICATE KEY UPDATE `partition` = `partition`"}

	// qQueueDropPartitions deletes lock rows of partitions that no longer
	// exist. Arguments: queue, partition count.
	qQueueDropPartitions = Query{SQL: "DELETE FROM {p}queue_partitions WHERE queue = ? AND `partition` >= ?"}

	// qQueueMoveJobs moves jobs out of partitions that no longer exist
	// into partition % P. Ids (insert order) and priorities are kept, so
	// no job is lost or reordered in claim order. Arguments: P, queue, P.
	qQueueMoveJobs = Query{SQL: "UPDATE {p}queue_jobs SET `partition` = `partition` % ? WHERE queue = ? AND `partition` >= ?"}

	// qQueueJobCount counts a queue's jobs in any state.
	qQueueJobCount = Query{SQL: `SELECT count(*) FROM {p}queue_jobs WHERE queue = ?`}

	// qQueueDeleteJobs, qQueueDeletePartitions and qQueueDelete remove a
	// queue.
	qQueueDeleteJobs       = Query{SQL: `DELETE FROM {p}queue_jobs WHERE queue = ?`}
	qQueueDeletePartitions = Query{SQL: `DELETE FROM {p}queue_partitions WHERE queue = ?`}
	qQueueDelete           = Query{SQL: `DELETE FROM {p}queues WHERE name = ?`}
	qQueueDeleteCounts     = Query{SQL: `DELETE FROM {p}queue_counts WHERE queue = ?`}
	qQueueDeleteOnce       = Query{SQL: `DELETE FROM {p}queue_once WHERE queue = ?`}

	// qQueueObserve reads many queues with the number of lock rows of
	// partitions that exist.
	qQueueObserve = Query{SQL: "SELECT q.name, q.partitions, q.config,\n" +
		"  (SELECT count(*) FROM {p}queue_partitions p WHERE p.queue = q.name AND p.`partition` < q.partitions),\n" +
		"  q.paused_at, q.paused_by, q.paused_reason\n" +
		"FROM {p}queues q WHERE q.name {in}"}

	// qQueueObserveJobs counts jobs by queue, state and whether they are
	// stranded in a partition at or above the queue's partition count,
	// with the ready jobs that are delayed (available_at in the future),
	// the enqueue time of the oldest ready job available now (NULL: none)
	// and the first delayed job's available_at (NULL: none), all against
	// one instant.
	qQueueObserveJobs = Query{SQL: "SELECT j.queue, j.state, j.`partition` >= q.partitions, count(*),\n" +
		"  count(CASE WHEN j.state = 'ready' AND j.available_at > {now} THEN 1 END),\n" +
		"  min(CASE WHEN j.state = 'ready' AND j.available_at <= {now} THEN j.enqueued_at END),\n" +
		"  min(CASE WHEN j.state = 'ready' AND j.available_at > {now} THEN j.available_at END)\n" +
		"FROM {p}queue_jobs j JOIN {p}queues q ON q.name = j.queue\n" +
		"WHERE j.queue {in} GROUP BY 1, 2, 3"}
)

// PutQueue creates or updates the queue, its partition lock rows, and
// moves jobs of removed partitions into the remaining ones, all in one
// transaction. It returns how many jobs moved.
func (s *Core) PutQueue(ctx context.Context, cfg backends.QueueConfig) (int64, error) {
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
	d := s.DB.Dialect()
	parts := make([]int, cfg.Partitions)
	for i := range parts {
		parts[i] = i
	}
	var moved int64
	err = s.DB.Write(ctx, func(c Conn) error {
		if _, err := c.Exec(ctx, d.Text(qQueuePut), cfg.Name, cfg.Partitions, string(conf)); err != nil {
			if d.IsDuplicate(err) {
				return ErrRetry
			}
			return err
		}
		for _, ch := range Chunks(parts, inventoryChunk) {
			args := make([]any, 0, 2*len(ch))
			for _, p := range ch {
				args = append(args, cfg.Name, p)
			}
			q := d.Pick(qQueueAddPartitionsHead) + Tuples(qQueueAddPartitionRow, len(ch)) + d.Pick(qQueueAddPartitionsTail)
			if _, err := c.Exec(ctx, d.Render(q), args...); err != nil {
				return err
			}
		}
		if _, err := c.Exec(ctx, d.Text(qQueueDropPartitions), cfg.Name, cfg.Partitions); err != nil {
			return err
		}
		moved, err = Affected(c.Exec(ctx, d.Text(qQueueMoveJobs), cfg.Partitions, cfg.Name, cfg.Partitions))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("put queue %q: %w", cfg.Name, err)
	}
	return moved, nil
}

// DeleteQueue removes the queue, its partitions and (with force) its
// jobs. Absent is not an error.
func (s *Core) DeleteQueue(ctx context.Context, name string, force bool) error {
	d := s.DB.Dialect()
	var jobs int64
	err := s.DB.Write(ctx, func(c Conn) error {
		var partitions int
		err := c.QueryRow(ctx, d.Text(qQueueLock), name).Scan(&partitions)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if err := c.QueryRow(ctx, d.Text(qQueueJobCount), name).Scan(&jobs); err != nil {
			return err
		}
		if jobs > 0 && !force {
			return nil
		}
		for _, q := range []Query{qQueueDeleteJobs, qQueueDeletePartitions, qQueueDelete, qQueueDeleteCounts, qQueueDeleteOnce} {
			if _, err := c.Exec(ctx, d.Text(q), name); err != nil {
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

// ObserveQueues reads many queues, two statements per list of names, in
// one snapshot.
func (s *Core) ObserveQueues(ctx context.Context, names []string) (map[string]*backends.QueueState, error) {
	out := make(map[string]*backends.QueueState, len(names))
	if len(names) == 0 {
		return out, nil
	}
	d := s.DB.Dialect()
	_, err := s.DB.Read(ctx, func(c Conn) error {
		clear(out)
		for _, l := range ListChunks(d, names) {
			if err := s.observeQueues(ctx, c, l, out); err != nil {
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

// observeQueues reads the configs and job counts of one list of names.
func (s *Core) observeQueues(ctx context.Context, c Conn, names []string, out map[string]*backends.QueueState) error {
	d := s.DB.Dialect()
	rows, err := QueryIn(ctx, c, d, qQueueObserve, names)
	if err != nil {
		return err
	}
	for rows.Next() {
		var st backends.QueueState
		var name, conf string
		var partitions int
		var pausedAt sql.NullInt64
		var p backends.Pause
		if err := rows.Scan(&name, &partitions, &conf, &st.PartitionsPresent, &pausedAt, &p.Host, &p.Reason); err != nil {
			rows.Close()
			return err
		}
		if pausedAt.Valid {
			p.At = FromMicros(pausedAt.Int64)
			st.Paused = &p
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
	if rows, err = QueryIn(ctx, c, d, qQueueObserveJobs, names); err != nil {
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
		if st := out[name]; st != nil {
			addJobCounts(st, state, stranded, n, delayed, FromNullMicros(oldest), FromNullMicros(next))
		}
	}
	return rows.Err()
}

// addJobCounts adds one row of qQueueObserveJobs to st.
func addJobCounts(st *backends.QueueState, state string, stranded bool, n, delayed int64, oldest, next time.Time) {
	st.Delayed += delayed
	if !next.IsZero() && (st.NextDelayed.IsZero() || next.Before(st.NextDelayed)) {
		st.NextDelayed = next
	}
	if !oldest.IsZero() && (st.OldestReady.IsZero() || oldest.Before(st.OldestReady)) {
		st.OldestReady = oldest
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
