-- 0004_queue_order: indexes for the queue's claim order (issue 13).
-- min_binary: 0.1.0
--
-- A claim of mode partition takes the oldest claimable jobs of the whole
-- queue in id (push) order, whatever their partition (queue_jobs_ready),
-- and lets a job with a key go only while no job of its key is running and
-- none older is ready (queue_jobs_key: two point lookups per keyed job).
-- Additive: an older binary claims by partition with queue_jobs_claim and
-- never reads these; queue_jobs_claim stays, since older binaries name it
-- (FORCE INDEX) during a rolling upgrade. ADD KEY is not idempotent on
-- MySQL 8 (no IF NOT EXISTS); a re-run that finds the key is skipped by
-- Migrate (error 1061), hence one key per statement.
ALTER TABLE `{p}queue_jobs` ADD KEY queue_jobs_ready (queue, state, id);
ALTER TABLE `{p}queue_jobs` ADD KEY queue_jobs_key (queue, unique_key, state, id);
