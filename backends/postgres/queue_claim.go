package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/internal/sqlstore"
)

// A claim is one statement in autocommit: one round trip, one commit,
// where the shared store's claim is a transaction of five (BEGIN, the
// config, the sweep of expired leases, the claim, COMMIT). The statement
// does what that transaction does, in the same order of jobs:
//
//   - it acts only while the queue's stored config is the text the Store
//     read last (claimConfigs), whose visibility timeout and max_attempts
//     it binds; otherwise it changes nothing and returns one sentinel row
//     (id 0), and the claim reads the config and runs again;
//   - it takes, in claim order (the highest priority first, then id),
//     ready jobs that are available and free as far as their key goes,
//     and running jobs whose visibility ended (they are ready again in
//     the shared store's sweep, before its claim looks), both FOR UPDATE
//     SKIP LOCKED, so a claim never waits for another; a data-modifying
//     CTE cannot see what another one changed, so the expired jobs are
//     taken from the snapshot directly;
//   - it sweeps the expired jobs it did not take: ready again, or dead
//     once they used max_attempts attempts.
//
// The commit does not wait for the WAL flush (synchronous_commit off for
// this statement). What a server crash can lose is then a claim, never a
// push or an ack: the job is as it was before the claim (ready, or held
// by the owner whose lease had ended) and is delivered again, which the
// at-least-once promise allows (a lease already ends early when the
// server loses it). An ack commits with the flush, and the WAL is flushed
// in order, so an acknowledged job's claim is durable before its ack is:
// an acknowledged job never comes back. A sweep lost the same way is made
// again by the next claim.

// claimConfigs caches each queue's config for the claim and push
// statements.
type claimConfigs struct{ m sync.Map } // queue name → *claimConfig

// claimConfig is a queue's config as last read: the stored text and
// partition count, which the statements compare, and what they bind or
// check from it.
type claimConfig struct {
	text        string
	partitions  int
	maxAttempts int
	maxPayload  int64
	vis         int64 // visibility timeout, µs
}

// maxConfigRefresh bounds the config reads of one claim that keeps
// finding the stored config changed.
const maxConfigRefresh = 4

var (
	// qClaimConfig reads a queue's stored config text and partition count.
	// Argument: queue.
	qClaimConfig = sqlstore.Query{SQL: `SELECT partitions, config FROM {p}queues WHERE name = ?`}

	// qClaim is the claim (see above). Columns: jobColumns of each job it
	// leased; one row of id 0 when the config did not match. The expired
	// jobs are all taken up (found through queue_jobs_expiry, migration
	// 0006), since those the claim leaves the sweep takes. The ready jobs
	// are read in claim order from queue_jobs_ready (queue, state,
	// priority DESC, id, migration 0012), which stops after the limit
	// without a sort, as the walk in id order did before priorities; take
	// keeps the first of both in claim order. Arguments:
	// queue, config text; queue, max_attempts twice (expired jobs); queue,
	// max_attempts twice, limit (ready jobs); limit; owner, visibility;
	// max_attempts four times, queue (the sweep: a job it makes dead gets
	// available_at now, its time of death).
	qClaim = sqlstore.Query{SQL: `WITH q AS (
  SELECT name, set_config('synchronous_commit', 'off', true) FROM {p}queues WHERE name = ? AND config = ?
), expired AS (
  SELECT j.id, j.priority FROM {p}queue_jobs j
  WHERE j.queue = ? AND EXISTS (SELECT 1 FROM q) AND j.state = 'running' AND j.expires_at <= {now}
    AND NOT (?::bigint > 0 AND j.attempt >= ?::bigint)
    AND NOT EXISTS (SELECT 1 FROM {p}queue_jobs k
      WHERE k.queue = j.queue AND k.unique_key = j.unique_key AND k.state = 'ready' AND k.id < j.id)
  FOR UPDATE SKIP LOCKED
), ready AS (
  SELECT j.id, j.priority FROM {p}queue_jobs j
  WHERE j.queue = ? AND EXISTS (SELECT 1 FROM q) AND j.state = 'ready' AND j.available_at <= {now} AND ` + claimKeyFree + `
  ORDER BY j.priority DESC, j.id LIMIT ? FOR UPDATE SKIP LOCKED
), take AS (
  SELECT id AS tid FROM (SELECT id, priority FROM expired UNION ALL SELECT id, priority FROM ready) x
  ORDER BY priority DESC, id LIMIT ?
), claimed AS (
  UPDATE {p}queue_jobs j SET state = 'running', owner = ?, attempt = j.attempt + 1, expires_at = {now} + ?,
    last_error = CASE WHEN j.state = 'running' THEN 'visibility timeout' ELSE j.last_error END
  FROM take WHERE j.id = take.tid
  RETURNING ` + claimColumns + `
), swept AS (
  UPDATE {p}queue_jobs SET state = CASE WHEN ?::bigint > 0 AND attempt >= ?::bigint THEN 'dead' ELSE 'ready' END,
    available_at = CASE WHEN ?::bigint > 0 AND attempt >= ?::bigint THEN {now} ELSE available_at END,
    owner = NULL, expires_at = 0, last_error = 'visibility timeout'
  WHERE id IN (SELECT x.id FROM {p}queue_jobs x
    WHERE x.queue = ? AND EXISTS (SELECT 1 FROM q) AND x.state = 'running' AND x.expires_at <= {now}
      AND x.id NOT IN (SELECT tid FROM take) FOR UPDATE SKIP LOCKED)
)
SELECT * FROM claimed
UNION ALL
SELECT 0, 0, NULL, NULL, 0, 0, 0, 0, NULL, 0, '' WHERE NOT EXISTS (SELECT 1 FROM q)`}
)

