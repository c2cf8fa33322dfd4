package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/internal/sqlstore"
)

// MySQL's cron claims. The shared store's claims are a transaction of
// statements that decide from what the previous ones returned; here a
// scheduled claim, a skip or a retry, one or a batch, is one script
// instead: one round trip, one commit. The reads and the rules every
// store shares are the shared store's and package backends'.
const (
	// qCronBumpFencing locks the task row and bumps its fencing counter,
	// which comes back in the OK packet (LAST_INSERT_ID(expr)). No row
	// matched: the task is absent. Argument: name.
	qCronBumpFencing = "UPDATE `{p}cron_tasks` SET fencing = LAST_INSERT_ID(" + nextFencing + ") WHERE name = ?"

	// qCronBusy reports whether the task has a run whose lease is live (an
	// Exclusive manual claim is then refused). Argument: task.
	qCronBusy = "SELECT EXISTS (SELECT 1 FROM `{p}cron_occurrences`\n" +
		"  WHERE task = ? AND status = 'running' AND expires_at > " + nowSQL + ")"

	// qCronManualTaken reads backend now plus a probe offset in
	// microseconds, and whether a manual run at that time would collide
	// with an existing attempt 1 of the task or with its pending next_exec.
	// Arguments: task, task, offset.
	qCronManualTaken = "SELECT x.at,\n" +
		"  EXISTS (SELECT 1 FROM `{p}cron_occurrences` WHERE task = ? AND scheduled_at = x.at AND attempt = 1)\n" +
		"  OR EXISTS (SELECT 1 FROM `{p}cron_tasks` WHERE name = ? AND next_exec = x.at)\n" +
		"FROM (SELECT " + nowSQL + " + ? AS at) x"

	// qCronInsert inserts an occurrence started at backend now, whose
	// microseconds come back in the OK packet (LAST_INSERT_ID(expr); the
	// statement's instant is fixed, so expires_at is exactly that plus the
	// lease). A running one is leased until now + lease; any other status
	// is recorded as finished at once (a skip, with lease 0). An existing
	// row with the same key fails with a duplicate key. Arguments: task,
	// scheduled_at, attempt, run_id, fencing, manual, owner, host, status,
	// lease, status, error.
	qCronInsert = "INSERT INTO `{p}cron_occurrences`\n" +
		"  (task, scheduled_at, attempt, run_id, fencing, manual, owner, host, status, started_at, expires_at, finished_at, error)\n" +
		"VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, LAST_INSERT_ID(" + nowSQL + "), " + nowSQL + " + ?,\n" +
		"  CASE WHEN ? = 'running' THEN NULL ELSE " + nowSQL + " END, ?)"

	// The claim scripts. Scheduled claims, skips and retries, one or a
	// batch, are one script (several statements sent in one round trip
	// on a dedicated connection, see runScript): one transaction at READ
	// COMMITTED, one commit. A script cannot branch on what it reads, so
	// each claim is a few statements (cronClaimScript), which pass what they
	// find to the next in session variables (@coordd_*), and ends with
	// what happened appended to a report (cronBatchResult). Every claim
	// takes the task row's lock before it reads anything: every claim of
	// the task, of any kind, writes that row first, so an Exclusive
	// claim's read of the task's live runs (a fresh snapshot at READ
	// COMMITTED, taken once the lock is held) sees every run claimed
	// before it.

	// cronBatchHead starts a claim script: it fixes backend now for the
	// whole script in @coordd_now (microseconds), empties @coordd_r, where
	// each claim appends what it did, and opens the transaction.
	cronBatchHead = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED;\n" +
		"SET @coordd_now = " + nowSQL + ", @coordd_r = '';\n" +
		"START TRANSACTION;\n"

	// cronBatchLock starts an Exclusive claim: it locks the task row (an
	// UPDATE that changes nothing still locks what it matches). Argument:
	// task.
	cronBatchLock = "UPDATE `{p}cron_tasks` SET fencing = fencing WHERE name = ?;\n"

	// cronBatchBusy follows cronBatchLock: it sets @coordd_busy to whether
	// the task has a run whose lease is live (the claim is then refused),
	// and resets the session's LAST_INSERT_ID, so that a claim that
	// matches nothing cannot read an earlier statement's value.
	// cronBatchIdle does the same for the other claims, which are never
	// busy. Argument: task.
	cronBatchBusy = "SELECT EXISTS (SELECT 1 FROM `{p}cron_occurrences`\n" +
		"  WHERE task = ? AND status = 'running' AND expires_at > @coordd_now), LAST_INSERT_ID(0) INTO @coordd_busy, @coordd_n;\n"
	cronBatchIdle = "SET @coordd_busy = LAST_INSERT_ID(0);\n"

	// cronBatchAdvance is the compare-and-swap of a scheduled claim (or
	// skip): it moves next_exec from the claimed time to the next one,
	// records the claiming host and bumps the fencing counter, all only
	// while next_exec still equals the claimed time and the task is
	// neither busy nor paused (read under the row lock this UPDATE takes);
	// the bumped number is left in LAST_INSERT_ID(). Arguments: next_exec,
	// exec_by, name, scheduled_at.
	cronBatchAdvance = "UPDATE `{p}cron_tasks` SET next_exec = ?, exec_by = ?, fencing = LAST_INSERT_ID(" + nextFencing + ")\n" +
		"  WHERE name = ? AND next_exec = ? AND @coordd_busy = 0 AND NOT " + sqlstore.CronPaused + ";\n"

	// cronBatchBump is a retry's: it bumps the fencing counter only while
	// attempt-1 of the same time ended failed, timeout or lost and the
	// task is neither busy nor paused. Arguments: name, task,
	// scheduled_at, attempt-1.
	cronBatchBump = "UPDATE `{p}cron_tasks` SET fencing = LAST_INSERT_ID(" + nextFencing + ")\n" +
		"  WHERE name = ? AND @coordd_busy = 0 AND NOT " + sqlstore.CronPaused + " AND EXISTS (SELECT 1 FROM `{p}cron_occurrences`\n" +
		"    WHERE " + cronOccKey + " AND status IN ('failed', 'timeout', 'lost'));\n"

	// cronBatchInsert inserts the occurrence, leased from @coordd_now,
	// only if the claim's UPDATE matched (it left the bumped fencing
	// number in LAST_INSERT_ID()). A running occurrence is leased until
	// now + lease; any other status is recorded as finished at once (a
	// skip, with lease 0). A row with the same key fails the script with a
	// duplicate key (the whole script then rolls back; claimScripted
	// makes the claims one by one). Arguments: task, scheduled_at,
	// attempt, run_id, manual, owner, host, status, lease, status, error.
	cronBatchInsert = "INSERT INTO `{p}cron_occurrences`\n" +
		"  (task, scheduled_at, attempt, run_id, fencing, manual, owner, host, status, started_at, expires_at, finished_at, error)\n" +
		"  SELECT ?, ?, ?, ?, LAST_INSERT_ID(), ?, ?, ?, ?, @coordd_now, @coordd_now + ?,\n" +
		"    IF(? = 'running', NULL, @coordd_now), ? FROM DUAL WHERE LAST_INSERT_ID() > 0;\n"

	// cronBatchInserted records in @coordd_n whether the insert inserted,
	// for a skip's trim.
	cronBatchInserted = "SET @coordd_n = ROW_COUNT();\n"

	// cronBatchResult ends each claim: it appends to @coordd_r the
	// fencing number (0: nothing was claimed), whether the occurrence was
	// inserted (ROW_COUNT() right after the insert, or @coordd_n after a
	// skip's trim) and whether the task was busy. Appending costs less
	// than a result set per claim. Argument: the inserted expression, by
	// fmt.
	cronBatchResult = "SET @coordd_r = CONCAT(@coordd_r, LAST_INSERT_ID(), ' ', %s, ' ', @coordd_busy, ',');\n"

	// cronBatchWhy reads, after a claim script, why a claim was not made:
	// whether the task exists, whether it is paused, whether next_exec is
	// still the claimed time (a scheduled claim refused as busy rather than
	// moved), and whether attempt-1 qualifies (a retry). One row per
	// claim, joined with UNION ALL. Arguments: index, task, task, task,
	// scheduled_at, task, scheduled_at, attempt-1.
	cronBatchWhy = "SELECT ?,\n" +
		"  EXISTS (SELECT 1 FROM `{p}cron_tasks` WHERE name = ?),\n" +
		"  EXISTS (SELECT 1 FROM `{p}cron_tasks` WHERE name = ? AND " + sqlstore.CronPaused + "),\n" +
		"  EXISTS (SELECT 1 FROM `{p}cron_tasks` WHERE name = ? AND next_exec = ?),\n" +
		"  EXISTS (SELECT 1 FROM `{p}cron_occurrences` WHERE " + cronOccKey + " AND status IN ('failed', 'timeout', 'lost'))"

	// cronBatchTail commits and returns @coordd_r and @coordd_now.
	cronBatchTail = "COMMIT;\nSELECT @coordd_r, @coordd_now"
)

