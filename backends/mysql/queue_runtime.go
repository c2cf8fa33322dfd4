package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"strings"
	"sync/atomic"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/internal/group"
	"github.com/coordd/coordd/spec"
)

var _ backends.Queues = (*Store)(nil)

// The queue runtime, a port of the SQLite store's. A job is a queue_jobs
// row in one of three states:
//
//	ready    waiting, claimable once available_at <= now
//	running  claimed by owner until expires_at (its visibility deadline)
//	dead     its attempts are used up; kept until requeued or purged
//
// The column unique_key holds the job's key (NULL when it has none) whether
// or not the queue is unique: the key also picks the partition.
//
// Push reads the queue row LOCK IN SHARE MODE, and so does a claim in
// mode partition, so that they never run against a partition count that a
// concurrent PutQueue is changing (PutQueue takes the row exclusively).
// Most pushes are one statement (queue_push.go). A unique push locks the
// key's index range with a locking read before inserting, so two pushes of
// one key serialise (or deadlock, and the store's retry runs the loser
// again, which then finds the winner's job). Every time comparison is made
// in SQL against nowSQL.
//
// Claim has two modes, the queue's claim field:
//
//   - partition (seed 001's partition locks; the default): a claim holds
//     one of the queue's partition lock rows, any one no other claim
//     holds (FOR UPDATE SKIP LOCKED), so at most `partitions` claims run
//     at once; a claimer that finds them all held gets nothing (and
//     queue.Client backs off). It then leases up to max claimable jobs of
//     the whole queue, whatever their partition, in id (push) order,
//     skipping the rows other claims hold (SKIP LOCKED). A job with a key
//     is claimable only while no job of its key is running and no older
//     one is ready (claimKeyFree), so the jobs of one key run one at a
//     time in push order, and a claim takes at most one of them. Two
//     claims cannot take two jobs of one key: the later job reads the
//     earlier one as ready (its last committed state) or running, either
//     of which blocks it. The partition a job was pushed to plays no part.
//   - skip_locked: no partition lock rows. Claim locks up to max claimable
//     jobs of the whole queue with SELECT ... FOR UPDATE SKIP LOCKED, in
//     the order they became available (available_at, then id: insert order
//     for jobs pushed without a delay), and leases them. Claimers skip each
//     other's rows instead of waiting, so any number claim at once; keys
//     are ignored, and jobs of one key may run at once and out of order.
//     The order is (available_at, id), the order of the queue_jobs_state
//     index (queue, state, available_at, and the primary key): the scan
//     stops after max rows and locks only those, and never passes over a
//     delayed job. (Without an index in id order, ordering by id would
//     either walk the primary key, locking every running, dead, delayed or
//     other queue's row it passes, or sort the ready rows, which locks all
//     of them; claim partition has queue_jobs_ready for it.)
//
// Either way a claim is one script (qClaimHeadFast and what follows it):
// several statements sent in one round trip on a dedicated connection,
// one transaction, one commit. Concurrent claims of one Store on one
// queue go together in one script (group.Claimer), each caller's jobs
// leased to its own owner token. Claims run at READ COMMITTED, and
// locking statements name their index (FORCE INDEX): on a small table the
// optimizer would rather scan the whole table, and a locking scan locks,
// or waits for, every row it reads, whether or not it matches. At
// REPEATABLE READ a claim's locking reads would lock every index entry
// they pass, including the delete-marked entries of jobs that other claims
// moved or acks deleted (kept until purge catches up) and the gap at the
// end of the ready range, so that concurrent claimers, and pushes
// inserting at the end of the range, would wait for each other and
// deadlock. Nothing in a claim needs a repeatable snapshot.
//
// Acks are group-committed: one autocommit DELETE for all the acks that
// arrive while one is running (Ack).
// WaitQueue parks an idle worker on a dedicated connection and pushes wake
// it (queue_park.go).

