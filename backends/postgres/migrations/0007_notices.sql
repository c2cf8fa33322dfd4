-- 0007_notices: which failure events were notified.
-- min_binary: 0.1.0
--
-- One row per failure event (a failed cron run, a job moved to the dead
-- set) whose on_failure hook the leader delivered, keyed by the SHA-256 of
-- the event's id, and one per hook recording since when it is declared.
-- The next leader skips what is here, so an event is notified once across
-- the cluster. marked_at is the server's clock in microseconds; rows older
-- than a week are pruned, except those kept (keep = 1: when a hook was
-- first declared) by the daemons. Additive: older binaries never
-- read it.
CREATE TABLE {p}notices (
  id        text   NOT NULL PRIMARY KEY,
  marked_at bigint NOT NULL,
  keep      bigint NOT NULL DEFAULT 0
);
CREATE INDEX {i}notices_marked_at ON {p}notices (marked_at);