// ClaimOccurrence implements backends.Crons.ClaimOccurrence. Scheduled runs
// and retries are one script, so one round trip and one commit (see
// runScript); a manual run, rare, is an ordinary transaction.
func (s *Store) ClaimOccurrence(ctx context.Context, req backends.ClaimRequest) (backends.Occurrence, error) {
	if err := backends.CheckClaim(req); err != nil {
		return backends.Occurrence{}, backends.ClaimError(req, err)
	}
	if req.Manual && req.Attempt == 1 {
		occ, err := s.claimManual(ctx, req)
		if err != nil {
			return backends.Occurrence{}, backends.ClaimError(req, err)
		}
		return occ, nil
	}
	res, err := s.claimScripted(ctx, []backends.ClaimRequest{req})
	if err != nil {
		return backends.Occurrence{}, err
	}
	return res[0].Occurrence, res[0].Err
}

// ClaimOccurrences implements backends.Crons.ClaimOccurrences: one script
// for the whole batch (see cronBatchHead).
func (s *Store) ClaimOccurrences(ctx context.Context, reqs []backends.ClaimRequest) ([]backends.ClaimResult, error) {
	return backends.ClaimBatch(reqs, func(batch []backends.ClaimRequest) ([]backends.ClaimResult, error) {
		return s.claimScripted(ctx, batch)
	})
}

