package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/internal/group"
	"github.com/coordd/coordd/spec"
)

// Claims (see the top of queue_runtime.go): one script per claim, built by
// jobClaimScript, sent and read by runClaim, its jobs handed out by
// claimReport.jobsFor.
const (
	// The claim scripts. A claim is one script (several statements sent
	// in one round trip on a dedicated connection, runScript): one
	// transaction at READ COMMITTED (see Claim for why), one commit. A
	// script cannot branch on what it reads, so each step passes what it
	// found to the next in session variables (@coordd_*), and a step that
	// has nothing to do finds no row: a NULL variable in an index lookup
	// matches nothing. The head sets every variable, since they outlive
	// the script on the connection. Variables are set by SELECT
	// ... INTO, never by SET with a subquery: InnoDB reads the tables of a
	// SET statement's subqueries with shared locks even at READ COMMITTED,
	// which made claims and acks deadlock on the running jobs' rows.
	//
	// The queue's config comes from the Store's cache (claimConfig): the
	// script names the config text the cache holds and acts only if the
	// stored config is still that text (@coordd_q is the queue's name
	// then, NULL otherwise); the first row it returns says whether it
	// was (claimIDsOf). The lease
	// length, max_attempts and the partition count bound in the script are
	// the cached config's.
	//
	// A script is claimStart, claimBegin (or claimBeginLongIDs), a head
	// (qClaimHeadFast or qClaimHeadCheck), claimPlain or claimShared,
	// qClaimSweep after qClaimHeadCheck, a lock (qClaimLockSkip or
	// qClaimLockPartition), qClaimLeaseHead, a qClaimLeaseOwner per
	// caller, qClaimLeaseTail and qClaimTail (jobClaimScript). Arguments,
	// in that order.

	// claimStart sets the transaction's isolation level.
	claimStart = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED;\n"
	// claimBegin starts the transaction. claimBeginLongIDs raises first
	// the length limit of GROUP_CONCAT, which builds @coordd_ids (MySQL's
	// default, 1024 bytes, holds 48 ids of any length; MariaDB's is 1 MB):
	// claims of more than claimShortIDs jobs send it.
	claimBegin        = "START TRANSACTION;\n"
	claimBeginLongIDs = "SET SESSION group_concat_max_len = 1048576;\n" + claimBegin
	claimShortIDs     = 40

	// qClaimHeadFast is the head of most claims: it checks the config, and
	// takes the backend time the whole claim uses (@coordd_now: the lease
	// runs from it, so nothing is read back to learn the deadline). One
	// row whatever it finds (an aggregate). It reads the queue row with a
	// plain read, so that the row stays free for PutQueue (claim
	// skip_locked does not care about the partition count); claim
	// partition appends claimShared, which locks it in share mode (a
	// concurrent PutQueue may be changing the count and moving jobs
	// between partitions). Arguments: queue, config text.
	qClaimHeadFast = "SELECT MAX(q.name), " + nowSQL + ", NULL, NULL, NULL, NULL, NULL\n" +
		"  INTO @coordd_q, @coordd_now, @coordd_min, @coordd_start, @coordd_p, @coordd_ids, @coordd_n\n" +
		"FROM `{p}queues` q WHERE q.name = ? AND q.config = ?"
	// qClaimHeadCheck is qClaimHeadFast for a claim that must look for
	// expired leases (claimConfig.sweepDue): it also reads the earliest
	// visibility deadline of the queue's running jobs (@coordd_min, NULL:
	// none; a plain read, which scans the queue's running jobs). Arguments:
	// queue, queue, config text.
	qClaimHeadCheck = "SELECT MAX(q.name), " + nowSQL + ",\n" +
		"  (SELECT MIN(j.expires_at) FROM `{p}queue_jobs` j FORCE INDEX (queue_jobs_state) WHERE j.queue = ? AND j.state = 'running'),\n" +
		"  NULL, NULL, NULL, NULL\n" +
		"  INTO @coordd_q, @coordd_now, @coordd_min, @coordd_start, @coordd_p, @coordd_ids, @coordd_n\n" +
		"FROM `{p}queues` q WHERE q.name = ? AND q.config = ?"
	claimPlain  = ";\n"
	claimShared = " LOCK IN SHARE MODE;\n"

	// qClaimSweep follows qClaimHeadCheck: when a running job's visibility
	// deadline passed, it returns such jobs to the queue: ready again (the
	// attempt they used stays counted), or dead once they used
	// max_attempts attempts (<= 0: unlimited), with available_at the time
	// of death. Arguments: max_attempts four times.
	qClaimSweep = "UPDATE `{p}queue_jobs` FORCE INDEX (queue_jobs_state)\n" +
		"SET state = CASE WHEN ? > 0 AND attempt >= ? THEN 'dead' ELSE 'ready' END,\n" +
		"  available_at = CASE WHEN ? > 0 AND attempt >= ? THEN @coordd_now ELSE available_at END,\n" +
		"  owner = NULL, expires_at = 0, last_error = 'visibility timeout'\n" +
		"WHERE queue = IF(@coordd_min <= @coordd_now, @coordd_q, NULL) AND state = 'running' AND expires_at <= @coordd_now;\n"

	// claimIDsOf builds @coordd_ids from the locked jobs x (column id):
	// a JSON array of their ids in claim order, after a first element that
	// is the status: -1 when the config matched, 0 when it did not. It is
	// built with GROUP_CONCAT, whose ORDER BY both servers take (MySQL's
	// JSON_ARRAYAGG has none); @coordd_n is the number of jobs.
	claimIDsOf = "SELECT CONCAT('[', CONCAT_WS(',', IF(@coordd_q IS NULL, 0, -1), GROUP_CONCAT(x.id ORDER BY "
	claimIDsTo = ")), ']'), COUNT(*) INTO @coordd_ids, @coordd_n FROM (\n"

	// qClaimLockSkip (claim skip_locked) locks up to a number of claimable
	// jobs of the queue that no other claimer holds, in the order of the
	// queue_jobs_skip_locked index (priority DESC, available_at, then id;
	// migration 0015), into @coordd_ids. The locking read is a derived
	// table, which locks exactly the rows it returns; the scan stops after
	// the limit, passing over the delayed jobs of a priority before the
	// next priority's (with every job of priority 0, only when fewer jobs
	// than the limit are available). Argument: the limit.
	qClaimLockSkip = claimIDsOf + "x.priority DESC, x.available_at, x.id" + claimIDsTo +
		"  SELECT id, priority, available_at FROM `{p}queue_jobs` FORCE INDEX (queue_jobs_skip_locked)\n" +
		"  WHERE queue = @coordd_q AND state = 'ready' AND available_at <= @coordd_now\n" +
		"  ORDER BY priority DESC, available_at, id LIMIT ? FOR UPDATE SKIP LOCKED) x;\n"

	// claimKeyFree is the test that job j (a queue_jobs row) may start as
	// far as its key goes: it has no key, or no job of its key is running
	// and no older one is ready (a delayed one included), so that the jobs
	// of one key run one at a time in push order, whatever their
	// priorities. Two point lookups in
	// queue_jobs_key, each a scalar subquery with LIMIT 1 rather than EXISTS
	// (MariaDB turns EXISTS into a semi-join that materialises its table).
	// They are plain reads: a job that another claim holds locked reads as
	// it was last committed, ready, which still blocks the later jobs of
	// its key, so two claims never take two jobs of one key.
	claimKeyFree = "(j.unique_key IS NULL OR (\n" +
		"    (SELECT k.id FROM `{p}queue_jobs` k FORCE INDEX (queue_jobs_key)\n" +
		"      WHERE k.queue = j.queue AND k.unique_key = j.unique_key AND k.state = 'running' LIMIT 1) IS NULL\n" +
		"    AND (SELECT k.id FROM `{p}queue_jobs` k FORCE INDEX (queue_jobs_key)\n" +
		"      WHERE k.queue = j.queue AND k.unique_key = j.unique_key AND k.state = 'ready' AND k.id < j.id LIMIT 1) IS NULL))"

	// qClaimLockPartition (claim partition) takes one of the queue's
	// partition lock rows that no other claim holds into @coordd_p (FOR
	// UPDATE SKIP LOCKED, scanning the primary key: at READ COMMITTED only
	// the row returned stays locked), so that at most `partitions` claims
	// run at once; without one it claims nothing. Then it locks up to a
	// number of claimable jobs of the whole queue, whatever their
	// partition, in claim order (the highest priority first, then id: push
	// order), into @coordd_ids: ready, available now, free as far as their
	// key goes (claimKeyFree), and not locked by another claim (SKIP
	// LOCKED: a claim never waits for another). The scan follows
	// queue_jobs_ready (queue, state, priority DESC, id; migration 0015)
	// and stops after the limit; it passes over the ready jobs that are not
	// claimable yet (delayed, retrying, or behind an earlier job of their
	// key). Arguments: partition count, limit.
	qClaimLockPartition = "SELECT MIN(x.`partition`) INTO @coordd_p FROM (SELECT p.`partition` FROM `{p}queue_partitions` p\n" +
		"  WHERE p.queue = @coordd_q AND p.`partition` < ?\n" +
		"  ORDER BY p.`partition` LIMIT 1 FOR UPDATE SKIP LOCKED) x;\n" +
		claimIDsOf + "x.priority DESC, x.id" + claimIDsTo +
		"  SELECT j.id, j.priority FROM `{p}queue_jobs` j FORCE INDEX (queue_jobs_ready)\n" +
		"  WHERE j.queue = IF(@coordd_p IS NULL, NULL, @coordd_q) AND j.state = 'ready' AND j.available_at <= @coordd_now\n" +
		"    AND " + claimKeyFree + "\n" +
		"  ORDER BY j.priority DESC, j.id LIMIT ? FOR UPDATE SKIP LOCKED) x;\n"

	// claimIDs is @coordd_ids as a table: id, and ord, its place from 1
	// (the status element's is 1, the jobs' from 2).
	claimIDs = "JSON_TABLE(@coordd_ids, '$[*]' COLUMNS (ord FOR ORDINALITY, id BIGINT PATH '$')) x"

	// qClaimLeaseHead leases the jobs of @coordd_ids, which the
	// transaction holds locked, until @coordd_now + the visibility timeout
	// in microseconds, counting an attempt. One claim may serve several
	// callers (group.Claimer): each gets the next jobs in claim order, up
	// to its max. The owner is a CASE over ord: qClaimLeaseHead, then
	// qClaimLeaseOwner per caller (arguments: 1 + the running total of the
	// callers' max up to this one, its owner), then qClaimLeaseTail
	// (argument: visibility). STRAIGHT_JOIN: one primary-key lookup per
	// job; the status element matches no job.
	qClaimLeaseHead = "UPDATE " + claimIDs + " STRAIGHT_JOIN `{p}queue_jobs` j ON j.id = x.id\n" +
		"SET j.state = 'running', j.owner = CASE"
	qClaimLeaseOwner = " WHEN x.ord <= ? THEN ?"
	qClaimLeaseTail  = " END,\n  j.attempt = j.attempt + 1, j.expires_at = @coordd_now + ?;\n"

	// qClaimTail reads the status and the leased jobs back in claim order,
	// the status first (its job columns NULL), each row with @coordd_now
	// and @coordd_min (claimRow), and commits.
	qClaimTail = "SELECT x.id, @coordd_now, @coordd_min, " + jobColumnsJ + "\n" +
		"FROM " + claimIDs + " LEFT JOIN `{p}queue_jobs` j ON j.id = x.id\n" +
		"ORDER BY x.ord;\n" +
		"COMMIT"
)

