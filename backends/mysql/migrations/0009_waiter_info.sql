-- 0009_waiter_info: who waits in a semaphore's line (issue 16).
-- min_binary: 0.1.0
--
-- A waiter record names the host and pid of the process that waits and
-- when it entered the line (since, the server's clock in microseconds), so
-- that the dashboard and coordd status can list the line
-- (backends.WaiterLister) as they list holders. A renewal keeps since.
-- Additive: an older binary inserts records without them (host '', pid 0,
-- since 0: listed as unknown) and never reads them. ADD COLUMN is not
-- idempotent on MySQL 8; a re-run that finds a column is skipped by Migrate
-- (error 1060), hence one column per statement.
ALTER TABLE `{p}semaphore_waiters` ADD COLUMN host VARCHAR(255) NOT NULL DEFAULT '';
ALTER TABLE `{p}semaphore_waiters` ADD COLUMN pid INT NOT NULL DEFAULT 0;
ALTER TABLE `{p}semaphore_waiters` ADD COLUMN since BIGINT NOT NULL DEFAULT 0;
ALTER TABLE `{p}semaphore_instance_waiters` ADD COLUMN host VARCHAR(255) NOT NULL DEFAULT '';
ALTER TABLE `{p}semaphore_instance_waiters` ADD COLUMN pid INT NOT NULL DEFAULT 0;
ALTER TABLE `{p}semaphore_instance_waiters` ADD COLUMN since BIGINT NOT NULL DEFAULT 0;
