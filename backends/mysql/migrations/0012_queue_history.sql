-- 0012_queue_history: a job's failed attempts, and each queue's counts
-- per minute.
-- min_binary: 0.1.0
--
-- attempt_errors is a JSON array of the job's newest failed attempts
-- (attempt, at_us, worker, error), written by a retry: the queue
-- browser's record of every error, where last_error keeps only the last.
-- MEDIUMTEXT: ten errors of 5 KiB, escaped, pass TEXT's 64 KiB.
-- queue_counts holds what workers did with a queue's jobs per minute of
-- the server's clock (minute: its start in microseconds), added by the
-- workers every few seconds and pruned after a week. Additive: an older
-- binary never reads either, and its retries leave attempt_errors as it
-- was.
ALTER TABLE `{p}queue_jobs` ADD COLUMN attempt_errors MEDIUMTEXT NULL;
CREATE TABLE IF NOT EXISTS `{p}queue_counts` (
  queue     VARCHAR(255)   NOT NULL,
  minute    BIGINT         NOT NULL,
  processed BIGINT         NOT NULL DEFAULT 0,
  failed    BIGINT         NOT NULL DEFAULT 0,
  PRIMARY KEY (queue, minute),
  KEY queue_counts_minute (minute)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
