-- 0002_session: semaphores of mode session (seed 000's GET_LOCK slots).
-- min_binary: 0.1.0
--
-- A session semaphore's slots are named locks (GET_LOCK) held by the
-- holders' connections, not rows; see session.go. session_slots is the
-- number of slot locks that may be held: max(lim, highest held slot + 1).
-- It is above lim only while holders admitted under a higher limit remain.
-- session_holders is a JSON object describing who took each slot, keyed by
-- slot number: {"fencing", "conn" (connection id), "owner", "host", "pid",
-- "at"}. It is written with the fencing number in one statement and never
-- cleared: the lock itself, not this record, says whether a slot is held,
-- and a record is current while its conn equals IS_USED_LOCK of the slot.
-- ADD COLUMN is not idempotent on MySQL 8 (no IF NOT EXISTS); a re-run that
-- finds the column is skipped by Migrate (error 1060).
ALTER TABLE `{p}semaphores` ADD COLUMN session_slots INT NOT NULL DEFAULT 0;
ALTER TABLE `{p}semaphores` ADD COLUMN session_holders MEDIUMTEXT NULL;