// claimScripted claims checked requests that are not a manual attempt 1
// in one script; after a duplicate key, which rolls the script back, it
// claims them one by one, so that each gets its own answer.
func (s *Store) claimScripted(ctx context.Context, batch []backends.ClaimRequest) ([]backends.ClaimResult, error) {
	res, err := s.claimBatch(ctx, batch)
	switch {
	case !isDup(err):
		return res, err
	case len(batch) == 1:
		return []backends.ClaimResult{{Err: backends.ClaimError(batch[0], backends.ClaimTaken.Err(batch[0]))}}, nil
	}
	// An occurrence row already exists for a time next_exec still names
	// (a schedule reset into the past): the script rolled back; each
	// claim alone gets its own answer.
	res = make([]backends.ClaimResult, len(batch))
	for j, req := range batch {
		r, err := s.claimBatch(ctx, []backends.ClaimRequest{req})
		switch {
		case isDup(err):
			res[j].Err = backends.ClaimError(req, backends.ClaimTaken.Err(req))
		case err != nil:
			return nil, err
		default:
			res[j] = r[0]
		}
	}
	return res, nil
}

// claimBatch claims checked, non-manual requests in one script: it builds
// the script, runs it, parses its report and, for the claims not made,
// asks why, then maps each claim to its result. The error is the
// script's (a duplicate key among them).
func (s *Store) claimBatch(ctx context.Context, reqs []backends.ClaimRequest) ([]backends.ClaimResult, error) {
	sc := s.buildClaimScript(reqs)
	var text string
	var now int64
	err := s.runScript(ctx, sc.text, sc.args, func(_ int, rs *sql.Rows) error { return rs.Scan(&text, &now) })
	if isDup(err) {
		return nil, err
	}
	var dones []claimDone
	var failed []int
	if err == nil {
		dones, failed, err = parseClaimReport(text, sc.order)
	}
	var why []claimWhyRow
	if err == nil {
		why, err = s.claimWhy(ctx, reqs, failed)
	}
	if err != nil {
		return nil, backends.ClaimsError(len(reqs), err)
	}
	out := make([]backends.ClaimResult, len(reqs))
	for i, req := range reqs {
		if err := claimRefusal(req, dones[i], why[i]); err != nil {
			out[i].Err = backends.ClaimError(req, err)
			continue
		}
		// Claimed (the task may be deleted by now; the run still is ours).
		lease := int64(0)
		if req.Skip == "" {
			lease = req.Lease.Microseconds()
		}
		out[i].Occurrence = backends.Occurrence{
			Task: req.Task, ScheduledAt: fromMicros(req.ScheduledAt.UnixMicro()), Attempt: req.Attempt,
			RunID: sc.runIDs[i], Fencing: dones[i].fencing, Owner: req.Owner, Host: req.Host, Manual: req.Manual,
			StartedAt: fromMicros(now), ExpiresAt: fromMicros(now + lease),
		}
	}
	return out, nil
}

