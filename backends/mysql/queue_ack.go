package mysql

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/coordd/coordd/backends"
)

// Batched acks (Ack).
const (
	// qJobAckBatchHead deletes a batch of jobs, each only while its owner
	// holds it, in one autocommit statement: the head, the batch as a
	// derived table (qJobAckRow, then qJobAckRowMore per further job, then
	// qJobAckRowsTail; arguments id, queue, owner per job), then
	// qJobAckBatchTail. It joins from the derived table into queue_jobs
	// (STRAIGHT_JOIN: one primary-key lookup per job, whatever the
	// optimizer thinks of the table's size; an IN list may be run as a scan
	// of a small table, which in REPEATABLE READ locks, or waits for, every
	// row; and single-table DELETE takes no index hint).
	qJobAckBatchHead = "DELETE j FROM "
	qJobAckRow       = "(SELECT ? AS id, ? AS q, ? AS o"
	qJobAckRowMore   = " UNION ALL SELECT ?, ?, ?"
	qJobAckRowsTail  = ") a"
	qJobAckBatchTail = " STRAIGHT_JOIN `{p}queue_jobs` j ON j.id = a.id\n" +
		"WHERE j.queue = a.q AND j.owner = a.o AND j.state = 'running'"

	// qJobAckPresentHead lists which jobs of a batch still exist after the
	// batch DELETE matched fewer than all (qJobAckID, qJobAckIDMore per
	// further id, qJobAckRowsTail, then qJobAckPresentTail): those were
	// not deleted, so their acks are lost.
	qJobAckPresentHead = "SELECT STRAIGHT_JOIN j.id FROM "
	qJobAckID          = "(SELECT ? AS id"
	qJobAckIDMore      = " UNION ALL SELECT ?"
	qJobAckPresentTail = " JOIN `{p}queue_jobs` j ON j.id = a.id"
)

// Ack deletes a finished job while j.Owner still holds it (ErrLost).
//
// Acks are group-committed per Store: a commit waits for the disk (with
// innodb_flush_log_at_trx_commit = 1), and it, more than the round trip,
// is what a queue drain is bound by. An Ack with none in flight runs at
// once; acks that arrive while one runs wait for it and then go together,
// up to maxAckBatch, in one autocommit DELETE (qJobAckBatchHead): one
// round trip and one commit, whatever the number. Each Ack still learns
// whether its own job was deleted: when the DELETE matched every job, all
// were; otherwise (a lease in the batch was lost) one more read finds the
// jobs still present, which were not. Only if some job that the DELETE did
// not match is gone as well (it was lost, then acked by its next owner)
// can the read not tell which of the missing jobs the DELETE took: then
// every missing job's ack returns ErrLost, so an Ack never claims a
// deletion it cannot prove. An Ack whose ctx ends while it waits returns
// ctx's error, and its job may be deleted anyway.
func (s *Store) Ack(ctx context.Context, j backends.Job) error {
	err := s.queues.acks.Do(ctx, j, s.ackBatch)
	if err != nil {
		return fmt.Errorf("ack job %d of queue %q as %q: %w", j.ID, j.Queue, j.Owner, err)
	}
	return nil
}

// maxAckBatch bounds the jobs one batch of acks deletes.
const maxAckBatch = 256

// ackTimeout bounds a batch of acks, which runs for several callers and so
// follows none of their contexts.
const ackTimeout = 30 * time.Second

// ackBatch deletes the jobs of batch that their owners still hold and
// returns each ack's error: nil, ErrLost, or the batch's own failure. A
// deleted job with a key may let the next job of its key start, so then it
// wakes a parked worker of the queue (one per such job, up to maxWake).
func (s *Store) ackBatch(ctx context.Context, batch []backends.Job) []error {
	errs := s.ackDelete(ctx, batch)
	keyed := map[string]int{}
	for i, j := range batch {
		if errs[i] == nil && j.Key != "" {
			keyed[j.Queue]++
		}
	}
	for q, n := range keyed {
		s.wakeQueue(ctx, q, min(n, maxWake))
	}
	return errs
}

// ackDelete is ackBatch's DELETE.
func (s *Store) ackDelete(ctx context.Context, batch []backends.Job) []error {
	errs := make([]error, len(batch))
	if len(batch) == 1 {
		j := batch[0]
		errs[0] = s.AckJob(ctx, j)
		return errs
	}
	// One job twice in a batch: at most the first ack can delete it.
	var todo []int // indexes into batch
	seen := make(map[int64]bool, len(batch))
	args := make([]any, 0, 3*len(batch))
	for i, r := range batch {
		if seen[r.ID] {
			errs[i] = backends.ErrLost
			continue
		}
		seen[r.ID] = true
		todo = append(todo, i)
		args = append(args, r.ID, r.Queue, r.Owner)
	}
	rows := qJobAckRow + strings.Repeat(qJobAckRowMore, len(todo)-1) + qJobAckRowsTail
	n, err := affected(s.autocommit(ctx, qJobAckBatchHead+rows+qJobAckBatchTail, args...))
	if err != nil {
		return fill(errs, todo, err)
	}
	if n == int64(len(todo)) {
		return errs // all deleted
	}
	present, err := s.ackPresent(ctx, batch, todo)
	if err != nil {
		return fill(errs, todo, fmt.Errorf("ack batch matched %d of %d jobs, and reading which: %w", n, len(todo), err))
	}
	missing := int64(len(todo) - len(present))
	for _, i := range todo {
		if present[batch[i].ID] || n != missing {
			errs[i] = backends.ErrLost
		}
	}
	return errs
}

// ackPresent returns which jobs of batch[todo] still exist.
func (s *Store) ackPresent(ctx context.Context, batch []backends.Job, todo []int) (map[int64]bool, error) {
	ids := make([]any, len(todo))
	for k, i := range todo {
		ids[k] = batch[i].ID
	}
	q := qJobAckPresentHead + qJobAckID + strings.Repeat(qJobAckIDMore, len(ids)-1) + qJobAckRowsTail + qJobAckPresentTail
	rows, err := s.on(nil).Query(ctx, q, ids...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	present := map[int64]bool{}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		present[id] = true
	}
	return present, rows.Err()
}

// fill sets errs[i] to err for every i in todo.
func fill(errs []error, todo []int, err error) []error {
	for _, i := range todo {
		errs[i] = err
	}
	return errs
}
