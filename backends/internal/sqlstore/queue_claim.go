package sqlstore

import (
	"context"
	"fmt"
	"slices"

	"github.com/coordd/coordd/backends"
)

// The Standard flavor's claim: the sweep of expired leases, then one
// UPDATE of the claimable jobs it picks. MySQL claims with scripts of its
// own (backends/mysql).
var (
	// qJobExpire returns running jobs whose visibility deadline passed to
	// the queue: ready again (the attempt they used stays counted), or
	// dead once they used max_attempts attempts (<= 0: unlimited), with
	// available_at the time of death. Arguments: max_attempts four times,
	// queue.
	qJobExpire = Query{SQL: `UPDATE {p}queue_jobs
SET state = CASE WHEN ? > 0 AND attempt >= ? THEN 'dead' ELSE 'ready' END,
  available_at = CASE WHEN ? > 0 AND attempt >= ? THEN {now} ELSE available_at END,
  owner = NULL, expires_at = 0, last_error = 'visibility timeout'
WHERE queue = ? AND state = 'running' AND expires_at <= {now}`}

	// qJobClaim leases up to a number of claimable jobs of a queue,
	// whatever their partition, in claim order (the highest priority
	// first, then id: push order), to an owner until now + the visibility
	// timeout in microseconds, counting an attempt. The sub-select walks
	// queue_jobs_ready (queue, state, priority DESC, id) in that order and
	// stops after the limit, as it did in id order before priorities: no
	// sort. It reads the jobs as they were before the update, so it takes
	// at most one job of a key (the later ones have an older one ready,
	// whatever their priority); where the store has row locks it skips the
	// jobs other claims hold, and two claims never take two jobs of one
	// key: the later job reads the earlier one as ready (its last
	// committed state) or running, either of which holds it back.
	// RETURNING promises no order: the caller sorts in claim order
	// (backends.ClaimOrder). Arguments: owner, visibility, queue, limit.
	qJobClaim = Query{SQL: `UPDATE {p}queue_jobs
SET state = 'running', owner = ?, attempt = attempt + 1, expires_at = {now} + ?
WHERE id IN (SELECT j.id FROM {p}queue_jobs j{index queue_jobs_ready}
  WHERE j.queue = ? AND ` + jobClaimable + `
  ORDER BY j.priority DESC, j.id LIMIT ?{skiplocked})
RETURNING ` + jobColumns}
)

const (
	// jobKeyFree is true when job j (a queue_jobs row aliased j) may start
	// as far as its key goes: it has no key, or no job of its key is
	// running and no older one is ready (a delayed one included), so that
	// the jobs of one key run one at a time in push order, whatever their
	// priorities. Two point lookups in queue_jobs_key.
	jobKeyFree = `(j.unique_key IS NULL OR (
  NOT EXISTS (SELECT 1 FROM {p}queue_jobs k{index queue_jobs_key}
    WHERE k.queue = j.queue AND k.unique_key = j.unique_key AND k.state = 'running')
  AND NOT EXISTS (SELECT 1 FROM {p}queue_jobs k{index queue_jobs_key}
    WHERE k.queue = j.queue AND k.unique_key = j.unique_key AND k.state = 'ready' AND k.id < j.id)))`

	// jobClaimable is true when job j is ready, available now and free as
	// far as its key goes.
	jobClaimable = `j.state = 'ready' AND j.available_at <= {now} AND ` + jobKeyFree
)

// Claim first returns running jobs whose visibility expired to the queue
// (or the dead set), then leases up to max claimable jobs of the queue, in
// claim order (the highest priority first, then push order), all in one
// transaction, and returns them in that order. Each claim takes the first
// claimable jobs of the whole queue in that order, whatever their
// partition: on SQLite claims never run at once (one writer); elsewhere
// they skip each other's jobs.
func (s *Core) Claim(ctx context.Context, queue, owner string, max int) ([]backends.Job, error) {
	if err := backends.CheckClaimJobs(queue, owner, max); err != nil {
		return nil, err
	}
	d := s.DB.Dialect()
	var jobs []backends.Job
	err := s.DB.Write(ctx, func(c Conn) error {
		jobs = jobs[:0]
		cfg, err := LoadQueueConfig(ctx, c, d, queue, "")
		if err != nil {
			return err
		}
		vis, err := LeaseMicros(cfg.VisibilityTimeout)
		if err != nil {
			return fmt.Errorf("visibility_timeout: %w", err)
		}
		if _, err := c.Exec(ctx, d.Text(qJobExpire), cfg.MaxAttempts, cfg.MaxAttempts, cfg.MaxAttempts, cfg.MaxAttempts, queue); err != nil {
			return err
		}
		rows, err := c.Query(ctx, d.Text(qJobClaim), owner, vis, queue, max)
		if err != nil {
			return err
		}
		jobs, err = scanJobs(rows, queue, jobs)
		return err
	})
	if err != nil {
		return nil, backends.ClaimJobsError(queue, owner, err)
	}
	slices.SortFunc(jobs, backends.ClaimOrder)
	if jobs == nil {
		jobs = []backends.Job{}
	}
	return jobs, nil
}
