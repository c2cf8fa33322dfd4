-- 0011_queue_push_once: the record of each push made once per key.
-- min_binary: 0.1.0
--
-- queue_once holds, per queue and once key (a cron task's push names its
-- task and scheduled time), the id of the job that key pushed and when
-- (µs of the server's clock): a push with a recorded key pushes nothing
-- and returns that id, so a retried cron push never pushes twice. Rows are
-- pruned after a week. Additive: an older binary never reads it.
CREATE TABLE {p}queue_once (
  queue    text   NOT NULL,
  once_key text   NOT NULL,
  job_id   bigint NOT NULL,
  at       bigint NOT NULL,
  PRIMARY KEY (queue, once_key)
);
CREATE INDEX {i}queue_once_at ON {p}queue_once (at);
