-- 0005_cron_claim_calls: a batch of scheduled cron claims in one call.
-- min_binary: 0.1.0
--
-- cron_claim makes the claims of attempt 1 of scheduled times (not
-- manual, not skips) in the order given (the caller sorts them by task, as
-- the shared store does, so that two hosts lock task rows in one order),
-- each as the shared store's transaction does (backends/internal/sqlstore,
-- cron_claim.go), in one round trip and one commit where the shared batch
-- sends four or five statements per claim. Each claim locks its task's row
-- first and decides from reads made after the lock (each statement of a
-- volatile function reads with a snapshot of its own at READ COMMITTED), so
-- it sees every claim of the task committed before, and writes only once
-- it is granted: a refused claim leaves no trace, without a savepoint.
-- Refusals are backends.ClaimRefusal's numbers, checked in the shared
-- store's order: 1 the task is absent, 7 paused, 2 next_exec moved, 6 a run
-- of the task is live (exclusive), 3 the occurrence exists. status 0: the
-- claim was made, with its fencing number, start and lease end. Every time
-- is the server's clock in microseconds, read after the task's lock.
-- Additive: an older binary never calls it.
CREATE FUNCTION {p}cron_claim(p_tasks text[], p_sched bigint[], p_next bigint[], p_owners text[],
  p_run_ids text[], p_leases bigint[], p_exclusive boolean[], p_host text)
RETURNS TABLE (ord int, status int, fencing bigint, started_at bigint, expires_at bigint)
LANGUAGE plpgsql AS $$
DECLARE
  v_now bigint;
  v_next bigint;
  v_paused boolean;
  v_found boolean;
BEGIN
  FOR i IN 1 .. coalesce(array_length(p_tasks, 1), 0) LOOP
    ord := i;
    fencing := NULL;
    started_at := NULL;
    expires_at := NULL;
    SELECT t.next_exec, (t.paused_at IS NOT NULL OR coalesce((t.def::jsonb -> 'paused') = 'true'::jsonb, false))
      INTO v_next, v_paused
      FROM {p}cron_tasks t WHERE t.name = p_tasks[i] FOR UPDATE;
    v_found := FOUND;
    v_now := (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::bigint;
    IF NOT v_found THEN
      status := 1;
    ELSIF v_paused THEN
      status := 7;
    ELSIF v_next IS DISTINCT FROM p_sched[i] THEN
      status := 2;
    ELSIF p_exclusive[i] AND EXISTS (SELECT 1 FROM {p}cron_occurrences o
        WHERE o.task = p_tasks[i] AND o.status = 'running' AND o.expires_at > v_now) THEN
      status := 6;
    ELSIF EXISTS (SELECT 1 FROM {p}cron_occurrences o
        WHERE o.task = p_tasks[i] AND o.scheduled_at = p_sched[i] AND o.attempt = 1) THEN
      status := 3;
    ELSE
      status := 0;
      UPDATE {p}cron_tasks t SET next_exec = p_next[i], exec_by = p_host, fencing = GREATEST(t.fencing + 1, v_now)
        WHERE t.name = p_tasks[i] RETURNING t.fencing INTO fencing;
      INSERT INTO {p}cron_occurrences AS o
        (task, scheduled_at, attempt, run_id, fencing, manual, owner, host, status, started_at, expires_at, finished_at, error)
        VALUES (p_tasks[i], p_sched[i], 1, p_run_ids[i], fencing, 0, p_owners[i], p_host, 'running',
          v_now, v_now + p_leases[i], NULL, NULL)
        RETURNING o.started_at, o.expires_at INTO started_at, expires_at;
    END IF;
    RETURN NEXT;
  END LOOP;
END
$$;
