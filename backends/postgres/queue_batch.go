package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/internal/group"
	"github.com/coordd/coordd/backends/internal/sqlstore"
)

// Pushes without a key and acks are batched: requests that arrive while
// one batch is in flight go together in the next, in one statement and one
// commit, which on PostgreSQL costs far more than the statement (a WAL
// flush). A lone request goes at once, as one statement. Keyed pushes take
// the shared path (the queue's row locked, the key's duplicate checked).

// Bounds of a batch.
const (
	maxPushBatch  = 500
	maxAckBatch   = 500
	batchDeadline = 30 * time.Second
)

// queueBatches holds a Store's batchers.
type queueBatches struct {
	pushes group.Batcher[*pushItem]
	acks   group.Batcher[backends.Job]
}

func (q *queueBatches) init() {
	q.pushes.Limit, q.pushes.Timeout = maxPushBatch, batchDeadline
	q.acks.Limit, q.acks.Timeout = maxAckBatch, batchDeadline
	// Acks gather: the jobs of one claim finish together, and a commit
	// (a WAL flush) costs far more than the wait.
	q.acks.Gather = true
}

// pushItem is one push of a batch and, once done, its job.
type pushItem struct {
	queue string
	req   backends.PushRequest
	job   backends.Job
}

var (
	// qPushMany inserts a queue's keyless jobs in one autocommit
	// statement, in the order given (ids follow it), while the queue's
	// stored config and partition count are the ones the Store read last
	// (claimConfigs): the partitions and the payload checks come from
	// them. The queue's row is read in share mode, as the shared push does,
	// so that a PutQueue changing the partition count waits for it. No
	// row: the config differs or the queue is absent. Arguments: queue,
	// config text, partition count, partitions, payloads, priorities,
	// delays (µs).
	qPushMany = sqlstore.Query{SQL: `INSERT INTO {p}queue_jobs ("partition", payload, queue, unique_key, priority, attempt, state, available_at, enqueued_at, last_error)
SELECT u.p, u.pl, q.name, NULL, u.pr, 0, 'ready', {now} + u.d, {now}, ''
FROM (SELECT name FROM {p}queues WHERE name = ? AND config = ? AND partitions = ? FOR SHARE) q,
  unnest(?::bigint[], ?::bytea[], ?::smallint[], ?::bigint[]) WITH ORDINALITY AS u(p, pl, pr, d, n)
ORDER BY u.n
RETURNING id, "partition", payload, unique_key, priority, attempt, enqueued_at, available_at, owner, expires_at, last_error`}

	// qAckMany deletes finished jobs their owners still hold and returns
	// the ids it deleted. Only the id may lead the planner to a job: the
	// other columns are compared with IS NOT DISTINCT FROM (never NULL
	// here, so it means =), which no index serves. With = the statistics
	// of a table that fills and empties (gathered while it was nearly
	// empty) make the planner look each ack up in queue_jobs_state by
	// (queue, state): a read of every running job per ack, quadratic in a
	// busy queue. Arguments: ids, queues, owners.
	qAckMany = sqlstore.Query{SQL: `DELETE FROM {p}queue_jobs j
USING unnest(?::bigint[], ?::text[], ?::text[]) AS a(id, queue, owner)
WHERE j.id = a.id AND (j.queue, j.owner, j.state) IS NOT DISTINCT FROM (a.queue, a.owner, 'running')
RETURNING j.id`}
)

// Push adds a job; see backends.Queues. Keyless pushes are batched.
func (s *Store) Push(ctx context.Context, queue string, req backends.PushRequest) (backends.Job, error) {
	if req.Key != "" {
		return s.Core.Push(ctx, queue, req)
	}
	if err := backends.CheckPush(req); err != nil {
		return backends.Job{}, fmt.Errorf("push to queue %q: %w", queue, err)
	}
	it := &pushItem{queue: queue, req: req}
	if err := s.batches.pushes.Do(ctx, it, s.pushBatch); err != nil {
		return backends.Job{}, fmt.Errorf("push to queue %q: %w", queue, err)
	}
	return it.job, nil
}

// pushBatch inserts a batch of keyless pushes: per queue, one statement
// and one commit (pushQueue). A push refused (an absent queue, a payload
// over max_payload) gets its own error and the others go in.
func (s *Store) pushBatch(ctx context.Context, items []*pushItem) []error {
	errs := make([]error, len(items))
	if s.opts.ReadOnly {
		for i := range errs {
			errs[i] = ErrReadOnly
		}
		return errs
	}
	byQueue := map[string][]int{}
	var order []string
	for i, it := range items {
		if byQueue[it.queue] == nil {
			order = append(order, it.queue)
		}
		byQueue[it.queue] = append(byQueue[it.queue], i)
	}
	for _, q := range order {
		if err := s.pushQueue(ctx, q, items, byQueue[q], errs); err != nil {
			for _, i := range byQueue[q] {
				errs[i] = err
			}
		}
	}
	return errs
}

