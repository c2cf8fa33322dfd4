-- 0012_queue_priority: job priorities (queue push --priority).
-- min_binary: 0.1.0
--
-- priority is the job's priority as pushed (between -100 and 100, 0 the
-- default, which every job already stored gets; a column with a constant
-- default is added without rewriting the table): a claim takes the
-- claimable jobs with the highest priority first, and within one priority
-- in id (push) order. queue_jobs_ready, which the claim walks in that
-- order and stops after its limit, becomes (queue, state, priority DESC,
-- id): when every job has priority 0 the walk is the one of (queue,
-- state, id). It is dropped (by its schema-qualified name, {p}) and
-- built again under its name inside the migration's transaction, which
-- holds off writes to queue_jobs while it reads the table once (as 0006). Additive: an older binary's pushes
-- store priority 0, and its claims, in id order, still run (sorting the
-- ready jobs they read) during a rolling upgrade.
ALTER TABLE {p}queue_jobs ADD COLUMN priority smallint NOT NULL DEFAULT 0;
DROP INDEX {p}queue_jobs_ready;
CREATE INDEX {i}queue_jobs_ready ON {p}queue_jobs (queue, state, priority DESC, id);