// cronClaimScript is a batch's claim script, its arguments, the index in the
// batch of each claim in script order, and each claim's run id.
type cronClaimScript struct {
	text   string
	args   []any
	order  []int
	runIDs []string
}

// buildClaimScript writes the script of checked, non-manual requests.
// Claims are made in task order (sqlstore.TaskOrder), so that two batches
// lock task rows in the same order and cannot deadlock; a task's own
// claims keep the order given.
func (s *Store) buildClaimScript(reqs []backends.ClaimRequest) cronClaimScript {
	sc := cronClaimScript{
		order:  sqlstore.TaskOrder(len(reqs), func(i int) string { return reqs[i].Task }),
		runIDs: make([]string, len(reqs)),
		args:   make([]any, 0, 24*len(reqs)),
	}
	var sb strings.Builder
	sb.WriteString(s.q(cronBatchHead))
	for _, i := range sc.order {
		req := reqs[i]
		sc.runIDs[i] = backends.NewCronRunID()
		status, lease, reason := backends.RunRunning, req.Lease.Microseconds(), sql.NullString{}
		if req.Skip != "" {
			status, lease, reason = backends.RunSkipped, 0, sql.NullString{String: storableText(req.Skip), Valid: true}
		}
		sched := req.ScheduledAt.UnixMicro()
		if req.Exclusive && req.Skip == "" {
			sb.WriteString(s.q(cronBatchLock))
			sb.WriteString(s.q(cronBatchBusy))
			sc.args = append(sc.args, req.Task, req.Task)
		} else {
			sb.WriteString(cronBatchIdle)
		}
		if req.Attempt > 1 {
			sb.WriteString(s.q(cronBatchBump))
			sc.args = append(sc.args, req.Task, req.Task, sched, req.Attempt-1)
		} else {
			sb.WriteString(s.q(cronBatchAdvance))
			sc.args = append(sc.args, sqlstore.ToNullMicros(req.Next), req.Host, req.Task, sched)
		}
		sb.WriteString(s.q(cronBatchInsert))
		sc.args = append(sc.args, req.Task, sched, req.Attempt, sc.runIDs[i], req.Manual, req.Owner, req.Host, status, lease, status, reason)
		inserted := "ROW_COUNT()"
		if req.Skip != "" {
			sb.WriteString(cronBatchInserted)
			sb.WriteString(s.q(cronScriptTrim))
			sb.WriteString(";\n")
			sc.args = append(sc.args, req.Task, req.Task, req.Task)
			inserted = "@coordd_n"
		}
		fmt.Fprintf(&sb, cronBatchResult, inserted)
	}
	sb.WriteString(cronBatchTail)
	sc.text = sb.String()
	return sc
}

// claimDone is what a claim script reports of one claim: the fencing
// number (0: nothing was claimed), whether the occurrence was inserted,
// whether the task was busy.
type claimDone struct {
	fencing, inserted int64
	busy              bool
}

// parseClaimReport reads a claim script's report (cronBatchResult, one
// field per claim in script order) into one claimDone per claim, by index
// in the batch, and lists the claims that claimed nothing.
func parseClaimReport(text string, order []int) ([]claimDone, []int, error) {
	fields := strings.Split(strings.TrimSuffix(text, ","), ",")
	if len(fields) != len(order) {
		return nil, nil, fmt.Errorf("the script reported %d claims of %d", len(fields), len(order))
	}
	dones := make([]claimDone, len(order))
	var failed []int
	for j, f := range fields {
		var d claimDone
		var busy int
		if _, err := fmt.Sscan(f, &d.fencing, &d.inserted, &busy); err != nil {
			return nil, nil, fmt.Errorf("the script reported %q: %w", f, err)
		}
		d.busy = busy != 0
		dones[order[j]] = d
		if d.fencing == 0 {
			failed = append(failed, order[j])
		}
	}
	return dones, failed, nil
}

// claimRefusal is why a claim was not made, from what its script reported
// and what claimWhy read afterwards; nil when it was made.
func claimRefusal(req backends.ClaimRequest, d claimDone, w claimWhyRow) error {
	switch {
	case d.fencing != 0 && d.inserted == 1:
		return nil
	case d.fencing != 0:
		return fmt.Errorf("claim script bumped fencing to %d but inserted %d rows", d.fencing, d.inserted)
	case !w.exists:
		return backends.ClaimTaskAbsent.Err(req)
	case w.paused:
		return backends.ClaimPaused.Err(req)
	case req.Attempt > 1 && !w.retryable:
		return backends.ClaimPreviousNotFailed.Err(req)
	case req.Attempt == 1 && !w.pending:
		return backends.ClaimNextMoved.Err(req)
	case d.busy:
		return backends.ClaimRunLive.Err(req)
	}
	// What the claim needed holds now, but did not when it was made: an
	// earlier claim (of this batch or another) came first.
	return fmt.Errorf("claimed by another claim first: %w", backends.ErrConflict)
}

