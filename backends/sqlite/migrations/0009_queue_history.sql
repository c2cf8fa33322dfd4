-- 0009_queue_history: a job's failed attempts, and each queue's counts
-- per minute.
-- min_binary: 0.1.0
--
-- attempt_errors is a JSON array of the job's newest failed attempts
-- (attempt, at_us, worker, error), written by a retry: the queue
-- browser's record of every error, where last_error keeps only the last.
-- queue_counts holds what workers did with a queue's jobs per minute of
-- the store's clock (minute: its start in microseconds), added by the
-- workers every few seconds and pruned after a week. Additive: an older
-- binary never reads either, and its retries leave attempt_errors as it
-- was.
ALTER TABLE queue_jobs ADD COLUMN attempt_errors TEXT NOT NULL DEFAULT '';
CREATE TABLE queue_counts (
  queue     TEXT    NOT NULL,
  minute    INTEGER NOT NULL,
  processed INTEGER NOT NULL DEFAULT 0,
  failed    INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (queue, minute)
) STRICT;
CREATE INDEX queue_counts_minute ON queue_counts (minute);
