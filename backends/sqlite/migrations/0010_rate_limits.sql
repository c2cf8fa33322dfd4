-- 0010_rate_limits: rate limits and their theoretical arrival times.
-- min_binary: 0.1.0
--
-- rate_limits holds each limit's config as apply wrote it; a permit reads
-- the config in the statement that takes it. rate_tats holds one row per
-- limit and key (rkey '' for an unkeyed limit): tat is the theoretical
-- arrival time of the next permit in microseconds of the store's clock,
-- prev the tat before the last write (a permit was granted when the two
-- differ), at the clock of that write and iv and tol the interval and
-- tolerance ((burst - 1) x interval) it decided by. A row whose tat is in
-- the past grants what no row does, so the daemons prune those. Additive:
-- an older binary never reads either.
CREATE TABLE rate_limits (
  name        TEXT    NOT NULL PRIMARY KEY,
  count       INTEGER NOT NULL,
  per_us      INTEGER NOT NULL,
  interval_us INTEGER NOT NULL,
  burst       INTEGER NOT NULL,
  keyed       INTEGER NOT NULL DEFAULT 0
) STRICT;
CREATE TABLE rate_tats (
  name TEXT    NOT NULL,
  rkey TEXT    NOT NULL,
  tat  INTEGER NOT NULL,
  prev INTEGER NOT NULL,
  at   INTEGER NOT NULL,
  iv   INTEGER NOT NULL,
  tol  INTEGER NOT NULL,
  PRIMARY KEY (name, rkey)
) STRICT;
CREATE INDEX rate_tats_tat ON rate_tats (tat);
