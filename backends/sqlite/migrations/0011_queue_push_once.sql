-- 0011_queue_push_once: the record of each push made once per key.
-- min_binary: 0.1.0
--
-- queue_once holds, per queue and once key (a cron task's push names its
-- task and scheduled time), the id of the job that key pushed and when
-- (µs of the store's clock): a push with a recorded key pushes nothing
-- and returns that id, so a retried cron push never pushes twice. Rows are
-- pruned after a week. Additive: an older binary never reads it.
CREATE TABLE queue_once (
  queue    TEXT    NOT NULL,
  once_key TEXT    NOT NULL,
  job_id   INTEGER NOT NULL,
  at       INTEGER NOT NULL,
  PRIMARY KEY (queue, once_key)
) STRICT;
CREATE INDEX queue_once_at ON queue_once (at);
