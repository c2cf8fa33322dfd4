-- 0001_init: the initial schema.
-- min_binary: 0.1.0
--
-- Every table name starts with {p}, replaced by the backend's table_prefix
-- (validated as ^[a-zA-Z0-9_]{0,32}$ by the spec loader). All times are
-- BIGINT microseconds since the Unix epoch, UTC, read from the server's
-- UTC_TIMESTAMP(6) (see doc.go). Durations of stored config are BIGINT
-- nanoseconds (*_ns) so they round-trip exactly. Every table is InnoDB with a
-- binary collation: names and owner tokens compare byte for byte.
-- MariaDB DDL is not transactional, so every statement is CREATE ... IF NOT
-- EXISTS with its indexes inline: a migration cut short is simply re-run.
-- Tables for cron tasks and queues are created here so that later releases
-- add code only.

-- semaphores holds one row per semaphore: its config and the fencing counter
-- that every grant bumps. lim is the effective limit (0 while draining).
CREATE TABLE IF NOT EXISTS `{p}semaphores` (
  name        VARCHAR(255) NOT NULL,
  lim         INT          NOT NULL,
  lease_ns    BIGINT       NOT NULL,
  mode        VARCHAR(32)  NOT NULL,
  wake        VARCHAR(32)  NOT NULL DEFAULT '',
  max_waiting INT          NOT NULL DEFAULT -1,
  max_hold_ns BIGINT       NOT NULL DEFAULT 0,
  fencing     BIGINT       NOT NULL DEFAULT 0,
  PRIMARY KEY (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- semaphore_slots holds max(lim, live holders) rows per semaphore (the lock
-- rows). A slot is live when state = 'LOCK' and expires_at > now; a free slot
-- has state 'FREE' and owner NULL.
CREATE TABLE IF NOT EXISTS `{p}semaphore_slots` (
  name        VARCHAR(255) NOT NULL,
  slot        INT          NOT NULL,
  state       VARCHAR(4)   NOT NULL DEFAULT 'FREE',
  owner       VARCHAR(255) NULL,
  host        VARCHAR(255) NOT NULL DEFAULT '',
  pid         INT          NOT NULL DEFAULT 0,
  fencing     BIGINT       NOT NULL DEFAULT 0,
  acquired_at BIGINT       NOT NULL DEFAULT 0,
  expires_at  BIGINT       NOT NULL DEFAULT 0,
  PRIMARY KEY (name, slot),
  KEY semaphore_slots_owner (name, owner)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- semaphore_waiters orders waiters FIFO by seq and bounds them (max_waiting).
CREATE TABLE IF NOT EXISTS `{p}semaphore_waiters` (
  name       VARCHAR(255) NOT NULL,
  owner      VARCHAR(255) NOT NULL,
  seq        BIGINT       NOT NULL,
  expires_at BIGINT       NOT NULL,
  PRIMARY KEY (name, owner),
  KEY semaphore_waiters_seq (name, seq)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- leader is the single-row leader lease; term only ever grows.
CREATE TABLE IF NOT EXISTS `{p}leader` (
  id         TINYINT      NOT NULL,
  holder     VARCHAR(255) NOT NULL,
  term       BIGINT       NOT NULL,
  expires_at BIGINT       NOT NULL,
  PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- cron_tasks holds each task's applied definition (canonical JSON), the next
-- scheduled time (NULL: none) and the per-task fencing counter.
CREATE TABLE IF NOT EXISTS `{p}cron_tasks` (
  name      VARCHAR(255) NOT NULL,
  def       MEDIUMTEXT   NOT NULL,
  next_exec BIGINT       NULL,
  exec_by   VARCHAR(255) NOT NULL DEFAULT '',
  updated   BIGINT       NOT NULL,
  fencing   BIGINT       NOT NULL DEFAULT 0,
  PRIMARY KEY (name),
  KEY cron_tasks_next_exec (next_exec)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- cron_occurrences has one row per attempt of one scheduled time of a task
-- (no foreign key: deleting a task keeps running occurrences and history).
CREATE TABLE IF NOT EXISTS `{p}cron_occurrences` (
  task         VARCHAR(255) NOT NULL,
  scheduled_at BIGINT       NOT NULL,
  attempt      INT          NOT NULL,
  run_id       VARCHAR(64)  NOT NULL,
  fencing      BIGINT       NOT NULL,
  manual       TINYINT      NOT NULL DEFAULT 0,
  owner        VARCHAR(255) NOT NULL,
  host         VARCHAR(255) NOT NULL,
  status       VARCHAR(16)  NOT NULL,
  started_at   BIGINT       NOT NULL,
  expires_at   BIGINT       NOT NULL,
  finished_at  BIGINT       NULL,
  exit_code    INT          NULL,
  error        TEXT         NULL,
  output       MEDIUMBLOB   NULL,
  PRIMARY KEY (task, scheduled_at, attempt),
  KEY cron_occurrences_status (status, expires_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- queues holds each queue's config (JSON) and its partition count.
CREATE TABLE IF NOT EXISTS `{p}queues` (
  name       VARCHAR(255) NOT NULL,
  partitions INT          NOT NULL,
  config     MEDIUMTEXT   NOT NULL,
  PRIMARY KEY (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- queue_partitions is the lock row of each partition of a partitioned queue;
-- claimed_at is when Claim last served it (least recently served first).
CREATE TABLE IF NOT EXISTS `{p}queue_partitions` (
  queue      VARCHAR(255) NOT NULL,
  `partition` INT         NOT NULL,
  owner      VARCHAR(255) NULL,
  expires_at BIGINT       NOT NULL DEFAULT 0,
  claimed_at BIGINT       NOT NULL DEFAULT 0,
  PRIMARY KEY (queue, `partition`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- queue_jobs holds every job; id gives insert order and is never reused.
CREATE TABLE IF NOT EXISTS `{p}queue_jobs` (
  id           BIGINT       NOT NULL AUTO_INCREMENT,
  queue        VARCHAR(255) NOT NULL,
  `partition`  INT          NOT NULL,
  payload      LONGBLOB     NOT NULL,
  unique_key   VARCHAR(255) NULL,
  attempt      INT          NOT NULL DEFAULT 0,
  state        VARCHAR(8)   NOT NULL,
  available_at BIGINT       NOT NULL,
  owner        VARCHAR(255) NULL,
  expires_at   BIGINT       NOT NULL DEFAULT 0,
  enqueued_at  BIGINT       NOT NULL,
  last_error   TEXT         NOT NULL,
  PRIMARY KEY (id),
  KEY queue_jobs_claim (queue, `partition`, state, id),
  KEY queue_jobs_unique (queue, unique_key),
  KEY queue_jobs_state (queue, state, available_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- inventory is the applied state: one row per managed object.
CREATE TABLE IF NOT EXISTS `{p}inventory` (
  kind         VARCHAR(32)  NOT NULL,
  name         VARCHAR(255) NOT NULL,
  backend      VARCHAR(255) NOT NULL,
  backend_type VARCHAR(32)  NOT NULL,
  spec         MEDIUMTEXT   NOT NULL,
  status       VARCHAR(16)  NOT NULL,
  previous     MEDIUMTEXT   NULL,
  generation   BIGINT       NOT NULL,
  PRIMARY KEY (kind, name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- apply_log records every apply; generation only ever grows.
CREATE TABLE IF NOT EXISTS `{p}apply_log` (
  generation BIGINT       NOT NULL,
  spec_hash  VARCHAR(128) NOT NULL,
  host       VARCHAR(255) NOT NULL,
  at         BIGINT       NOT NULL,
  summary    TEXT         NOT NULL,
  PRIMARY KEY (generation),
  KEY apply_log_hash (spec_hash, generation)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- apply_lock is the single-row apply lock.
CREATE TABLE IF NOT EXISTS `{p}apply_lock` (
  id         TINYINT      NOT NULL,
  owner      VARCHAR(255) NOT NULL,
  expires_at BIGINT       NOT NULL,
  PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
