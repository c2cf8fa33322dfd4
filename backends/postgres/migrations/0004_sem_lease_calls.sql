-- 0004_sem_lease_calls: a lease-mode acquire and release in one call each.
-- min_binary: 0.1.0
--
-- Each function is the shared store's transaction (backends/internal/sqlstore,
-- semaphore_lease.go) run in the server: one round trip and one commit
-- instead of six round trips. It locks the semaphore's row first; the
-- statements after the lock each read with a snapshot of their own (READ
-- COMMITTED, a volatile function), so they see what the previous holder of
-- the lock committed, as the shared transaction's later statements do. A
-- single statement could not: its one snapshot is taken before it waits for
-- the lock. Every time is one instant read after the lock (v_now), in
-- microseconds, from the server's clock. Additive: an older binary never
-- calls them.

-- sem_acquire takes the lowest free slot row for p_owner when the live
-- holders are below the limit, fewer live waiters are ahead of the owner
-- than slots are free, and a free row exists (sqlstore.Refusal: the caller
-- builds the refusal from the counts returned); then it bumps the fencing
-- counter, takes the row and removes the owner's waiter record. present
-- is false for an absent semaphore; fencing is NULL when nothing was granted.
-- A row that is no longer free under the lock (never expected) raises a
-- serialisation failure, which the caller retries.
CREATE FUNCTION {p}sem_acquire(p_name text, p_owner text, p_host text, p_pid bigint, p_lease bigint)
RETURNS TABLE (present boolean, keyed boolean, lim bigint, live bigint, free_slot bigint, ahead bigint,
  fencing bigint, expires_at bigint)
LANGUAGE plpgsql AS $$
DECLARE
  v_now bigint;
  v_waiting boolean;
  v_fencing bigint;
BEGIN
  PERFORM 1 FROM {p}semaphores s WHERE s.name = p_name FOR UPDATE;
  present := FOUND;
  IF NOT present THEN
    RETURN NEXT;
    RETURN;
  END IF;
  v_now := (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::bigint;
  SELECT s.keyed <> 0, s.lim,
    (SELECT count(*) FROM {p}semaphore_slots t WHERE t.name = s.name AND t.owner IS NOT NULL AND t.expires_at > v_now),
    (SELECT min(t.slot) FROM {p}semaphore_slots t WHERE t.name = s.name AND (t.owner IS NULL OR t.expires_at <= v_now)),
    (SELECT count(*) FROM {p}semaphore_waiters w WHERE w.name = s.name AND w.expires_at > v_now
      AND w.seq < coalesce((SELECT x.seq FROM {p}semaphore_waiters x
        WHERE x.name = s.name AND x.owner = p_owner AND x.expires_at > v_now), 9223372036854775807)),
    EXISTS (SELECT 1 FROM {p}semaphore_waiters w WHERE w.name = s.name AND w.owner = p_owner)
  INTO keyed, lim, live, free_slot, ahead, v_waiting
  FROM {p}semaphores s WHERE s.name = p_name;
  IF keyed OR live >= lim OR ahead >= lim - live OR free_slot IS NULL THEN
    RETURN NEXT;
    RETURN;
  END IF;
  UPDATE {p}semaphores s SET fencing = GREATEST(s.fencing + 1, v_now) WHERE s.name = p_name
  RETURNING s.fencing INTO v_fencing;
  UPDATE {p}semaphore_slots t SET owner = p_owner, host = p_host, pid = p_pid, fencing = v_fencing,
    acquired_at = v_now, expires_at = v_now + p_lease
  WHERE t.name = p_name AND t.slot = free_slot AND (t.owner IS NULL OR t.expires_at <= v_now)
  RETURNING t.expires_at INTO expires_at;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'slot % of % is no longer free', free_slot, p_name USING ERRCODE = 'serialization_failure';
  END IF;
  IF v_waiting THEN
    DELETE FROM {p}semaphore_waiters w WHERE w.name = p_name AND w.owner = p_owner;
  END IF;
  fencing := v_fencing;
  RETURN NEXT;
END
$$;

-- sem_release frees p_owner's slot row of a lease-mode semaphore whose slot
-- rows need no repair (no more rows than the limit), and reports whether
-- the lease was still live. status: 0 freed; 1 the owner holds no row; 2
-- nothing done, the caller runs the shared release (the semaphore is
-- absent, keyed, in another mode, or has rows to retire). A release that
-- frees a row commits without waiting for the WAL flush: a crash can lose
-- it, and then the slot stays held until its lease ends, one holder fewer
-- for a while, never one more. A later commit that waits for the flush (the
-- next acquire) makes it durable first, since the WAL is flushed in order.
CREATE FUNCTION {p}sem_release(p_name text, p_owner text)
RETURNS TABLE (status int, was_live boolean)
LANGUAGE plpgsql AS $$
DECLARE
  v_now bigint;
  v_lim bigint;
  v_mode text;
  v_keyed bigint;
BEGIN
  was_live := false;
  SELECT s.lim, s.mode, s.keyed INTO v_lim, v_mode, v_keyed FROM {p}semaphores s WHERE s.name = p_name FOR UPDATE;
  IF NOT FOUND OR v_mode <> 'lease' OR v_keyed <> 0
    OR (SELECT count(*) FROM {p}semaphore_slots t WHERE t.name = p_name) > v_lim THEN
    status := 2;
    RETURN NEXT;
    RETURN;
  END IF;
  v_now := (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::bigint;
  SELECT t.expires_at > v_now INTO was_live FROM {p}semaphore_slots t
  WHERE t.name = p_name AND t.owner = p_owner FOR UPDATE;
  IF NOT FOUND THEN
    status := 1;
    was_live := false;
    RETURN NEXT;
    RETURN;
  END IF;
  UPDATE {p}semaphore_slots t SET owner = NULL, host = '', pid = 0, acquired_at = 0, expires_at = 0
  WHERE t.name = p_name AND t.owner = p_owner;
  PERFORM set_config('synchronous_commit', 'off', true);
  status := 0;
  RETURN NEXT;
END
$$;
