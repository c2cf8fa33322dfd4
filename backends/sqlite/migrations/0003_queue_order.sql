-- 0003_queue_order: indexes for the queue's claim order (issue 13).
-- min_binary: 0.1.0
--
-- A claim takes the oldest claimable jobs of the whole queue in id (push)
-- order, whatever their partition (queue_jobs_ready), and lets a job with a
-- key go only while no job of its key is running and none older is ready
-- (queue_jobs_key: two point lookups per keyed job). Additive: an older
-- binary claims by partition with queue_jobs_claim and never reads these.
-- queue_jobs_claim is no longer read by this version but stays: older
-- binaries name it (INDEXED BY) during a rolling upgrade.
CREATE INDEX IF NOT EXISTS queue_jobs_ready ON queue_jobs (queue, state, id);
CREATE INDEX IF NOT EXISTS queue_jobs_key ON queue_jobs (queue, unique_key, state, id) WHERE unique_key IS NOT NULL;
