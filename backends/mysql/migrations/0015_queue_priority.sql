-- 0015_queue_priority: job priorities (queue push --priority).
-- min_binary: 0.1.0
--
-- priority is the job's priority as pushed (between -100 and 100, 0 the
-- default, which every job already stored gets; MariaDB 10.3 and MySQL
-- 8.0.12 add such a column in place without copying the table): a claim
-- takes the claimable jobs with the highest priority first. Claim
-- partition walks queue_jobs_ready in its order and stops after its limit
-- (FORCE INDEX), so the index becomes (queue, state, priority DESC, id):
-- when every job has priority 0 the walk is the one of (queue, state,
-- id). It is dropped and added again under its name in one ALTER (online:
-- writes go on while the index is built), so that a statement naming it
-- never finds it missing. Claim skip_locked takes jobs in (priority DESC,
-- available_at, id) order, which queue_jobs_skip_locked holds: its scan
-- stops after its limit and locks only the rows it returns, as the scan of
-- queue_jobs_state (queue, state, available_at) did, which stays for the
-- sweep, the park and older binaries (descending key parts: MariaDB 10.8
-- and later, MySQL 8). Additive: an older binary's pushes store
-- priority 0, and its claims, in id or (available_at, id) order, still
-- run during a rolling upgrade (claim partition sorting the ready jobs it
-- reads). ADD COLUMN and ADD KEY are not idempotent on MySQL 8; a re-run
-- that finds them is skipped by Migrate (errors 1060, 1061), and the
-- second statement makes the same index again.
ALTER TABLE `{p}queue_jobs` ADD COLUMN priority SMALLINT NOT NULL DEFAULT 0;
ALTER TABLE `{p}queue_jobs` DROP KEY queue_jobs_ready, ADD KEY queue_jobs_ready (queue, state, priority DESC, id);
ALTER TABLE `{p}queue_jobs` ADD KEY queue_jobs_skip_locked (queue, state, priority DESC, available_at, id);
