-- 0004_keyed_semaphores: instances of keyed semaphores (issue 13).
-- min_binary: 0.1.0
--
-- A keyed semaphore (semaphores.keyed = 1) holds no slot row of its own:
-- each key given at run time is an instance whose holders and waiters are
-- rows of the two tables below, under the semaphore's row (its config and
-- its fencing counter). An instance is nothing but its rows: the first
-- acquire or wait of a key inserts one, and the release or leave that
-- removes the last one leaves nothing of the instance behind. A holder row
-- exists only while held (there are no free slot rows): its slot is the
-- lowest number its instance does not use. Rows whose lease expired are
-- deleted by the next acquire or wait on any instance of the semaphore
-- (the _exp indexes make that a range read). Additive: an older binary
-- never reads these tables, and sees a keyed semaphore as one without slot
-- rows.
ALTER TABLE semaphores ADD COLUMN keyed INTEGER NOT NULL DEFAULT 0;

CREATE TABLE semaphore_instance_slots (
  name        TEXT    NOT NULL REFERENCES semaphores (name) ON DELETE CASCADE,
  ikey        TEXT    NOT NULL,
  slot        INTEGER NOT NULL CHECK (slot >= 0),
  owner       TEXT    NOT NULL,
  host        TEXT    NOT NULL DEFAULT '',
  pid         INTEGER NOT NULL DEFAULT 0,
  fencing     INTEGER NOT NULL,
  acquired_at INTEGER NOT NULL,
  expires_at  INTEGER NOT NULL,
  PRIMARY KEY (name, ikey, slot)
) STRICT, WITHOUT ROWID;
CREATE UNIQUE INDEX semaphore_instance_slots_owner ON semaphore_instance_slots (name, ikey, owner);
CREATE INDEX semaphore_instance_slots_exp ON semaphore_instance_slots (name, expires_at);

CREATE TABLE semaphore_instance_waiters (
  name       TEXT    NOT NULL REFERENCES semaphores (name) ON DELETE CASCADE,
  ikey       TEXT    NOT NULL,
  owner      TEXT    NOT NULL,
  seq        INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,
  PRIMARY KEY (name, ikey, owner)
) STRICT;
CREATE INDEX semaphore_instance_waiters_seq ON semaphore_instance_waiters (name, ikey, seq);
CREATE INDEX semaphore_instance_waiters_exp ON semaphore_instance_waiters (name, expires_at);