const (
	// claimColumns are the columns ScanJob reads, of queue_jobs j.
	claimColumns = `j.id, j."partition", j.payload, j.unique_key, j.priority, j.attempt, j.enqueued_at, j.available_at, j.owner, j.expires_at, j.last_error`

	// claimKeyFree is the shared store's test that job j may start as far
	// as its key goes (no job of its key running, none older ready), where
	// a running job whose visibility ended and whose attempts are used up
	// no longer counts: the sweep of the same statement makes it dead (the
	// shared store's sweep does so before its claim looks). Arguments:
	// max_attempts twice.
	claimKeyFree = `(j.unique_key IS NULL OR (
  NOT EXISTS (SELECT 1 FROM {p}queue_jobs k
    WHERE k.queue = j.queue AND k.unique_key = j.unique_key AND k.state = 'running'
      AND NOT (k.expires_at <= {now} AND ?::bigint > 0 AND k.attempt >= ?::bigint))
  AND NOT EXISTS (SELECT 1 FROM {p}queue_jobs k
    WHERE k.queue = j.queue AND k.unique_key = j.unique_key AND k.state = 'ready' AND k.id < j.id)))`
)

// Claim leases up to max claimable jobs of queue to owner, in claim order
// (the highest priority first, then push order), in one statement (see
// above), and returns them in that order.
func (s *Store) Claim(ctx context.Context, queue, owner string, max int) ([]backends.Job, error) {
	if owner == "" {
		return nil, fmt.Errorf("claim from queue %q: empty owner", queue)
	}
	if max < 1 {
		return nil, fmt.Errorf("claim from queue %q: max %d: must be at least 1", queue, max)
	}
	jobs, err := s.claim(ctx, queue, owner, max)
	if err != nil {
		return nil, fmt.Errorf("claim from queue %q as %q: %w", queue, owner, err)
	}
	slices.SortFunc(jobs, backends.ClaimOrder)
	s.mates.claimed(owner, len(jobs))
	return jobs, nil
}

// claim runs qClaim with the cached config, reading it again while the
// stored one differs.
func (s *Store) claim(ctx context.Context, queue, owner string, max int) ([]backends.Job, error) {
	if err := s.pool.Writable(ctx); err != nil {
		return nil, err
	}
	fresh := false
	for range maxConfigRefresh {
		c, err := s.queueConfig(ctx, queue, fresh)
		if err != nil {
			return nil, err
		}
		jobs, matched, err := s.claimOnce(ctx, queue, owner, max, c)
		if err != nil || matched {
			return jobs, err
		}
		fresh = true
	}
	return nil, fmt.Errorf("the queue's config changed %d times in a row: %w", maxConfigRefresh, sqlstore.ErrRetry)
}

// queueConfig is the cached config of queue, read first when there is
// none or fresh.
func (s *Store) queueConfig(ctx context.Context, queue string, fresh bool) (*claimConfig, error) {
	if !fresh {
		if c, ok := s.claimCfg.m.Load(queue); ok {
			return c.(*claimConfig), nil
		}
	}
	return s.readClaimConfig(ctx, queue)
}

// claimOnce sends qClaim once (retried when PostgreSQL rolled it back) and
// reports whether the config matched.
func (s *Store) claimOnce(ctx context.Context, queue, owner string, max int, c *claimConfig) (jobs []backends.Job, matched bool, err error) {
	q := s.dialect.Text(qClaim)
	err = s.pool.Retry(ctx, s.pool.Attempts, func() error {
		jobs, matched = jobs[:0], true
		rows, err := s.pool.On(nil).Query(ctx, q, queue, c.text,
			queue, c.maxAttempts, c.maxAttempts,
			queue, c.maxAttempts, c.maxAttempts, max,
			max, owner, c.vis, c.maxAttempts, c.maxAttempts, c.maxAttempts, c.maxAttempts, queue)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			j, err := sqlstore.ScanJob(rows, queue)
			if err != nil {
				return err
			}
			if j.ID == 0 {
				matched = false
				continue
			}
			jobs = append(jobs, j)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, false, s.pool.Explain(ctx, err)
	}
	if !matched && len(jobs) > 0 {
		return nil, false, errors.New("claim leased jobs with a stale config")
	}
	if jobs == nil {
		jobs = []backends.Job{}
	}
	return jobs, matched, nil
}

// readClaimConfig reads queue's config into the cache; ErrNotFound when
// the queue is absent.
func (s *Store) readClaimConfig(ctx context.Context, queue string) (*claimConfig, error) {
	var partitions int
	var text string
	err := s.pool.On(nil).QueryRow(ctx, s.dialect.Text(qClaimConfig), queue).Scan(&partitions, &text)
	if errors.Is(err, sql.ErrNoRows) {
		s.claimCfg.m.Delete(queue)
		return nil, backends.ErrNotFound
	}
	if err != nil {
		return nil, s.pool.Explain(ctx, err)
	}
	cfg, err := sqlstore.ParseQueueConfig(queue, text, partitions)
	if err != nil {
		return nil, err
	}
	vis, err := sqlstore.LeaseMicros(cfg.VisibilityTimeout)
	if err != nil {
		return nil, fmt.Errorf("visibility_timeout: %w", err)
	}
	c := &claimConfig{text: text, partitions: partitions, maxAttempts: cfg.MaxAttempts, maxPayload: cfg.MaxPayload, vis: vis}
	s.claimCfg.m.Store(queue, c)
	return c, nil
}