// jobColumns are the columns scanJob reads, in order; jobColumnsJ the same
// of the table aliased j.
const (
	jobColumns  = "id, `partition`, payload, unique_key, attempt, enqueued_at, available_at, owner, expires_at, last_error"
	jobColumnsJ = "j.id, j.`partition`, j.payload, j.unique_key, j.attempt, j.enqueued_at, j.available_at, j.owner, j.expires_at, j.last_error"
)

const (
	// qQueueConfig reads a queue's partition count and config under a
	// shared lock. No row: the queue is absent.
	qQueueConfig = "SELECT partitions, config FROM `{p}queues` WHERE name = ? LOCK IN SHARE MODE"

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
	// caller, qClaimLeaseTail and qClaimTail (Store.claimGroup). Arguments,
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
	// max_attempts attempts (<= 0: unlimited). Arguments: max_attempts,
	// max_attempts.
	qClaimSweep = "UPDATE `{p}queue_jobs` FORCE INDEX (queue_jobs_state)\n" +
		"SET state = CASE WHEN ? > 0 AND attempt >= ? THEN 'dead' ELSE 'ready' END,\n" +
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
	// queue_jobs_state index (available_at, then id), into @coordd_ids.
	// The locking read is a derived table, which locks exactly the rows it
	// returns. Argument: the limit.
	qClaimLockSkip = claimIDsOf + "x.available_at, x.id" + claimIDsTo +
		"  SELECT id, available_at FROM `{p}queue_jobs` FORCE INDEX (queue_jobs_state)\n" +
		"  WHERE queue = @coordd_q AND state = 'ready' AND available_at <= @coordd_now\n" +
		"  ORDER BY available_at, id LIMIT ? FOR UPDATE SKIP LOCKED) x;\n"

	// claimKeyFree is the test that job j (a queue_jobs row) may start as
	// far as its key goes: it has no key, or no job of its key is running
	// and no older one is ready (a delayed one included), so that the jobs
	// of one key run one at a time in push order. Two point lookups in
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
	// run at once (seed 001's partition locks); without one it claims
	// nothing. Then it locks up to a number of claimable jobs of the whole
	// queue, whatever their partition, in id (push) order, into
	// @coordd_ids: ready, available now, free as far as their key goes
	// (claimKeyFree), and not locked by another claim (SKIP LOCKED: a
	// claim never waits for another). The scan follows queue_jobs_ready
	// (queue, state, id) and stops after the limit; it passes over the
	// ready jobs that are not claimable yet (delayed, retrying, or behind
	// an earlier job of their key). Arguments: partition count, limit.
	qClaimLockPartition = "SELECT MIN(x.`partition`) INTO @coordd_p FROM (SELECT p.`partition` FROM `{p}queue_partitions` p\n" +
		"  WHERE p.queue = @coordd_q AND p.`partition` < ?\n" +
		"  ORDER BY p.`partition` LIMIT 1 FOR UPDATE SKIP LOCKED) x;\n" +
		claimIDsOf + "x.id" + claimIDsTo +
		"  SELECT j.id FROM `{p}queue_jobs` j FORCE INDEX (queue_jobs_ready)\n" +
		"  WHERE j.queue = IF(@coordd_p IS NULL, NULL, @coordd_q) AND j.state = 'ready' AND j.available_at <= @coordd_now\n" +
		"    AND " + claimKeyFree + "\n" +
		"  ORDER BY j.id LIMIT ? FOR UPDATE SKIP LOCKED) x;\n"

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

	// qQueueClaimConfig reads a queue's partition count and config, when a
	// claim found that its cached config is not the stored one.
	qQueueClaimConfig = "SELECT partitions, config FROM `{p}queues` WHERE name = ?"

	// qJobAck deletes a job, only while owner holds it.
	qJobAck = "DELETE FROM `{p}queue_jobs` WHERE id = ? AND queue = ? AND owner = ? AND state = 'running'"

	// qJobAckBatchHead deletes a batch of jobs, each only while its owner
	// holds it, in one autocommit statement: the head, the batch as a
	// derived table (qJobAckRow, then qJobAckRowMore per further job, then
	// qJobAckRowsTail; arguments id, queue, owner per job), then
	// qJobAckBatchTail. It joins from the derived table into queue_jobs
	// (STRAIGHT_JOIN: one primary-key lookup per job, whatever the
	// optimizer thinks of the table's size; an IN list may be run as a scan
	// of a small table, which in REPEATABLE READ locks, or waits for, every
	// row; and single-table DELETE takes no index hint).
	qJobAckBatchHead = "DELETE j FROM "
	qJobAckRow       = "(SELECT ? AS id, ? AS q, ? AS o"
	qJobAckRowMore   = " UNION ALL SELECT ?, ?, ?"
	qJobAckRowsTail  = ") a"
	qJobAckBatchTail = " STRAIGHT_JOIN `{p}queue_jobs` j ON j.id = a.id\n" +
		"WHERE j.queue = a.q AND j.owner = a.o AND j.state = 'running'"

	// qJobAckPresentHead lists which jobs of a batch still exist after the
	// batch DELETE matched fewer than all (qJobAckID, qJobAckIDMore per
	// further id, qJobAckRowsTail, then qJobAckPresentTail): those were
	// not deleted, so their acks are lost.
	qJobAckPresentHead = "SELECT STRAIGHT_JOIN j.id FROM "
	qJobAckID          = "(SELECT ? AS id"
	qJobAckIDMore      = " UNION ALL SELECT ?"
	qJobAckPresentTail = " JOIN `{p}queue_jobs` j ON j.id = a.id"

	// qJobRetry returns a job owner holds to the queue, available after the
	// backoff in microseconds, or moves it to the dead set once it used
	// max_attempts attempts (<= 0: unlimited), recording the reason.
	// Arguments: max_attempts, max_attempts, backoff, reason, id, queue,
	// owner.
	qJobRetry = "UPDATE `{p}queue_jobs`\n" +
		"SET state = CASE WHEN ? > 0 AND attempt >= ? THEN 'dead' ELSE 'ready' END,\n" +
		"  owner = NULL, expires_at = 0, available_at = " + nowSQL + " + ?, last_error = ?\n" +
		"WHERE id = ? AND queue = ? AND owner = ? AND state = 'running'"

	// qJobExtend renews a job's visibility deadline to now + the visibility
	// timeout in microseconds, only for its owner and only while it has not
	// expired. Arguments: visibility, id, queue, owner.
	qJobExtend = "UPDATE `{p}queue_jobs` SET expires_at = " + nowSQL + " + ?\n" +
		"WHERE id = ? AND queue = ? AND owner = ? AND state = 'running' AND expires_at > " + nowSQL

	// qJobExpiry reads back the renewed deadline in the same transaction.
	qJobExpiry = "SELECT expires_at FROM `{p}queue_jobs` WHERE id = ? AND owner = ?"

	// qJobDead lists dead jobs, oldest (lowest id) first, up to a limit.
	qJobDead = "SELECT " + jobColumns + " FROM `{p}queue_jobs` WHERE queue = ? AND state = 'dead' ORDER BY id LIMIT ?"

	// qJobRequeueDead makes every dead job ready now with attempts reset;
	// last_error is kept as a record of why it died.
	qJobRequeueDead = "UPDATE `{p}queue_jobs` FORCE INDEX (queue_jobs_state) SET state = 'ready', attempt = 0, owner = NULL, expires_at = 0,\n" +
		"  available_at = " + nowSQL + " WHERE queue = ? AND state = 'dead'"

	// qJobPurgeDead deletes every dead job.
	qJobPurgeDead = "DELETE FROM `{p}queue_jobs` WHERE queue = ? AND state = 'dead'"
)

