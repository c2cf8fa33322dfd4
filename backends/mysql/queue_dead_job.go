package mysql

import (
	"context"

	"github.com/coordd/coordd/backends"
)

// One dead job: the statements of RequeueDead and PurgeDead narrowed to
// the job's id (the last parameter).
const (
	qJobRequeueDeadJob = qJobRequeueDead + " AND id = ?"
	qJobPurgeDeadJob   = qJobPurgeDead + " AND id = ?"
)

// RequeueDeadJob makes dead job id of queue ready again and wakes one
// parked worker (backends.DeadJobs).
func (s *Store) RequeueDeadJob(ctx context.Context, queue string, id int64) error {
	if err := s.deadJob(ctx, "requeue", qJobRequeueDeadJob, queue, id); err != nil {
		return err
	}
	s.wakeQueue(ctx, queue, 1)
	return nil
}

// PurgeDeadJob deletes dead job id of queue (backends.DeadJobs).
func (s *Store) PurgeDeadJob(ctx context.Context, queue string, id int64) error {
	return s.deadJob(ctx, "purge", qJobPurgeDeadJob, queue, id)
}

func (s *Store) deadJob(ctx context.Context, verb, query, queue string, id int64) error {
	n, err := s.queueWriteCount(ctx, query, queue, id)
	return backends.DeadJobOutcome(verb, queue, id, n, err)
}
