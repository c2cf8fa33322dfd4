-- 0012_queue_priority: job priorities (queue push --priority).
-- min_binary: 0.1.0
--
-- priority is the job's priority as pushed (between -100 and 100, 0 the
-- default, which every job already stored gets): a claim takes the
-- claimable jobs with the highest priority first, and within one priority
-- in id (push) order. queue_jobs_ready, which the claim walks in that
-- order and stops after its limit (INDEXED BY), becomes (queue, state,
-- priority DESC, id): when every job has priority 0 the walk is the one
-- of (queue, state, id). The index is dropped and made again under its
-- name in this migration's transaction, which holds the whole file while
-- it reads the table once. Additive: an older binary's pushes store
-- priority 0, and its claims, which name queue_jobs_ready in id order,
-- still run (sorting the ready jobs' ids) during a rolling upgrade.
ALTER TABLE queue_jobs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
DROP INDEX queue_jobs_ready;
CREATE INDEX queue_jobs_ready ON queue_jobs (queue, state, priority DESC, id);