// loadQueueConfig reads a queue's config with its stored partition count
// under a shared lock on the queue row; ErrNotFound when the queue is
// absent.
func loadQueueConfig(ctx context.Context, c conn, name string) (backends.QueueConfig, error) {
	var cfg backends.QueueConfig
	var partitions int
	var conf string
	err := c.QueryRow(ctx, qQueueConfig, name).Scan(&partitions, &conf)
	if errors.Is(err, sql.ErrNoRows) {
		return cfg, backends.ErrNotFound
	}
	if err != nil {
		return cfg, err
	}
	if err := json.Unmarshal([]byte(conf), &cfg); err != nil {
		return cfg, fmt.Errorf("queue config: %w", err)
	}
	cfg.Name, cfg.Partitions = name, partitions
	return cfg, nil
}

// jobScanner is *sql.Row or *sql.Rows.
type jobScanner interface{ Scan(dest ...any) error }

// scanJob reads jobColumns.
func scanJob(r jobScanner, queue string) (backends.Job, error) {
	j := backends.Job{Queue: queue}
	var key, owner sql.NullString
	var enq, avail, exp int64
	if err := r.Scan(&j.ID, &j.Partition, &j.Payload, &key, &j.Attempt, &enq, &avail, &owner, &exp, &j.LastError); err != nil {
		return j, err
	}
	j.Key, j.Owner = key.String, owner.String
	j.EnqueuedAt, j.AvailableAt = fromMicros(enq), fromMicros(avail)
	if owner.Valid {
		j.ExpiresAt = fromMicros(exp)
	}
	if j.Payload == nil {
		j.Payload = []byte{}
	}
	return j, nil
}

