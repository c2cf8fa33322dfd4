-- 0014_queue_push_once: the record of each push made once per key.
-- min_binary: 0.1.0
--
-- queue_once holds, per queue and once key (a cron task's push names its
-- task and scheduled time; VARBINARY so that keys compare byte for byte),
-- the id of the job that key pushed and when (µs of the server's clock):
-- a push with a recorded key pushes nothing and returns that id, so a
-- retried cron push never pushes twice. Rows are pruned after a week.
-- Additive: an older binary never reads it.
CREATE TABLE IF NOT EXISTS `{p}queue_once` (
  queue    VARCHAR(255)    NOT NULL,
  once_key VARBINARY(1020) NOT NULL,
  job_id   BIGINT          NOT NULL,
  at       BIGINT          NOT NULL,
  PRIMARY KEY (queue, once_key),
  KEY queue_once_at (at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
