-- 0003_session_slots: what mode session keeps in the semaphore's row.
-- min_binary: 0.1.0
--
-- A session-mode slot is an advisory lock held by the holder's connection
-- (session.go), not a row. session_slots is the number of slot locks that
-- may be held: max(lim, highest held slot + 1), above lim only while
-- holders admitted under a higher limit remain. session_holders records
-- each holder under its slot number: its fencing number, the backend pid
-- of the connection that holds the lock (pid), the owner token, host,
-- process id (hpid) and when it was granted (at). A record counts only
-- while that backend holds the slot's lock, so a holder whose connection
-- died needs no clean-up. Additive: an older binary never reads them.
ALTER TABLE {p}semaphores ADD COLUMN session_slots bigint NOT NULL DEFAULT 0;
ALTER TABLE {p}semaphores ADD COLUMN session_holders jsonb;
