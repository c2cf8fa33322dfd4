-- 0001_init: the initial schema.
-- min_binary: 0.1.0
--
-- All times are INTEGER microseconds since the Unix epoch, UTC, read from the
-- clock of the host that holds the file (see doc.go). Durations of stored
-- config are INTEGER nanoseconds (*_ns) so they round-trip exactly.
-- Tables for waiters, the leader lease, cron occurrences and the queue runtime
-- are created here so that the runtime needs no migration of its own.

-- semaphores holds one row per semaphore: its config and the fencing counter
-- that every grant bumps. lim is the effective limit (0 while draining).
CREATE TABLE semaphores (
  name        TEXT    NOT NULL PRIMARY KEY,
  lim         INTEGER NOT NULL CHECK (lim >= 0),
  lease_ns    INTEGER NOT NULL,
  mode        TEXT    NOT NULL,
  wake        TEXT    NOT NULL DEFAULT '',
  max_waiting INTEGER NOT NULL DEFAULT -1,
  max_hold_ns INTEGER NOT NULL DEFAULT 0,
  fencing     INTEGER NOT NULL DEFAULT 0
) STRICT;

-- semaphore_slots holds max(lim, live holders) rows per semaphore. A slot is
-- live when owner is set and expires_at > now; a free slot has owner NULL.
CREATE TABLE semaphore_slots (
  name        TEXT    NOT NULL REFERENCES semaphores (name) ON DELETE CASCADE,
  slot        INTEGER NOT NULL CHECK (slot >= 0),
  owner       TEXT,
  host        TEXT    NOT NULL DEFAULT '',
  pid         INTEGER NOT NULL DEFAULT 0,
  fencing     INTEGER NOT NULL DEFAULT 0,
  acquired_at INTEGER NOT NULL DEFAULT 0,
  expires_at  INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (name, slot)
) STRICT, WITHOUT ROWID;

-- semaphore_waiters orders waiters FIFO by seq and bounds them (max_waiting).
CREATE TABLE semaphore_waiters (
  name       TEXT    NOT NULL REFERENCES semaphores (name) ON DELETE CASCADE,
  owner      TEXT    NOT NULL,
  seq        INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,
  PRIMARY KEY (name, owner)
) STRICT;
CREATE INDEX semaphore_waiters_seq ON semaphore_waiters (name, seq);

-- leader is the single-row leader lease; term only ever grows.
CREATE TABLE leader (
  id         INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
  holder     TEXT    NOT NULL,
  term       INTEGER NOT NULL,
  expires_at INTEGER NOT NULL
) STRICT;

-- cron_tasks holds each task's applied definition (canonical JSON) and the
-- next scheduled time (NULL: none). exec_by names the host that claimed the
-- last occurrence. fencing is the counter that every claimed occurrence
-- bumps (scheduled, manual, retry or skipped), so occurrence fencing numbers
-- are strictly increasing per task.
CREATE TABLE cron_tasks (
  name      TEXT    NOT NULL PRIMARY KEY,
  def       TEXT    NOT NULL,
  next_exec INTEGER,
  exec_by   TEXT    NOT NULL DEFAULT '',
  updated   INTEGER NOT NULL,
  fencing   INTEGER NOT NULL DEFAULT 0
) STRICT;
CREATE INDEX cron_tasks_next_exec ON cron_tasks (next_exec);

-- cron_occurrences has one row per attempt of one scheduled time of a task.
-- It has no foreign key on purpose: deleting a task lets running occurrences
-- finish and keeps their history. run_id is random per row; manual is 1 for
-- `coordd cron run` (scheduled_at is then the backend time of the claim);
-- output is the tail (at most 64 KiB) of the run's stdout and stderr. A
-- skipped occurrence is inserted finished, with expires_at = started_at.
CREATE TABLE cron_occurrences (
  task         TEXT    NOT NULL,
  scheduled_at INTEGER NOT NULL,
  attempt      INTEGER NOT NULL CHECK (attempt >= 1),
  run_id       TEXT    NOT NULL,
  fencing      INTEGER NOT NULL,
  manual       INTEGER NOT NULL DEFAULT 0,
  owner        TEXT    NOT NULL,
  host         TEXT    NOT NULL,
  status       TEXT    NOT NULL,
  started_at   INTEGER NOT NULL,
  expires_at   INTEGER NOT NULL,
  finished_at  INTEGER,
  exit_code    INTEGER,
  error        TEXT,
  output       BLOB,
  UNIQUE (task, scheduled_at, attempt)
) STRICT;
CREATE INDEX cron_occurrences_status ON cron_occurrences (status, expires_at);

-- queues holds each queue's config (JSON) and, as a column, its partition
-- count so that observe can compare against it in SQL.
CREATE TABLE queues (
  name       TEXT    NOT NULL PRIMARY KEY,
  partitions INTEGER NOT NULL CHECK (partitions >= 1),
  config     TEXT    NOT NULL
) STRICT;

-- queue_partitions is the lock row of each partition of a partitioned queue.
CREATE TABLE queue_partitions (
  queue      TEXT    NOT NULL,
  partition  INTEGER NOT NULL,
  owner      TEXT,
  expires_at INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (queue, partition)
) STRICT, WITHOUT ROWID;

-- queue_jobs holds every job; id gives insert order and is never reused.
CREATE TABLE queue_jobs (
  id           INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
  queue        TEXT    NOT NULL,
  partition    INTEGER NOT NULL,
  payload      BLOB    NOT NULL,
  unique_key   TEXT,
  attempt      INTEGER NOT NULL DEFAULT 0,
  state        TEXT    NOT NULL CHECK (state IN ('ready', 'running', 'dead')),
  available_at INTEGER NOT NULL,
  owner        TEXT,
  expires_at   INTEGER NOT NULL DEFAULT 0,
  enqueued_at  INTEGER NOT NULL,
  last_error   TEXT    NOT NULL DEFAULT ''
) STRICT;
CREATE INDEX queue_jobs_claim ON queue_jobs (queue, partition, state, id);
CREATE INDEX queue_jobs_unique ON queue_jobs (queue, unique_key) WHERE unique_key IS NOT NULL;

-- inventory is the applied state: one row per managed object.
CREATE TABLE inventory (
  kind         TEXT    NOT NULL,
  name         TEXT    NOT NULL,
  backend      TEXT    NOT NULL,
  backend_type TEXT    NOT NULL,
  spec         TEXT    NOT NULL,
  status       TEXT    NOT NULL,
  previous     TEXT,
  generation   INTEGER NOT NULL,
  PRIMARY KEY (kind, name)
) STRICT, WITHOUT ROWID;

-- apply_log records every apply; generation only ever grows.
CREATE TABLE apply_log (
  generation INTEGER NOT NULL PRIMARY KEY,
  spec_hash  TEXT    NOT NULL,
  host       TEXT    NOT NULL,
  at         INTEGER NOT NULL,
  summary    TEXT    NOT NULL
) STRICT;

-- apply_lock is the single-row apply lock.
CREATE TABLE apply_lock (
  id         INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
  owner      TEXT    NOT NULL,
  expires_at INTEGER NOT NULL
) STRICT;

-- queue runtime
-- claimed_at is when Claim last served the partition: Claim serves the least
-- recently claimed partition that has a claimable job, so none starves.
ALTER TABLE queue_partitions ADD COLUMN claimed_at INTEGER NOT NULL DEFAULT 0;
-- queue_jobs_state serves the visibility sweep, WaitQueue's poll and the
-- dead set without walking every partition.
CREATE INDEX queue_jobs_state ON queue_jobs (queue, state, available_at);
