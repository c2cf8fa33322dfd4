package redis

import (
	"context"
	"fmt"
	"strconv"

	goredis "github.com/redis/go-redis/v9"

	"github.com/coordd/coordd/backends"
)

// The queue browser (backends.Queues: JobsPage, JobByID, CancelJob,
// RunJobNow). The reads run read-only (EVALSHA_RO) and cut payloads and
// last errors on the server, as DeadPage does; each call is one script.

// queueJobsPageScript lists a page of a queue's jobs in one state
// (JobsPage; lua/queue_jobs_page.lua).
var queueJobsPageScript = luaScript("queue_jobs_page.lua")

// queueJobByIDScript reads one job in any state (JobByID;
// lua/queue_job_by_id.lua).
var queueJobByIDScript = luaScript("queue_job_by_id.lua")

// queueCancelJobScript deletes one ready or delayed job (CancelJob;
// lua/queue_cancel_job.lua).
var queueCancelJobScript = luaScript("queue_cancel_job.lua")

// queueRunJobNowScript makes one delayed job available now (RunJobNow;
// lua/queue_run_job_now.lua).
var queueRunJobNowScript = luaScript("queue_run_job_now.lua")

// queueBrowseFields is the number of fields lua/lib/queue_browse.lua's
// browse returns per job: partial's, then the lease deadline µs (0 unless
// in flight).
const queueBrowseFields = queuePartialFields + 1

// queueBrowseJobAt decodes the job whose browse fields start at res[i].
func queueBrowseJobAt(queue string, res []any, i int) backends.PartialJob {
	j := backends.PartialJob{Job: queueJobAt(queue, res, i), PayloadSize: queueInt(res[i+queueJobFields])}
	if exp := queueInt(res[i+queuePartialFields]); exp > 0 {
		j.ExpiresAt = queueTime(exp)
	}
	return j
}

// JobsPage lists one page of queue's jobs in p.State, payload and last
// error cut at p.Cut bytes (backends.Queues).
func (s *Store) JobsPage(ctx context.Context, queue string, p backends.JobPage) ([]backends.PartialJob, error) {
	if err := backends.CheckJobState(p.State); err != nil {
		return nil, fmt.Errorf("list jobs of queue %q: %w", queue, err)
	}
	res, err := s.runQueueScriptRO(ctx, queueJobsPageScript, queue,
		p.State, p.Key, max(p.Offset, 0), max(p.Limit, 0), max(p.Cut, 0))
	if err != nil {
		return nil, fmt.Errorf("list %s jobs of queue %q: %w", p.State, queue, err)
	}
	jobs := make([]backends.PartialJob, 0, (len(res)-1)/queueBrowseFields)
	for i := 1; i+queueBrowseFields <= len(res); i += queueBrowseFields {
		jobs = append(jobs, queueBrowseJobAt(queue, res, i))
	}
	return jobs, nil
}

// JobByID reads job id of queue and its state, payload and last error cut
// at cut bytes (backends.Queues).
func (s *Store) JobByID(ctx context.Context, queue string, id int64, cut int) (backends.PartialJob, string, error) {
	res, err := s.runQueueScriptRO(ctx, queueJobByIDScript, queue, strconv.FormatInt(id, 10), max(cut, 0))
	switch {
	case err != nil:
		return backends.PartialJob{}, "", fmt.Errorf("read job %d of queue %q: %w", id, queue, err)
	case queueInt(res[0]) != 1 || len(res) < 2+queueBrowseFields:
		return backends.PartialJob{}, "", fmt.Errorf("queue %q has no job %d: %w", queue, id, backends.ErrNotFound)
	}
	j := queueBrowseJobAt(queue, res, 2)
	if len(res) > 2+queueBrowseFields {
		j.Errors = backends.ParseAttemptErrors(queueStr(res[2+queueBrowseFields]))
	}
	return j, queueStr(res[1]), nil
}

// CancelJob deletes ready or delayed job id of queue (backends.Queues).
func (s *Store) CancelJob(ctx context.Context, queue string, id int64) error {
	if err := s.writable(); err != nil {
		return err
	}
	res, err := s.runQueueScript(ctx, queueCancelJobScript, queue, queueArgs(strconv.FormatInt(id, 10)))
	return backends.JobOutcome("cancel", "ready or delayed", queue, id, deadJobsDone(res), err)
}

// RunJobNow makes delayed job id of queue available now (backends.Queues).
func (s *Store) RunJobNow(ctx context.Context, queue string, id int64) error {
	if err := s.writable(); err != nil {
		return err
	}
	res, err := s.runQueueScript(ctx, queueRunJobNowScript, queue, queueArgs(strconv.FormatInt(id, 10)))
	return backends.JobOutcome("run now", "delayed", queue, id, deadJobsDone(res), err)
}

// runQueueScriptRO is runQueueScript for a script that writes nothing: it
// runs read-only (EVALSHA_RO, then EVAL_RO), and a reply {-1, n} runs it
// again with the ready sets 0..n-1.
func (s *Store) runQueueScriptRO(ctx context.Context, sc *goredis.Script, name string, args ...any) ([]any, error) {
	return s.withQueueKeys(name, func(ks []string) ([]any, error) {
		return sc.RunRO(ctx, s.rdb, ks, args...).Slice()
	})
}
