-- 0005_keyed_semaphores: instances of keyed semaphores (issue 13).
-- min_binary: 0.1.0
--
-- A keyed semaphore (semaphores.keyed = 1) holds no slot row of its own:
-- each key given at run time is an instance whose holders and waiters are
-- rows of the two tables below, under the semaphore's row (its config and
-- its fencing counter, whose row lock serialises the instances' changes).
-- An instance is nothing but its rows: the first acquire or wait of a key
-- inserts one, and the release or leave that removes the last one leaves
-- nothing of the instance behind. A holder row exists only while held
-- (there are no free slot rows): its slot is the lowest number its
-- instance does not use. Rows whose lease expired are deleted by the next
-- acquire or wait on any instance of the semaphore (the _exp keys make that
-- a range read). ikey is the key itself, as bytes: spec.CheckKey bounds it
-- to 255 bytes, so it fits VARBINARY(255) and no hashing is needed, and a
-- binary string compares every byte (utf8mb4_bin pads with spaces, so "a"
-- and "a " would be one instance). Additive: an older binary never reads
-- these tables, and sees a keyed semaphore as one without slot rows. ADD
-- COLUMN is not idempotent on MySQL 8; a re-run that finds it is skipped by
-- Migrate (error 1060).
ALTER TABLE `{p}semaphores` ADD COLUMN keyed TINYINT NOT NULL DEFAULT 0;

CREATE TABLE IF NOT EXISTS `{p}semaphore_instance_slots` (
  name        VARCHAR(255) NOT NULL,
  ikey        VARBINARY(255) NOT NULL,
  slot        INT          NOT NULL,
  owner       VARCHAR(255) NOT NULL,
  host        VARCHAR(255) NOT NULL DEFAULT '',
  pid         INT          NOT NULL DEFAULT 0,
  fencing     BIGINT       NOT NULL,
  acquired_at BIGINT       NOT NULL,
  expires_at  BIGINT       NOT NULL,
  PRIMARY KEY (name, ikey, slot),
  UNIQUE KEY semaphore_instance_slots_owner (name, ikey, owner),
  KEY semaphore_instance_slots_exp (name, expires_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS `{p}semaphore_instance_waiters` (
  name       VARCHAR(255) NOT NULL,
  ikey       VARBINARY(255) NOT NULL,
  owner      VARCHAR(255) NOT NULL,
  seq        BIGINT       NOT NULL,
  expires_at BIGINT       NOT NULL,
  PRIMARY KEY (name, ikey, owner),
  KEY semaphore_instance_waiters_seq (name, ikey, seq),
  KEY semaphore_instance_waiters_exp (name, expires_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