// keyPartition is the partition of a key: FNV-1a 32 of the key modulo the
// partition count, stable across processes, versions and backends (the
// SQLite store uses the same function).
func keyPartition(key string, partitions int) int {
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % uint32(max(partitions, 1)))
}

// nonNegMicros converts a delay or backoff to microseconds, negative as 0.
func nonNegMicros(d time.Duration) int64 { return max(d, 0).Microseconds() }

// Claim first returns running jobs whose visibility expired to the queue
// (or the dead set), then leases up to max claimable jobs, all in one
// transaction: with claim partition, those of the least recently claimed
// partition that has one and that no other claimer holds, in insert order;
// with claim skip_locked, those of the whole queue that no other claimer
// holds, in the order they became available.
//
// A claim is one script in one round trip (see qClaimHeadFast and what
// follows it): one transaction and one commit. It runs with the config
// this Store last read (queueState.configs); when the stored config
// changed, or on the first claim of a queue, the script changes nothing,
// and the claim reads the config and runs again with it: two more round
// trips. It looks for expired leases only when one may have expired
// (claimConfig.sweepAt): the look scans the queue's running jobs.
//
// Claims are grouped per Store and queue, as acks are (group.Claimer): a
// Claim that finds none of the queue's claims running runs at once; claims
// that arrive while one runs wait for it, then go together in one script,
// which leases each of them its own jobs under its own owner token, in one
// transaction and one commit. Once its group is sent, a Claim waits for
// it even if ctx ends (the group stops only when every member's ctx has
// ended), so that no job is leased to a caller that left.
func (s *Store) Claim(ctx context.Context, queue, owner string, max int) ([]backends.Job, error) {
	if owner == "" {
		return nil, fmt.Errorf("claim from queue %q: empty owner", queue)
	}
	if max < 1 {
		return nil, fmt.Errorf("claim from queue %q: max %d: must be at least 1", queue, max)
	}
	jobs, err := s.queues.claims.Claim(ctx, queue, owner, max, s.claimGroup)
	if err != nil {
		return nil, fmt.Errorf("claim from queue %q as %q: %w", queue, owner, err)
	}
	return jobs, nil
}

