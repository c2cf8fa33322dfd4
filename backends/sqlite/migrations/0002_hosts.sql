-- 0002_hosts: the host registry (issue 7).
-- min_binary: 0.1.0
--
-- One row per host id: what its daemon runs and when the store last heard
-- from it. Informational only (coordd status, /metrics); nothing decides
-- correctness from it. Additive: older binaries never read it.
-- started_at and last_seen are the store's clock (nowSQL) in microseconds;
-- heartbeat_ns is the daemon's heartbeat period, from which readers derive
-- staleness. Records not seen for a day are pruned by the daemons.
CREATE TABLE hosts (
  host         TEXT    NOT NULL PRIMARY KEY,
  run_id       TEXT    NOT NULL,
  pid          INTEGER NOT NULL DEFAULT 0,
  version      TEXT    NOT NULL DEFAULT '',
  spec_hash    TEXT    NOT NULL DEFAULT '',
  heartbeat_ns INTEGER NOT NULL DEFAULT 0,
  stopped      INTEGER NOT NULL DEFAULT 0,
  started_at   INTEGER NOT NULL,
  last_seen    INTEGER NOT NULL
) STRICT;
CREATE INDEX hosts_last_seen ON hosts (last_seen);
