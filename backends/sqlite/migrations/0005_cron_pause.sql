-- 0005_cron_pause: an operator's pause of a cron task (issue 16).
-- min_binary: 0.1.0
--
-- `coordd cron pause` records who paused a task (paused_by, a host id),
-- when (paused_at, the store's clock in microseconds; NULL: not paused) and
-- why. The pause lives beside the definition, not in it: PutCron (apply)
-- rewrites def and keeps these columns, and deleting the task drops them.
-- A scheduled claim or a retry checks them, and paused: true in def, in its
-- own statement (qCronAdvance, qCronBumpRetry), so a paused task's
-- next_exec stays where it was and the times missed while paused follow
-- catch_up once it is resumed. Additive: an older binary neither reads nor
-- writes them, and so does not honour a pause; during a rolling upgrade a
-- pause holds only once every host that may lead runs a binary that knows
-- it (docs/operations.md).
ALTER TABLE cron_tasks ADD COLUMN paused_at INTEGER;
ALTER TABLE cron_tasks ADD COLUMN paused_by TEXT NOT NULL DEFAULT '';
ALTER TABLE cron_tasks ADD COLUMN paused_reason TEXT NOT NULL DEFAULT '';