// claimConfig is a queue's config as a claim uses it: the stored text,
// which the claim script checks, what it says, and when the next claim
// must look for expired leases.
type claimConfig struct {
	text string
	cfg  backends.QueueConfig
	vis  int64 // the visibility timeout in microseconds
	// sweepAt is when (host monotonic time, as a duration since monoBase)
	// a lease may expire next: claims from then on look for expired leases
	// (qClaimHeadCheck, qClaimSweep). 0: at once.
	sweepAt atomic.Int64
}

// monoBase anchors claimConfig.sweepAt on the monotonic clock.
var monoBase = time.Now()

// sweepDue reports whether a claim sent now must look for expired leases.
func (cc *claimConfig) sweepDue() bool {
	return time.Duration(cc.sweepAt.Load()) <= time.Since(monoBase)
}

// checked records what a claim sent at sent that looked for expired
// leases found: the claim's backend time now and earliest, the earliest
// visibility deadline of the queue's running jobs then (invalid: none),
// both in microseconds. No lease can expire before earliest, nor before
// now + vis/2: a lease taken afterwards, by any claimer, runs the
// visibility timeout from its claim's instant, which is at least now -
// vis/2 even for a claim that was already running (claims last
// milliseconds; a config change, which may shorten the timeout, makes
// every claimer read the config again and start over). When earliest had
// passed (this claim swept), the next claim looks again. The host waits
// from sent, before the claim ran: it looks again no later than needed.
func (cc *claimConfig) checked(sent time.Time, now int64, earliest sql.NullInt64) {
	next := now + cc.vis/2
	if earliest.Valid {
		next = min(next, earliest.Int64)
	}
	wait := time.Duration(max(next-now, 0)) * time.Microsecond
	cc.sweepAt.Store(int64(sent.Sub(monoBase) + wait))
}

// maxClaimGroup bounds the jobs one grouped claim asks for (the members'
// max summed); a claim asking for more goes alone.
const maxClaimGroup = 256

// maxConfigRefresh bounds the claims in a row that find the config
// changed: it would have to change between every two round trips.
const maxConfigRefresh = 3

// claimGroup runs one claim script for group and returns each member's
// jobs.
func (s *Store) claimGroup(ctx context.Context, queue string, group []*group.Claim[backends.Job]) ([][]backends.Job, error) {
	qs := &s.queues
	total := 0
	for _, r := range group {
		total += r.Max
	}
	for range maxConfigRefresh {
		var cc *claimConfig
		if v, ok := qs.configs.Load(queue); ok {
			cc = v.(*claimConfig)
		} else {
			cc = &claimConfig{cfg: backends.QueueConfig{Claim: spec.ClaimSkipLocked}} // its text "" matches no stored config
		}
		var sb strings.Builder
		var args []any
		sb.WriteString(claimStart)
		if total > claimShortIDs {
			sb.WriteString(claimBeginLongIDs)
		} else {
			sb.WriteString(claimBegin)
		}
		check := cc.sweepDue()
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
			args = append(args, cc.cfg.MaxAttempts, cc.cfg.MaxAttempts)
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

		byOwner := make(map[string][]backends.Job, len(group))
		var status int64 = 1 // none read
		var now int64
		var earliest sql.NullInt64
		sent := time.Now()
		err := s.runScriptN(ctx, claimAttempts, sb.String(), args, func(_ int, rows *sql.Rows) error {
			id, j, at, min, err := scanClaimRow(rows, queue)
			if err != nil {
				return err
			}
			if id <= 0 {
				status, now, earliest = id, at, min
				return nil
			}
			byOwner[j.Owner] = append(byOwner[j.Owner], j)
			return nil
		})
		if err != nil {
			return nil, err
		}
		switch status {
		case -1: // the config matched
			if check {
				cc.checked(sent, now, earliest)
			}
			out := make([][]backends.Job, len(group))
			for i, r := range group {
				out[i] = byOwner[r.Owner]
				if out[i] == nil {
					out[i] = []backends.Job{}
				}
			}
			return out, nil
		case 0:
		default:
			return nil, fmt.Errorf("claim script: status row %d", status)
		}
		if len(byOwner) > 0 {
			return nil, fmt.Errorf("claim script leased jobs with a stale config")
		}
		var partitions int
		var text string
		err = s.on(nil).QueryRow(ctx, qQueueClaimConfig, queue).Scan(&partitions, &text)
		if errors.Is(err, sql.ErrNoRows) {
			qs.configs.Delete(queue)
			return nil, backends.ErrNotFound
		}
		if err != nil {
			return nil, err
		}
		fresh, err := newClaimConfig(queue, text, partitions)
		if err != nil {
			return nil, err
		}
		qs.configs.Store(queue, fresh)
	}
	return nil, fmt.Errorf("the queue's config changed %d times in a row: %w", maxConfigRefresh, errRetry)
}

