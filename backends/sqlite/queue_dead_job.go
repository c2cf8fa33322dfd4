package sqlite

import (
	"context"

	"github.com/coordd/coordd/backends"
)

// One dead job: the statements of RequeueDead and PurgeDead narrowed to
// ?2, the job's id.
const (
	qJobRequeueDeadJob = qJobRequeueDead + ` AND id = ?2`
	qJobPurgeDeadJob   = qJobPurgeDead + ` AND id = ?2`
)

// RequeueDeadJob makes dead job id of queue ready again (backends.DeadJobs).
func (s *Store) RequeueDeadJob(ctx context.Context, queue string, id int64) error {
	return s.deadJob(ctx, "requeue", qJobRequeueDeadJob, queue, id)
}

// PurgeDeadJob deletes dead job id of queue (backends.DeadJobs).
func (s *Store) PurgeDeadJob(ctx context.Context, queue string, id int64) error {
	return s.deadJob(ctx, "purge", qJobPurgeDeadJob, queue, id)
}

func (s *Store) deadJob(ctx context.Context, verb, query, queue string, id int64) error {
	n, err := s.queueWriteCount(ctx, query, queue, id)
	return backends.DeadJobOutcome(verb, queue, id, n, err)
}
