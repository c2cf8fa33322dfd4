-- 0001_init: the initial schema.
-- min_binary: 0.1.0
--
-- Every table name starts with {p}, replaced by the schema and the
-- table_prefix ("schema"."prefixname", quoted); every index name starts
-- with {i}, replaced by the prefix alone (an index lives in its table's
-- schema). All times are bigint microseconds since the Unix epoch, UTC,
-- read from the server's clock (statement_timestamp(), see doc.go).
-- Durations of stored config are bigint nanoseconds (*_ns) so they
-- round-trip exactly. Every migration runs in one transaction with the
-- others pending and their schema_migrations rows (PostgreSQL's DDL is
-- transactional): a failed one leaves nothing behind. Integers are bigint
-- throughout, so that the shared SQL never mixes integer widths.

-- semaphores holds one row per semaphore: its config and the fencing counter
-- that every grant bumps. lim is the effective limit (0 while draining).
-- keyed is 1 for a keyed semaphore, whose instances live in the
-- semaphore_instance_ tables.
CREATE TABLE {p}semaphores (
  name        text   NOT NULL PRIMARY KEY,
  lim         bigint NOT NULL CHECK (lim >= 0),
  lease_ns    bigint NOT NULL,
  mode        text   NOT NULL,
  wake        text   NOT NULL DEFAULT '',
  max_waiting bigint NOT NULL DEFAULT -1,
  max_hold_ns bigint NOT NULL DEFAULT 0,
  fencing     bigint NOT NULL DEFAULT 0,
  keyed       bigint NOT NULL DEFAULT 0
);

-- semaphore_slots holds max(lim, live holders) rows per semaphore. A slot is
-- live when owner is set and expires_at > now; a free slot has owner NULL.
CREATE TABLE {p}semaphore_slots (
  name        text   NOT NULL REFERENCES {p}semaphores (name) ON DELETE CASCADE,
  slot        bigint NOT NULL CHECK (slot >= 0),
  owner       text,
  host        text   NOT NULL DEFAULT '',
  pid         bigint NOT NULL DEFAULT 0,
  fencing     bigint NOT NULL DEFAULT 0,
  acquired_at bigint NOT NULL DEFAULT 0,
  expires_at  bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (name, slot)
);

-- semaphore_waiters orders waiters FIFO by seq and bounds them
-- (max_waiting); host, pid and since say who waits since when.
CREATE TABLE {p}semaphore_waiters (
  name       text   NOT NULL REFERENCES {p}semaphores (name) ON DELETE CASCADE,
  owner      text   NOT NULL,
  seq        bigint NOT NULL,
  expires_at bigint NOT NULL,
  host       text   NOT NULL DEFAULT '',
  pid        bigint NOT NULL DEFAULT 0,
  since      bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (name, owner)
);
CREATE INDEX {i}semaphore_waiters_seq ON {p}semaphore_waiters (name, seq);

-- The holders and waiters of each instance (key) of a keyed semaphore. An
-- instance is nothing but its rows: the first acquire or wait of a key
-- inserts one, the release or leave that removes the last one leaves
-- nothing behind. A holder row exists only while held; its slot is the
-- lowest number its instance does not use.
CREATE TABLE {p}semaphore_instance_slots (
  name        text   NOT NULL REFERENCES {p}semaphores (name) ON DELETE CASCADE,
  ikey        text   NOT NULL,
  slot        bigint NOT NULL CHECK (slot >= 0),
  owner       text   NOT NULL,
  host        text   NOT NULL DEFAULT '',
  pid         bigint NOT NULL DEFAULT 0,
  fencing     bigint NOT NULL,
  acquired_at bigint NOT NULL,
  expires_at  bigint NOT NULL,
  PRIMARY KEY (name, ikey, slot)
);
CREATE UNIQUE INDEX {i}semaphore_instance_slots_owner ON {p}semaphore_instance_slots (name, ikey, owner);
CREATE INDEX {i}semaphore_instance_slots_exp ON {p}semaphore_instance_slots (name, expires_at);

CREATE TABLE {p}semaphore_instance_waiters (
  name       text   NOT NULL REFERENCES {p}semaphores (name) ON DELETE CASCADE,
  ikey       text   NOT NULL,
  owner      text   NOT NULL,
  seq        bigint NOT NULL,
  expires_at bigint NOT NULL,
  host       text   NOT NULL DEFAULT '',
  pid        bigint NOT NULL DEFAULT 0,
  since      bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (name, ikey, owner)
);
CREATE INDEX {i}semaphore_instance_waiters_seq ON {p}semaphore_instance_waiters (name, ikey, seq);
CREATE INDEX {i}semaphore_instance_waiters_exp ON {p}semaphore_instance_waiters (name, expires_at);

-- leader is the single-row leader lease; term only ever grows.
CREATE TABLE {p}leader (
  id         bigint NOT NULL PRIMARY KEY CHECK (id = 1),
  holder     text   NOT NULL,
  term       bigint NOT NULL,
  expires_at bigint NOT NULL
);