// scanClaimRow reads one row of qClaimTail: the id of @coordd_ids (0 or
// -1 for the status row, then a job's id), @coordd_now, @coordd_min, and
// the job (jobColumns) when it is one.
func scanClaimRow(rows *sql.Rows, queue string) (int64, backends.Job, int64, sql.NullInt64, error) {
	var id, now int64
	var earliest, jid, part, attempt, enq, avail, exp sql.NullInt64
	var payload []byte
	var key, owner, lastErr sql.NullString
	if err := rows.Scan(&id, &now, &earliest, &jid, &part, &payload, &key, &attempt, &enq, &avail, &owner, &exp, &lastErr); err != nil {
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
		Attempt: int(attempt.Int64), Owner: owner.String, LastError: lastErr.String,
		EnqueuedAt: fromMicros(enq.Int64), AvailableAt: fromMicros(avail.Int64), ExpiresAt: fromMicros(exp.Int64),
	}
	if j.Payload == nil {
		j.Payload = []byte{}
	}
	return id, j, now, earliest, nil
}

// newClaimConfig parses a stored config for claims.
func newClaimConfig(queue, text string, partitions int) (*claimConfig, error) {
	cc := &claimConfig{text: text}
	if err := json.Unmarshal([]byte(text), &cc.cfg); err != nil {
		return nil, fmt.Errorf("queue config: %w", err)
	}
	cc.cfg.Name, cc.cfg.Partitions = queue, partitions
	vis, err := leaseMicros(cc.cfg.VisibilityTimeout)
	if err != nil {
		return nil, fmt.Errorf("visibility_timeout: %w", err)
	}
	cc.vis = vis
	return cc, nil
}

// jobAffected returns ErrLost when res matched no row.
func jobAffected(res sql.Result, err error) error {
	n, err := affected(res, err)
	if err != nil {
		return err
	}
	if n == 0 {
		return backends.ErrLost
	}
	return nil
}

// Ack deletes a finished job while j.Owner still holds it (ErrLost).
//
// Acks are group-committed per Store: a commit waits for the disk (with
// innodb_flush_log_at_trx_commit = 1), and it, more than the round trip,
// is what a queue drain is bound by. An Ack with none in flight runs at
// once; acks that arrive while one runs wait for it and then go together,
// up to maxAckBatch, in one autocommit DELETE (qJobAckBatchHead): one
// round trip and one commit, whatever the number. Each Ack still learns
// whether its own job was deleted: when the DELETE matched every job, all
// were; otherwise (a lease in the batch was lost) one more read finds the
// jobs still present, which were not. Only if some job that the DELETE did
// not match is gone as well (it was lost, then acked by its next owner)
// can the read not tell which of the missing jobs the DELETE took: then
// every missing job's ack returns ErrLost, so an Ack never claims a
// deletion it cannot prove. An Ack whose ctx ends while it waits returns
// ctx's error, and its job may be deleted anyway.
func (s *Store) Ack(ctx context.Context, j backends.Job) error {
	err := s.queues.acks.Do(ctx, j, s.ackBatch)
	if err != nil {
		return fmt.Errorf("ack job %d of queue %q as %q: %w", j.ID, j.Queue, j.Owner, err)
	}
	return nil
}

