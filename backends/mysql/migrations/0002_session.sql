-- 0002_session: semaphores of mode session (seed 000's GET_LOCK slots).
-- min_binary: 0.1.0
--
-- A session semaphore's slots are named locks (GET_LOCK) held by the
-- holders' connections, not rows; see session.go. session_slots is the
-- number of slot locks that may be held: max(lim, highest held slot + 1).
-- It is above lim only while holders admitted under a higher limit remain.
-- ADD COLUMN is not idempotent on MySQL 8 (no IF NOT EXISTS); a re-run that
-- finds the column is skipped by Migrate (error 1060).
ALTER TABLE `{p}semaphores` ADD COLUMN session_slots INT NOT NULL DEFAULT 0;

-- semaphore_sessions describes who holds each session slot: written when a
-- holder takes the slot and never cleared, since the lock itself (not this
-- row) says whether it is held. A row is current while conn_id equals
-- IS_USED_LOCK of the slot's lock name.
CREATE TABLE IF NOT EXISTS `{p}semaphore_sessions` (
  name        VARCHAR(255) NOT NULL,
  slot        INT          NOT NULL,
  conn_id     BIGINT       NOT NULL,
  owner       VARCHAR(255) NOT NULL,
  host        VARCHAR(255) NOT NULL,
  pid         INT          NOT NULL,
  fencing     BIGINT       NOT NULL,
  acquired_at BIGINT       NOT NULL,
  PRIMARY KEY (name, slot)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
