-- 0013_queue_jobs_ready_partial: fewer index entries written per job.
-- min_binary: 0.1.0
--
-- PostgreSQL writes a new entry into every index of queue_jobs on each
-- push and on each claim (the claim changes state, an indexed column, so
-- the update is never HOT): measured in a drain, those index writes were
-- most of a claim's server time. Two indexes go:
--
--   - queue_jobs_claim (queue, partition, state, id) no statement of this
--     store needs: claims take jobs whatever their partition, and moving
--     the jobs of removed partitions (a rare PutQueue) finds the queue's
--     jobs through queue_jobs_state;
--   - queue_jobs_ready becomes partial, (queue, priority DESC, id) of the
--     ready jobs only: the claim walks it in claim order as before (its
--     statement names state = 'ready'), and a claim no longer adds the
--     running job to it.
--
-- A push now writes three index entries (four before), a claim three (five
-- before). Built inside the migration's transaction, which holds off writes
-- to queue_jobs while it reads the table once (as 0006). An older binary's
-- statements name state = 'ready' too, so they keep their plans during a
-- rolling upgrade. IF EXISTS: a store whose index was dropped by hand
-- migrates all the same.
DROP INDEX IF EXISTS {p}queue_jobs_claim;
DROP INDEX {p}queue_jobs_ready;
CREATE INDEX {i}queue_jobs_ready ON {p}queue_jobs (queue, priority DESC, id) WHERE state = 'ready';
