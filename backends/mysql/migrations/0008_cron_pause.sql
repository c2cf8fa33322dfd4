-- 0008_cron_pause: an operator's pause of a cron task (issue 16).
-- min_binary: 0.1.0
--
-- `coordd cron pause` records who paused a task (paused_by, a host id),
-- when (paused_at, the server's clock in microseconds; NULL: not paused)
-- and why (paused_reason, at most 1024 bytes). The pause lives beside the
-- definition, not in it: PutCron (apply) rewrites def and keeps these
-- columns, and deleting the task drops them. A scheduled claim or a retry
-- checks them, and paused: true in def, in the UPDATE that takes the task
-- row's lock (cronBatchAdvance, cronBatchBump), so a paused task's
-- next_exec stays where it was and the times missed while paused follow
-- catch_up once it is resumed. Additive: an older binary neither reads nor
-- writes them, and so does not honour a pause; during a rolling upgrade a
-- pause holds only once every host that may lead runs a binary that knows
-- it (docs/operations.md). ADD COLUMN is not idempotent on MySQL 8; a
-- re-run that finds a column is skipped by Migrate (error 1060), hence one
-- column per statement.
ALTER TABLE `{p}cron_tasks` ADD COLUMN paused_at BIGINT NULL;
ALTER TABLE `{p}cron_tasks` ADD COLUMN paused_by VARCHAR(255) NOT NULL DEFAULT '';
ALTER TABLE `{p}cron_tasks` ADD COLUMN paused_reason VARCHAR(1024) NOT NULL DEFAULT '';