-- cron_tasks holds each task's applied definition (canonical JSON) and the
-- next scheduled time (NULL: none). exec_by names the host that claimed the
-- last occurrence. fencing is the counter every claimed occurrence bumps.
-- paused_at (NULL: not paused), paused_by and paused_reason record an
-- operator's pause, kept apart from def so that apply keeps it.
CREATE TABLE {p}cron_tasks (
  name          text   NOT NULL PRIMARY KEY,
  def           text   NOT NULL,
  next_exec     bigint,
  exec_by       text   NOT NULL DEFAULT '',
  updated       bigint NOT NULL,
  fencing       bigint NOT NULL DEFAULT 0,
  paused_at     bigint,
  paused_by     text   NOT NULL DEFAULT '',
  paused_reason text   NOT NULL DEFAULT ''
);
CREATE INDEX {i}cron_tasks_next_exec ON {p}cron_tasks (next_exec);

-- cron_occurrences has one row per attempt of one scheduled time of a task.
-- No foreign key on purpose: deleting a task lets running occurrences
-- finish and keeps their history. manual is 1 for `coordd cron run`;
-- output is the tail of the run's stdout and stderr.
CREATE TABLE {p}cron_occurrences (
  task         text   NOT NULL,
  scheduled_at bigint NOT NULL,
  attempt      bigint NOT NULL CHECK (attempt >= 1),
  run_id       text   NOT NULL,
  fencing      bigint NOT NULL,
  manual       bigint NOT NULL DEFAULT 0,
  owner        text   NOT NULL,
  host         text   NOT NULL,
  status       text   NOT NULL,
  started_at   bigint NOT NULL,
  expires_at   bigint NOT NULL,
  finished_at  bigint,
  exit_code    bigint,
  error        text,
  output       bytea,
  UNIQUE (task, scheduled_at, attempt)
);
CREATE INDEX {i}cron_occurrences_status ON {p}cron_occurrences (status, expires_at);

-- queues holds each queue's config (JSON) and its partition count.
CREATE TABLE {p}queues (
  name       text   NOT NULL PRIMARY KEY,
  partitions bigint NOT NULL CHECK (partitions >= 1),
  config     text   NOT NULL
);

-- queue_partitions is the lock row of each partition of a partitioned
-- queue; claimed_at is when a claim last served it, so that none starves.
CREATE TABLE {p}queue_partitions (
  queue      text   NOT NULL,
  "partition" bigint NOT NULL,
  owner      text,
  expires_at bigint NOT NULL DEFAULT 0,
  claimed_at bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (queue, "partition")
);

-- queue_jobs holds every job; id gives push order and is never reused.
CREATE TABLE {p}queue_jobs (
  id           bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
  queue        text   NOT NULL,
  "partition"  bigint NOT NULL,
  payload      bytea  NOT NULL,
  unique_key   text,
  attempt      bigint NOT NULL DEFAULT 0,
  state        text   NOT NULL CHECK (state IN ('ready', 'running', 'dead')),
  available_at bigint NOT NULL,
  owner        text,
  expires_at   bigint NOT NULL DEFAULT 0,
  enqueued_at  bigint NOT NULL,
  last_error   text   NOT NULL DEFAULT ''
);
CREATE INDEX {i}queue_jobs_claim ON {p}queue_jobs (queue, "partition", state, id);
CREATE INDEX {i}queue_jobs_unique ON {p}queue_jobs (queue, unique_key) WHERE unique_key IS NOT NULL;
CREATE INDEX {i}queue_jobs_state ON {p}queue_jobs (queue, state, available_at);
CREATE INDEX {i}queue_jobs_ready ON {p}queue_jobs (queue, state, id);
CREATE INDEX {i}queue_jobs_key ON {p}queue_jobs (queue, unique_key, state, id) WHERE unique_key IS NOT NULL;

-- inventory is the applied state: one row per managed object.
CREATE TABLE {p}inventory (
  kind         text   NOT NULL,
  name         text   NOT NULL,
  backend      text   NOT NULL,
  backend_type text   NOT NULL,
  spec         text   NOT NULL,
  status       text   NOT NULL,
  previous     text,
  generation   bigint NOT NULL,
  PRIMARY KEY (kind, name)
);

-- apply_log records every apply; generation only ever grows.
CREATE TABLE {p}apply_log (
  generation bigint NOT NULL PRIMARY KEY,
  spec_hash  text   NOT NULL,
  host       text   NOT NULL,
  at         bigint NOT NULL,
  summary    text   NOT NULL
);

-- apply_lock is the single-row apply lock.
CREATE TABLE {p}apply_lock (
  id         bigint NOT NULL PRIMARY KEY CHECK (id = 1),
  owner      text   NOT NULL,
  expires_at bigint NOT NULL
);

-- hosts: one row per host id, what its daemon runs and when the store last
-- heard from it. Informational only (coordd status, /metrics).
CREATE TABLE {p}hosts (
  host         text   NOT NULL PRIMARY KEY,
  run_id       text   NOT NULL,
  pid          bigint NOT NULL DEFAULT 0,
  version      text   NOT NULL DEFAULT '',
  spec_hash    text   NOT NULL DEFAULT '',
  heartbeat_ns bigint NOT NULL DEFAULT 0,
  stopped      bigint NOT NULL DEFAULT 0,
  started_at   bigint NOT NULL,
  last_seen    bigint NOT NULL
);
CREATE INDEX {i}hosts_last_seen ON {p}hosts (last_seen);
