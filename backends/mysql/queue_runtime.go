package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/internal/sqlstore"
)

// The queue runtime on MySQL: the shared store's (sqlstore, queue_*.go:
// the job states, ExtendJob, the dead set), with MySQL's own push, claim,
// ack and wait, and wake-ups of parked workers after every write that
// makes jobs claimable (queue.go).
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
//   - partition (the default): a claim holds one of the queue's
//     partition lock rows, any one no other claim holds (FOR UPDATE SKIP
//     LOCKED), so at most `partitions` claims run at once; a claimer that
//     finds them all held gets nothing (and queue.Client backs off). It
//     then leases up to max claimable jobs of
//     the whole queue, whatever their partition, in claim order (the
//     highest priority first, then id: push order), skipping the rows
//     other claims hold (SKIP LOCKED). A job with a key is claimable only
//     while no job of its key is running and no older one is ready
//     (claimKeyFree), so the jobs of one key run one at a time in push
//     order, whatever their priorities, and a claim takes at most one of
//     them. Two
//     claims cannot take two jobs of one key: the later job reads the
//     earlier one as ready (its last committed state) or running, either
//     of which blocks it. The partition a job was pushed to plays no part.
//   - skip_locked: no partition lock rows. Claim locks up to max claimable
//     jobs of the whole queue with SELECT ... FOR UPDATE SKIP LOCKED, the
//     highest priority first and within one priority in the order they
//     became available (available_at, then id: insert order for jobs
//     pushed without a delay), and leases them. Claimers skip each other's
//     rows instead of waiting, so any number claim at once; keys are
//     ignored, and jobs of one key may run at once and out of order. The
//     order is (priority DESC, available_at, id), the order of the
//     queue_jobs_skip_locked index (queue, state, priority DESC,
//     available_at, id): the scan stops after max rows and locks only
//     those; it passes over a priority's delayed jobs only on its way to
//     the next priority (or to the end, when fewer than max are
//     available), each locked for a moment at READ COMMITTED. (Without an
//     index in claim order, the claim would either walk the primary key,
//     locking every running, dead, delayed or other queue's row it passes,
//     or sort the ready rows, which locks all of them; claim partition has
//     queue_jobs_ready for its own order.)
//
// Either way a claim is one script (queue_claim.go: qClaimHeadFast and
// what follows it): several statements sent in one round trip on a
// dedicated connection, one transaction, one commit. Concurrent claims of one Store on one
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
// arrive while one is running (queue_ack.go). WaitQueue parks an idle worker on a dedicated connection and pushes wake
// it (queue_park.go).

// jobColumnsJ are sqlstore's job columns (sqlstore.ScanJob) of the table
// aliased j.
const jobColumnsJ = "j.id, j.`partition`, j.payload, j.unique_key, j.priority, j.attempt, j.enqueued_at, j.available_at, j.owner, j.expires_at, j.last_error"

// qQueueClaimConfig reads a queue's partition count and config text, when
// a claim or a push has none cached or found that its cached config is not
// the stored one.
const qQueueClaimConfig = "SELECT partitions, config FROM `{p}queues` WHERE name = ?"

// Claim first returns running jobs whose visibility expired to the queue
// (or the dead set), then leases up to max claimable jobs of the whole
// queue that no other claimer holds, all in one transaction, and returns
// them in the order it took them: with claim partition, holding one of the
// queue's partition lock rows, in claim order (the highest priority first,
// then push order) with the jobs of a key one at a time; with claim
// skip_locked, the highest priority first, then in the order they became
// available.
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
	if err := backends.CheckClaimJobs(queue, owner, max); err != nil {
		return nil, err
	}
	jobs, err := s.queues.claims.Claim(ctx, queue, owner, max, s.claimGroup)
	if err != nil {
		return nil, backends.ClaimJobsError(queue, owner, err)
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

// newClaimConfig parses a stored config for claims.
func newClaimConfig(queue, text string, partitions int) (*claimConfig, error) {
	cfg, err := sqlstore.ParseQueueConfig(queue, text, partitions)
	if err != nil {
		return nil, err
	}
	vis, err := leaseMicros(cfg.VisibilityTimeout)
	if err != nil {
		return nil, fmt.Errorf("visibility_timeout: %w", err)
	}
	return &claimConfig{text: text, cfg: cfg, vis: vis}, nil
}

// readClaimConfig reads the queue's stored config and caches it
// (cacheConfig); ErrNotFound, and nothing cached, when the queue is absent.
func (s *Store) readClaimConfig(ctx context.Context, queue string) (*claimConfig, error) {
	var partitions int
	var text string
	err := s.on(nil).QueryRow(ctx, qQueueClaimConfig, queue).Scan(&partitions, &text)
	if errors.Is(err, sql.ErrNoRows) {
		s.queues.configs.Delete(queue)
		return nil, backends.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	cc, err := newClaimConfig(queue, text, partitions)
	if err != nil {
		return nil, err
	}
	return s.cacheConfig(queue, cc), nil
}

// cacheConfig makes cc the config the Store's pushes and claims use for
// queue, unless the cache holds the same text already, and returns the
// one cached (a claimConfig of the same text keeps its sweepAt).
func (s *Store) cacheConfig(queue string, cc *claimConfig) *claimConfig {
	if v, ok := s.queues.configs.Load(queue); ok && v.(*claimConfig).text == cc.text {
		return v.(*claimConfig)
	}
	s.queues.configs.Store(queue, cc)
	return cc
}
