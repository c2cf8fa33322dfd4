-- 0010_notices: which failure events were notified.
-- min_binary: 0.1.0
--
-- One row per failure event (a failed cron run, a job moved to the dead
-- set) whose on_failure hook the leader delivered, keyed by the SHA-256 of
-- the event's id, and one per hook recording since when it is declared.
-- The next leader skips what is here, so an event is notified once across
-- the cluster. marked_at is the server's clock in microseconds; rows older
-- than a week are pruned, except those kept (keep = 1: when a hook was
-- first declared) by the daemons (notices_marked_at). Additive:
-- older binaries never read it.
CREATE TABLE IF NOT EXISTS `{p}notices` (
  id        CHAR(64) NOT NULL,
  marked_at BIGINT   NOT NULL,
  keep      TINYINT  NOT NULL DEFAULT 0,
  PRIMARY KEY (id),
  KEY notices_marked_at (marked_at)
) ENGINE=InnoDB DEFAULT CHARSET=ascii COLLATE=ascii_bin;