// claimWhyRow is what cronBatchWhy reads about one claim.
type claimWhyRow struct{ exists, paused, pending, retryable bool }

// claimWhy reads cronBatchWhy for the claims at indexes idx of reqs, in
// one query (none when idx is empty), by index in reqs.
func (s *Store) claimWhy(ctx context.Context, reqs []backends.ClaimRequest, idx []int) ([]claimWhyRow, error) {
	out := make([]claimWhyRow, len(reqs))
	if len(idx) == 0 {
		return out, nil
	}
	parts := make([]string, len(idx))
	var args []any
	for j, i := range idx {
		req := reqs[i]
		sched := req.ScheduledAt.UnixMicro()
		parts[j] = cronBatchWhy
		args = append(args, i, req.Task, req.Task, req.Task, sched, req.Task, sched, req.Attempt-1)
	}
	_, err := s.pool.ReadOneTx(ctx, func(c conn) error {
		rows, err := c.Query(ctx, strings.Join(parts, "\nUNION ALL\n"), args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var i int
			var w claimWhyRow
			if err := rows.Scan(&i, &w.exists, &w.paused, &w.pending, &w.retryable); err != nil {
				return err
			}
			if i < 0 || i >= len(out) {
				return fmt.Errorf("index %d of %d", i, len(out))
			}
			out[i] = w
		}
		return rows.Err()
	})
	return out, err
}

// claimManual claims attempt 1 of a manual run: in one transaction it
// bumps the fencing counter (locking the task row), finds the first free
// time from backend now on, and inserts the occurrence.
func (s *Store) claimManual(ctx context.Context, req backends.ClaimRequest) (backends.Occurrence, error) {
	status, lease, reason := backends.RunRunning, req.Lease.Microseconds(), sql.NullString{}
	if req.Skip != "" {
		status, lease, reason = backends.RunSkipped, 0, sql.NullString{String: storableText(req.Skip), Valid: true}
	}
	occ := backends.Occurrence{
		Task: req.Task, Attempt: req.Attempt, RunID: backends.NewCronRunID(),
		Owner: req.Owner, Host: req.Host, Manual: req.Manual,
	}
	err := s.write(ctx, func(c conn) error {
		fencing, err := lastID(c.Exec(ctx, qCronBumpFencing, req.Task))
		if err != nil {
			return err
		}
		occ.Fencing = fencing
		if req.Exclusive && req.Skip == "" {
			// The task row is locked: every run of the task claimed
			// before is committed, and this first plain read sees it.
			var busy bool
			if err := c.QueryRow(ctx, qCronBusy, req.Task).Scan(&busy); err != nil {
				return err
			}
			if busy {
				return backends.ClaimRunLive.Err(req)
			}
		}
		sched, err := manualTime(ctx, c, req)
		if err != nil {
			return err
		}
		started, err := insertID(c.Exec(ctx, qCronInsert, req.Task, sched, req.Attempt, occ.RunID, occ.Fencing, req.Manual,
			req.Owner, req.Host, status, lease, status, reason))
		if isDup(err) {
			return backends.ClaimTaken.Err(req)
		} else if err != nil {
			return err
		}
		occ.ScheduledAt, occ.StartedAt, occ.ExpiresAt = fromMicros(sched), fromMicros(started), fromMicros(started+lease)
		if status != backends.RunRunning {
			_, err := c.Exec(ctx, qCronTrim, req.Task, req.Task, req.Task)
			return err
		}
		return nil
	})
	if err != nil {
		return backends.Occurrence{}, err
	}
	return occ, nil
}

// manualTime finds the first time from backend now on, a microsecond at a
// time, at which a manual run of req's task collides with nothing.
func manualTime(ctx context.Context, c conn, req backends.ClaimRequest) (int64, error) {
	for i := range backends.ManualProbes {
		var sched int64
		var taken bool
		if err := c.QueryRow(ctx, qCronManualTaken, req.Task, req.Task, i).Scan(&sched, &taken); err != nil {
			return 0, err
		}
		if !taken {
			return sched, nil
		}
	}
	return 0, backends.ClaimNoManualTime.Err(req)
}
