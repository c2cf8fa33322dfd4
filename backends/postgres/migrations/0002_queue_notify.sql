-- 0002_queue_notify: wake idle workers with NOTIFY.
-- min_binary: 0.1.0
--
-- A job that becomes claimable by a write sends NOTIFY on the store's
-- channel ({channel}, a name derived from the schema and prefix) with its
-- queue's name: a push of a ready job, a job made ready again (a return,
-- a retry, an operator's retry of a dead job), and the ack of a keyed job,
-- which may free the next job of its key. PostgreSQL sends one
-- notification per channel and payload per transaction, at commit, so a
-- batch of pushes or acks wakes each queue's waiters once, and a rolled
-- back push wakes nobody. Additive: an older binary polls and never
-- listens.
CREATE FUNCTION {p}queue_jobs_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    PERFORM pg_notify('{channel}', OLD.queue);
  ELSE
    PERFORM pg_notify('{channel}', NEW.queue);
  END IF;
  RETURN NULL;
END
$$;

CREATE TRIGGER {i}queue_jobs_ready_notify AFTER INSERT ON {p}queue_jobs
  FOR EACH ROW WHEN (NEW.state = 'ready') EXECUTE FUNCTION {p}queue_jobs_notify();
CREATE TRIGGER {i}queue_jobs_again_notify AFTER UPDATE OF state ON {p}queue_jobs
  FOR EACH ROW WHEN (NEW.state = 'ready' AND OLD.state <> 'ready') EXECUTE FUNCTION {p}queue_jobs_notify();
CREATE TRIGGER {i}queue_jobs_acked_notify AFTER DELETE ON {p}queue_jobs
  FOR EACH ROW WHEN (OLD.state = 'running' AND OLD.unique_key IS NOT NULL) EXECUTE FUNCTION {p}queue_jobs_notify();
