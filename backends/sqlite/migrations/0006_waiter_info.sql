-- 0006_waiter_info: who waits in a semaphore's line (issue 16).
-- min_binary: 0.1.0
--
-- A waiter record names the host and pid of the process that waits and
-- when it entered the line (since, the store's clock in microseconds), so
-- that the dashboard and coordd status can list the line
-- (backends.WaiterLister) as they list holders. A renewal keeps since.
-- Additive: an older binary inserts records without them (host '', pid 0,
-- since 0: listed as unknown) and never reads them.
ALTER TABLE semaphore_waiters ADD COLUMN host TEXT NOT NULL DEFAULT '';
ALTER TABLE semaphore_waiters ADD COLUMN pid INTEGER NOT NULL DEFAULT 0;
ALTER TABLE semaphore_waiters ADD COLUMN since INTEGER NOT NULL DEFAULT 0;
ALTER TABLE semaphore_instance_waiters ADD COLUMN host TEXT NOT NULL DEFAULT '';
ALTER TABLE semaphore_instance_waiters ADD COLUMN pid INTEGER NOT NULL DEFAULT 0;
ALTER TABLE semaphore_instance_waiters ADD COLUMN since INTEGER NOT NULL DEFAULT 0;
