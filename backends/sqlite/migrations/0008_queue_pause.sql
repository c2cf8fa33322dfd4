-- 0008_queue_pause: an operator's pause of a queue (coordd queue pause).
-- min_binary: 0.1.0
--
-- Beside the queue's config, not in it: an apply rewrites the config and
-- keeps the pause; deleting the queue deletes the row and the pause with
-- it. paused_at is the store's clock in microseconds (NULL: not paused),
-- paused_by the host id that paused it. Workers read it before they
-- claim. Additive: an older binary never reads it, and its workers go on
-- claiming a paused queue.
ALTER TABLE queues ADD COLUMN paused_at INTEGER;
ALTER TABLE queues ADD COLUMN paused_by TEXT NOT NULL DEFAULT '';
ALTER TABLE queues ADD COLUMN paused_reason TEXT NOT NULL DEFAULT '';