// maxAckBatch bounds the jobs one batch of acks deletes.
const maxAckBatch = 256

// ackTimeout bounds a batch of acks, which runs for several callers and so
// follows none of their contexts.
const ackTimeout = 30 * time.Second

// ackBatch deletes the jobs of batch that their owners still hold and
// returns each ack's error: nil, ErrLost, or the batch's own failure. A
// deleted job with a key may let the next job of its key start, so then it
// wakes a parked worker of the queue (one per such job, up to maxWake).
func (s *Store) ackBatch(ctx context.Context, batch []backends.Job) []error {
	errs := s.ackDelete(ctx, batch)
	keyed := map[string]int{}
	for i, j := range batch {
		if errs[i] == nil && j.Key != "" {
			keyed[j.Queue]++
		}
	}
	for q, n := range keyed {
		s.wakeQueue(ctx, q, min(n, maxWake))
	}
	return errs
}

// ackDelete is ackBatch's DELETE.
func (s *Store) ackDelete(ctx context.Context, batch []backends.Job) []error {
	errs := make([]error, len(batch))
	if len(batch) == 1 {
		j := batch[0]
		errs[0] = jobAffected(s.autocommit(ctx, qJobAck, j.ID, j.Queue, j.Owner))
		return errs
	}
	// One job twice in a batch: at most the first ack can delete it.
	var todo []int // indexes into batch
	seen := make(map[int64]bool, len(batch))
	args := make([]any, 0, 3*len(batch))
	for i, r := range batch {
		if seen[r.ID] {
			errs[i] = backends.ErrLost
			continue
		}
		seen[r.ID] = true
		todo = append(todo, i)
		args = append(args, r.ID, r.Queue, r.Owner)
	}
	rows := qJobAckRow + strings.Repeat(qJobAckRowMore, len(todo)-1) + qJobAckRowsTail
	n, err := affected(s.autocommit(ctx, qJobAckBatchHead+rows+qJobAckBatchTail, args...))
	if err != nil {
		return fill(errs, todo, err)
	}
	if n == int64(len(todo)) {
		return errs // all deleted
	}
	present, err := s.ackPresent(ctx, batch, todo)
	if err != nil {
		return fill(errs, todo, fmt.Errorf("ack batch matched %d of %d jobs, and reading which: %w", n, len(todo), err))
	}
	missing := int64(len(todo) - len(present))
	for _, i := range todo {
		if present[batch[i].ID] || n != missing {
			errs[i] = backends.ErrLost
		}
	}
	return errs
}

// ackPresent returns which jobs of batch[todo] still exist.
func (s *Store) ackPresent(ctx context.Context, batch []backends.Job, todo []int) (map[int64]bool, error) {
	ids := make([]any, len(todo))
	for k, i := range todo {
		ids[k] = batch[i].ID
	}
	q := qJobAckPresentHead + qJobAckID + strings.Repeat(qJobAckIDMore, len(ids)-1) + qJobAckRowsTail + qJobAckPresentTail
	rows, err := s.on(nil).Query(ctx, q, ids...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	present := map[int64]bool{}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		present[id] = true
	}
	return present, rows.Err()
}

// fill sets errs[i] to err for every i in todo.
func fill(errs []error, todo []int, err error) []error {
	for _, i := range todo {
		errs[i] = err
	}
	return errs
}