// claimGroup runs one claim script for group and returns each member's
// jobs. A script that finds the stored config changed leases nothing; the
// claim reads the config and runs again with it.
func (s *Store) claimGroup(ctx context.Context, queue string, group []*group.Claim[backends.Job]) ([][]backends.Job, error) {
	total := 0
	for _, r := range group {
		total += r.Max
	}
	for range maxConfigRefresh {
		cc := &claimConfig{cfg: backends.QueueConfig{Claim: spec.ClaimSkipLocked}} // its text "" matches no stored config
		if v, ok := s.queues.configs.Load(queue); ok {
			cc = v.(*claimConfig)
		}
		check := cc.sweepDue()
		script, args := jobClaimScript(queue, cc, group, total, check)
		sent := time.Now()
		rep, err := s.runClaim(ctx, queue, script, args)
		if err != nil {
			return nil, err
		}
		switch rep.status {
		case -1: // the config matched
			if check {
				cc.checked(sent, rep.now, rep.earliest)
			}
			return rep.jobsFor(group), nil
		case 0:
		default:
			return nil, fmt.Errorf("claim script: status row %d", rep.status)
		}
		if len(rep.byOwner) > 0 {
			return nil, fmt.Errorf("claim script leased jobs with a stale config")
		}
		if _, err := s.readClaimConfig(ctx, queue); err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("the queue's config changed %d times in a row: %w", maxConfigRefresh, errRetry)
}

// jobClaimScript builds the claim script of group, which asks for total jobs
// of queue under config cc, and its arguments; with check, the script
// looks for expired leases first.
func jobClaimScript(queue string, cc *claimConfig, group []*group.Claim[backends.Job], total int, check bool) (string, []any) {
	var sb strings.Builder
	var args []any
	sb.WriteString(claimStart)
	if total > claimShortIDs {
		sb.WriteString(claimBeginLongIDs)
	} else {
		sb.WriteString(claimBegin)
	}
	if check {
		sb.WriteString(qClaimHeadCheck)
		args = append(args, queue, queue, cc.text)
	} else {
		sb.WriteString(qClaimHeadFast)
		args = append(args, queue, cc.text)
	}
	partition := cc.cfg.Claim != spec.ClaimSkipLocked
	if partition {
		sb.WriteString(claimShared)
	} else {
		sb.WriteString(claimPlain)
	}
	if check {
		sb.WriteString(qClaimSweep)
		args = append(args, cc.cfg.MaxAttempts, cc.cfg.MaxAttempts, cc.cfg.MaxAttempts, cc.cfg.MaxAttempts)
	}
	if partition {
		sb.WriteString(qClaimLockPartition)
		args = append(args, cc.cfg.Partitions, total)
	} else {
		sb.WriteString(qClaimLockSkip)
		args = append(args, total)
	}
	sb.WriteString(qClaimLeaseHead)
	upto := 1 // the status element
	for _, r := range group {
		sb.WriteString(qClaimLeaseOwner)
		upto += r.Max
		args = append(args, upto, r.Owner)
	}
	sb.WriteString(qClaimLeaseTail + qClaimTail)
	args = append(args, cc.vis)
	return sb.String(), args
}

// claimReport is what a claim script returned: its status (-1: the config
// matched; 0: it did not, and nothing was leased; 1: no status row), the
// backend time and earliest visibility deadline it read (qClaimHeadCheck),
// and the jobs it leased, by owner.
type claimReport struct {
	status   int64
	now      int64
	earliest sql.NullInt64
	byOwner  map[string][]backends.Job
}

// runClaim sends a claim script and reads its report.
func (s *Store) runClaim(ctx context.Context, queue, script string, args []any) (claimReport, error) {
	rep := claimReport{status: 1, byOwner: map[string][]backends.Job{}}
	err := s.runScriptN(ctx, claimAttempts, script, args, func(_ int, rows *sql.Rows) error {
		id, j, now, earliest, err := scanClaimRow(rows, queue)
		if err == nil {
			rep.add(id, j, now, earliest)
		}
		return err
	})
	return rep, err
}

// add reads one row of qClaimTail into the report. The status row comes
// first, so a script sent again after it failed (runScriptOnce) starts the
// report over: a job that its first run read back but may not have
// committed is never handed out, and waits out its lease if it was.
func (rep *claimReport) add(id int64, j backends.Job, now int64, earliest sql.NullInt64) {
	if id <= 0 {
		rep.status, rep.now, rep.earliest = id, now, earliest
		clear(rep.byOwner)
		return
	}
	rep.byOwner[j.Owner] = append(rep.byOwner[j.Owner], j)
}

// jobsFor hands each member of group the jobs leased to its owner token.
func (rep claimReport) jobsFor(group []*group.Claim[backends.Job]) [][]backends.Job {
	out := make([][]backends.Job, len(group))
	for i, r := range group {
		out[i] = rep.byOwner[r.Owner]
		if out[i] == nil {
			out[i] = []backends.Job{}
		}
	}
	return out
}

// scanClaimRow reads one row of qClaimTail: the id of @coordd_ids (0 or
// -1 for the status row, then a job's id), @coordd_now, @coordd_min, and
// the job (jobColumns) when it is one.
func scanClaimRow(rows *sql.Rows, queue string) (int64, backends.Job, int64, sql.NullInt64, error) {
	var id, now int64
	var earliest, jid, part, prio, attempt, enq, avail, exp sql.NullInt64
	var payload []byte
	var key, owner, lastErr sql.NullString
	if err := rows.Scan(&id, &now, &earliest, &jid, &part, &payload, &key, &prio, &attempt, &enq, &avail, &owner, &exp, &lastErr); err != nil {
		return 0, backends.Job{}, 0, earliest, err
	}
	if id <= 0 {
		return id, backends.Job{}, now, earliest, nil
	}
	if !jid.Valid {
		return 0, backends.Job{}, 0, earliest, fmt.Errorf("claim script: job %d vanished", id)
	}
	j := backends.Job{
		ID: jid.Int64, Queue: queue, Partition: int(part.Int64), Payload: payload, Key: key.String,
		Priority: int(prio.Int64), Attempt: int(attempt.Int64), Owner: owner.String, LastError: lastErr.String,
		EnqueuedAt: fromMicros(enq.Int64), AvailableAt: fromMicros(avail.Int64), ExpiresAt: fromMicros(exp.Int64),
	}
	if j.Payload == nil {
		j.Payload = []byte{}
	}
	return id, j, now, earliest, nil
}
