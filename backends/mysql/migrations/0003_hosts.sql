-- 0003_hosts: the host registry (issue 7).
-- min_binary: 0.1.0
--
-- One row per host id: what its daemon runs and when the server last heard
-- from it. Informational only (coordd status, /metrics); nothing decides
-- correctness from it. Additive: older binaries never read it.
-- started_at and last_seen are the server's clock (nowSQL) in microseconds;
-- heartbeat_ns is the daemon's heartbeat period, from which readers derive
-- staleness. Records not seen for a day are pruned by the daemons
-- (hosts_last_seen serves that delete).
CREATE TABLE IF NOT EXISTS `{p}hosts` (
  host         VARCHAR(255) NOT NULL,
  run_id       VARCHAR(255) NOT NULL,
  pid          INT          NOT NULL DEFAULT 0,
  version      VARCHAR(64)  NOT NULL DEFAULT '',
  spec_hash    VARCHAR(128) NOT NULL DEFAULT '',
  heartbeat_ns BIGINT       NOT NULL DEFAULT 0,
  stopped      TINYINT      NOT NULL DEFAULT 0,
  started_at   BIGINT       NOT NULL,
  last_seen    BIGINT       NOT NULL,
  PRIMARY KEY (host),
  KEY hosts_last_seen (last_seen)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
