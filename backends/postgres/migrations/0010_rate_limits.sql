-- 0010_rate_limits: rate limits and their theoretical arrival times.
-- min_binary: 0.1.0
--
-- rate_limits holds each limit's config as apply wrote it; a permit reads
-- the config in the statement that takes it. rate_tats holds one row per
-- limit and key (rkey '' for an unkeyed limit): tat is the theoretical
-- arrival time of the next permit in microseconds of the server's clock,
-- prev the tat before the last write (a permit was granted when the two
-- differ), at the clock of that write and iv and tol the interval and
-- tolerance ((burst - 1) x interval) it decided by. A row whose tat is in
-- the past grants what no row does, so the daemons prune those. Additive:
-- an older binary never reads either.
CREATE TABLE {p}rate_limits (
  name        text     NOT NULL PRIMARY KEY,
  count       bigint   NOT NULL,
  per_us      bigint   NOT NULL,
  interval_us bigint   NOT NULL,
  burst       bigint   NOT NULL,
  keyed       smallint NOT NULL DEFAULT 0
);
CREATE TABLE {p}rate_tats (
  name text   NOT NULL,
  rkey text   NOT NULL,
  tat  bigint NOT NULL,
  prev bigint NOT NULL,
  at   bigint NOT NULL,
  iv   bigint NOT NULL,
  tol  bigint NOT NULL,
  PRIMARY KEY (name, rkey)
);
CREATE INDEX {i}rate_tats_tat ON {p}rate_tats (tat);
