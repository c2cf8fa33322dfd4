-- 0013_rate_limits: rate limits and their theoretical arrival times.
-- min_binary: 0.1.0
--
-- rate_limits holds each limit's config as apply wrote it; a permit reads
-- the config in the statement that takes it. rate_tats holds one row per
-- limit and key (rkey '' for an unkeyed limit; VARBINARY so that keys
-- compare byte for byte, as job keys do): tat is the theoretical arrival
-- time of the next permit in microseconds of the server's clock, prev the
-- tat before the last write (a permit was granted when the two differ), at
-- the clock of that write and iv and tol the interval and tolerance
-- ((burst - 1) x interval) it decided by. A row whose tat is in the past
-- grants what no row does, so the daemons prune those. Additive: an older
-- binary never reads either.
CREATE TABLE IF NOT EXISTS `{p}rate_limits` (
  name        VARCHAR(255) NOT NULL,
  count       BIGINT       NOT NULL,
  per_us      BIGINT       NOT NULL,
  interval_us BIGINT       NOT NULL,
  burst       BIGINT       NOT NULL,
  keyed       TINYINT      NOT NULL DEFAULT 0,
  PRIMARY KEY (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE TABLE IF NOT EXISTS `{p}rate_tats` (
  name VARCHAR(255)    NOT NULL,
  rkey VARBINARY(1020) NOT NULL,
  tat  BIGINT          NOT NULL,
  prev BIGINT          NOT NULL,
  at   BIGINT          NOT NULL,
  iv   BIGINT          NOT NULL,
  tol  BIGINT          NOT NULL,
  PRIMARY KEY (name, rkey),
  KEY rate_tats_tat (tat)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