// Retry returns a job j.Owner still holds (ErrLost) to the queue after
// retry_backoff, or to the dead set when it used max_attempts attempts.
func (s *Store) Retry(ctx context.Context, j backends.Job, reason string) error {
	var ready bool // the job went back to the queue, not to the dead set
	err := s.write(ctx, func(c conn) error {
		cfg, err := loadQueueConfig(ctx, c, j.Queue)
		if errors.Is(err, backends.ErrNotFound) {
			return fmt.Errorf("queue is gone: %w", backends.ErrLost)
		}
		if err != nil {
			return err
		}
		ready = cfg.MaxAttempts <= 0 || j.Attempt < cfg.MaxAttempts
		return jobAffected(c.Exec(ctx, qJobRetry, cfg.MaxAttempts, cfg.MaxAttempts, nonNegMicros(cfg.RetryBackoff), storableText(reason), j.ID, j.Queue, j.Owner))
	})
	if err != nil {
		return fmt.Errorf("retry job %d of queue %q as %q: %w", j.ID, j.Queue, j.Owner, err)
	}
	if ready || j.Key != "" {
		// Ready now without a backoff; with one, a parked worker re-parks
		// with the job's available_at as its bound. A job with a key that
		// died lets the next job of its key start.
		s.wakeQueue(ctx, j.Queue, 1)
	}
	return nil
}

// ExtendJob renews j.Owner's visibility lease to now + visibility_timeout,
// only while it holds the job and the lease has not expired (ErrLost).
func (s *Store) ExtendJob(ctx context.Context, j backends.Job) (time.Time, error) {
	var exp int64
	err := s.write(ctx, func(c conn) error {
		cfg, err := loadQueueConfig(ctx, c, j.Queue)
		if errors.Is(err, backends.ErrNotFound) {
			return fmt.Errorf("queue is gone: %w", backends.ErrLost)
		}
		if err != nil {
			return err
		}
		vis, err := leaseMicros(cfg.VisibilityTimeout)
		if err != nil {
			return fmt.Errorf("visibility_timeout: %w", err)
		}
		if err := jobAffected(c.Exec(ctx, qJobExtend, vis, j.ID, j.Queue, j.Owner)); err != nil {
			return err
		}
		return c.QueryRow(ctx, qJobExpiry, j.ID, j.Owner).Scan(&exp)
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("extend job %d of queue %q as %q: %w", j.ID, j.Queue, j.Owner, err)
	}
	return fromMicros(exp), nil
}

// Dead lists up to limit dead jobs (limit <= 0: all), oldest first.
func (s *Store) Dead(ctx context.Context, queue string, limit int) ([]backends.Job, error) {
	lim := int64(limit)
	if limit <= 0 {
		lim = math.MaxInt64
	}
	jobs := []backends.Job{}
	_, err := s.read(ctx, func(c conn) error {
		jobs = jobs[:0]
		rows, err := c.Query(ctx, qJobDead, queue, lim)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			j, err := scanJob(rows, queue)
			if err != nil {
				return err
			}
			jobs = append(jobs, j)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("list dead jobs of queue %q: %w", queue, err)
	}
	return jobs, nil
}

// RequeueDead makes every dead job of queue ready now with attempts reset,
// and returns how many.
func (s *Store) RequeueDead(ctx context.Context, queue string) (int64, error) {
	n, err := s.queueWriteCount(ctx, qJobRequeueDead, queue)
	if err != nil {
		return 0, fmt.Errorf("requeue dead jobs of queue %q: %w", queue, err)
	}
	if n > 0 {
		s.wakeQueue(ctx, queue, int(min(n, maxWake)))
	}
	return n, nil
}

// PurgeDead deletes every dead job of queue and returns how many.
func (s *Store) PurgeDead(ctx context.Context, queue string) (int64, error) {
	n, err := s.queueWriteCount(ctx, qJobPurgeDead, queue)
	if err != nil {
		return 0, fmt.Errorf("purge dead jobs of queue %q: %w", queue, err)
	}
	return n, nil
}

// queueWriteCount runs one statement in a write transaction and returns the
// number of rows it matched.
func (s *Store) queueWriteCount(ctx context.Context, query string, args ...any) (int64, error) {
	var n int64
	err := s.write(ctx, func(c conn) error {
		var err error
		n, err = affected(c.Exec(ctx, query, args...))
		return err
	})
	return n, err
}
