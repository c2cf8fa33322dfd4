package redis

import (
	"context"
	"fmt"
	"strconv"

	"github.com/coordd/coordd/backends"
)

// queueRequeueDeadJobScript makes one dead job ready again
// (RequeueDeadJob), as queueRequeueDeadScript does to each dead job
// (lua/queue_requeue_dead_job.lua).
var queueRequeueDeadJobScript = luaScript("queue_requeue_dead_job.lua")

// queuePurgeDeadJobScript deletes one dead job (PurgeDeadJob;
// lua/queue_purge_dead_job.lua).
var queuePurgeDeadJobScript = luaScript("queue_purge_dead_job.lua")

// RequeueDeadJob makes dead job id of queue ready again (backends.Queues).
func (s *Store) RequeueDeadJob(ctx context.Context, queue string, id int64) error {
	if err := s.writable(); err != nil {
		return err
	}
	res, err := s.runQueueScript(ctx, queueRequeueDeadJobScript, queue, queueArgs(strconv.FormatInt(id, 10)))
	return backends.DeadJobOutcome("requeue", queue, id, deadJobsDone(res), err)
}

// PurgeDeadJob deletes dead job id of queue (backends.Queues).
func (s *Store) PurgeDeadJob(ctx context.Context, queue string, id int64) error {
	if err := s.writable(); err != nil {
		return err
	}
	res, err := s.queueEval(ctx, queuePurgeDeadJobScript, s.queueInfo(queue).fixed, strconv.FormatInt(id, 10))
	return backends.DeadJobOutcome("purge", queue, id, deadJobsDone(res), err)
}

// deadJobsDone reads a dead job script's reply: {1} done (1 job), {0} no
// such job.
func deadJobsDone(res []any) int64 {
	if len(res) == 0 || queueInt(res[0]) != 1 {
		return 0
	}
	return 1
}

// queuePartialFields is the number of fields lua/lib/queue_partial.lua's
// partial returns per job.
const queuePartialFields = queueJobFields + 1

// queueDeadPageScript lists a page of dead jobs (DeadPage;
// lua/queue_dead_page.lua).
var queueDeadPageScript = luaScript("queue_dead_page.lua")

// queueDeadOneScript reads one dead job (DeadJob; lua/queue_dead_one.lua).
var queueDeadOneScript = luaScript("queue_dead_one.lua")

// DeadPage lists up to limit dead jobs of queue after the first offset,
// in the order they died, payload and last error cut at cut bytes
// (backends.Queues).
func (s *Store) DeadPage(ctx context.Context, queue string, offset, limit, cut int) ([]backends.PartialJob, error) {
	res, err := s.queueEval(ctx, queueDeadPageScript, s.queueInfo(queue).fixed, max(offset, 0), max(limit, 0), max(cut, 0))
	if err != nil {
		return nil, fmt.Errorf("list dead jobs of queue %q: %w", queue, err)
	}
	jobs := make([]backends.PartialJob, 0, len(res)/queuePartialFields)
	for i := 0; i+queuePartialFields <= len(res); i += queuePartialFields {
		jobs = append(jobs, backends.PartialJob{Job: queueJobAt(queue, res, i), PayloadSize: queueInt(res[i+queueJobFields])})
	}
	return jobs, nil
}

// DeadJob reads dead job id of queue, payload and last error cut at cut
// bytes (backends.Queues).
func (s *Store) DeadJob(ctx context.Context, queue string, id int64, cut int) (backends.PartialJob, error) {
	res, err := s.queueEval(ctx, queueDeadOneScript, s.queueInfo(queue).fixed, strconv.FormatInt(id, 10), max(cut, 0))
	switch {
	case err != nil:
		return backends.PartialJob{}, fmt.Errorf("read dead job %d of queue %q: %w", id, queue, err)
	case len(res) < queuePartialFields:
		return backends.PartialJob{}, fmt.Errorf("queue %q has no dead job %d: %w", queue, id, backends.ErrNotFound)
	}
	j := backends.PartialJob{Job: queueJobAt(queue, res, 0), PayloadSize: queueInt(res[queueJobFields])}
	if len(res) > queuePartialFields {
		j.Errors = backends.ParseAttemptErrors(queueStr(res[queuePartialFields]))
	}
	return j, nil
}