// pushQueue inserts the items idx of one queue with qPushMany, reading
// the queue's config again while the stored one differs from the cached.
func (s *Store) pushQueue(ctx context.Context, queue string, items []*pushItem, idx []int, errs []error) error {
	if err := s.pool.Writable(ctx); err != nil {
		return err
	}
	fresh := false
	for range maxConfigRefresh {
		cfg, err := s.queueConfig(ctx, queue, fresh)
		if errors.Is(err, backends.ErrNotFound) {
			for _, i := range idx {
				errs[i] = err
			}
			return nil
		}
		if err != nil {
			return err
		}
		done, err := s.pushWith(ctx, queue, cfg, items, idx, errs)
		if err != nil || done {
			return err
		}
		fresh = true
	}
	return fmt.Errorf("the queue's config changed %d times in a row: %w", maxConfigRefresh, sqlstore.ErrRetry)
}

// pushWith sends qPushMany under config cfg; done is false when the
// stored config was not cfg (nothing was inserted).
func (s *Store) pushWith(ctx context.Context, queue string, cfg *claimConfig, items []*pushItem, idx []int, errs []error) (done bool, err error) {
	var parts, prios, delays []int64
	var payloads [][]byte
	var take []int
	for _, i := range idx {
		req := items[i].req
		errs[i] = nil
		if err := backends.CheckPayload(len(req.Payload), cfg.maxPayload); err != nil {
			errs[i] = err
			continue
		}
		p := req.Payload
		if p == nil {
			p = []byte{} // the column is NOT NULL
		}
		take = append(take, i)
		parts = append(parts, int64(s.JobPartition("", cfg.partitions)))
		payloads = append(payloads, p)
		prios = append(prios, int64(req.Priority))
		delays = append(delays, sqlstore.NonNegMicros(req.Delay))
	}
	if len(take) == 0 {
		return true, nil
	}
	var jobs []backends.Job
	err = s.pool.Retry(ctx, s.pool.Attempts, func() error {
		jobs = jobs[:0]
		rows, err := s.pool.On(nil).Query(ctx, s.dialect.Text(qPushMany), queue, cfg.text, cfg.partitions, parts, payloads, prios, delays)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			j, err := sqlstore.ScanJob(rows, queue)
			if err != nil {
				return err
			}
			jobs = append(jobs, j)
		}
		return rows.Err()
	})
	switch {
	case err != nil:
		return false, s.pool.Explain(ctx, err)
	case len(jobs) == 0:
		return false, nil
	case len(jobs) != len(take):
		return false, fmt.Errorf("pushed %d jobs, the database returned %d", len(take), len(jobs))
	}
	// Ids follow the insert order, which is the order given.
	slices.SortFunc(jobs, func(a, b backends.Job) int { return int(a.ID - b.ID) })
	for k, i := range take {
		items[i].job = jobs[k]
	}
	return true, nil
}

// Ack deletes a finished job while j.Owner still holds it (ErrLost);
// concurrent acks are batched, and an ack waits briefly for the rest of
// its claim (queue_mates.go).
func (s *Store) Ack(ctx context.Context, j backends.Job) error {
	s.mates.await(ctx, j.Owner)
	if err := s.batches.acks.Do(ctx, j, s.ackBatch); err != nil {
		return sqlstore.JobError("ack", j, err)
	}
	return nil
}

// Retry returns a job to the queue or the dead set (sqlstore's); its
// claim's other acks no longer wait for it.
func (s *Store) Retry(ctx context.Context, j backends.Job, reason string) error {
	s.mates.finished(j.Owner)
	return s.Core.Retry(ctx, j, reason)
}

// ReturnJob puts a job back as ready (sqlstore's); its claim's other acks
// no longer wait for it.
func (s *Store) ReturnJob(ctx context.Context, j backends.Job) error {
	s.mates.finished(j.Owner)
	return s.Core.ReturnJob(ctx, j)
}

// ackBatch deletes a batch of jobs in one statement; a job its owner no
// longer holds gets ErrLost.
func (s *Store) ackBatch(ctx context.Context, jobs []backends.Job) []error {
	errs := make([]error, len(jobs))
	if len(jobs) == 1 {
		errs[0] = s.AckJob(ctx, jobs[0])
		return errs
	}
	ids := make([]int64, len(jobs))
	queues := make([]string, len(jobs))
	owners := make([]string, len(jobs))
	for i, j := range jobs {
		ids[i], queues[i], owners[i] = j.ID, j.Queue, j.Owner
	}
	deleted := map[int64]bool{}
	err := s.pool.Write(ctx, func(c sqlstore.Conn) error {
		clear(deleted)
		rows, err := c.Query(ctx, s.dialect.Text(qAckMany), ids, queues, owners)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				return err
			}
			deleted[id] = true
		}
		return rows.Err()
	})
	for i, j := range jobs {
		switch {
		case err != nil:
			errs[i] = err
		case !deleted[j.ID]:
			errs[i] = backends.ErrLost
		}
	}
	return errs
}
