package mysql

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/internal/group"
	"github.com/coordd/coordd/spec"
)

// Idle queue workers: the SLEEP/KILL wake-up of park.go applied to
// queues.
//
// WaitQueue takes a dedicated connection (Store.dedicate; it goes back to
// the free list afterwards, so a worker that waits again reuses it) and
// parks it in one statement, qQueuePark, that both checks and sleeps:
//
//	SELECT '<tag>', d, fallback, SLEEP(d) FROM (... d computed from the jobs ...)
//
// d is 0 when a job is claimable now (ready with available_at <= now and,
// under claim partition, not waiting behind an earlier job of its key) or a
// running job's visibility expired (Claim makes it ready again); otherwise
// the time until the earliest of those events (a delayed job's
// available_at, a running job's expires_at), at most what is left of max.
// Since the check and the sleep are one statement, no wake-up is lost and
// no lock is needed: the statement is in the processlist before it reads
// the jobs (the server sets its text when it starts executing it), so a
// push that commits after that read finds the statement in the processlist
// and KILL QUERYs it, and a push that committed before it is seen by the
// read. A KILL that lands before SLEEP starts ends the statement as well
// (error 1317).
//
// Push (of a ready or a delayed job), RequeueDead, Retry (the job went back
// to the queue, or a job with a key died), Ack of a job with a key (the
// next job of its key may start) and PutQueue (jobs moved out of removed
// partitions) then
// wake parked workers with Store.wakeParked on the queue's channel
// (channel("queue", name)): one per job, oldest ticket first; the ticket is
// the host time at which the worker started waiting, so the longest idle
// worker goes first (roughly, across hosts). A woken worker runs the
// statement again rather than returning: it returns when that finds a job
// claimable (d = 0), or when its SLEEP ran out (an event or max). A push of
// a delayed job therefore costs the woken worker one statement and gives it
// the new job's available_at as its bound.
//
// A waker reads the processlist, then kills. When the parked statement
// ended by itself in between, the KILL finds the connection idle (it then
// does nothing) or running its next statement, which it ends: a spurious
// wake-up of the next park, which looks again.
//
// A push reads the processlist only when a worker may be parked: before
// it parks, a worker marks the queue's row (qQueueParkMark: parked_until,
// a backend time past the end of its park), and the push's statement reads
// the mark under the share lock it takes on the same row (queue_push.go).
// The mark's write takes the row exclusively, so the two serialise: a push
// that read no mark committed before the mark was written, hence before
// the worker's park read the jobs, and that read sees the push's job; a
// push that came after the mark sees it and wakes the worker. A worker
// marks ahead (parkMarkAhead) and marks again only when its next park
// would outlast its last mark, so an idle worker writes the row about once
// per parkMarkAhead; a mark outlives the parks it covers by at most that,
// and pushes meanwhile read the processlist as they always did. A worker
// of a binary older than the mark does not write it, and a push of this
// one does not wake it: during a rolling upgrade such a worker wakes at the
// end of its SLEEP. The other wakers (Retry, RequeueDead, PutQueue, the
// ack of a job with a key) read no mark and always read the processlist.
//
// Privileges: the processlist lists other users' connections only with
// PROCESS, and KILL QUERY of another user's connection needs CONNECTION
// ADMIN (MariaDB 10.5+, MySQL 8) or SUPER. Hosts that all connect as one
// MySQL user need neither. When a push finds a parked worker it may not
// kill (error 1095, ErrKillDenied), the push still succeeds; the pusher
// remembers the denial on its Store and marks the queue in the database
// (qQueueDeniedMark), and parked workers of every host, seeing the mark or
// their own store's denial, fall back to a bounded backoff: SLEEPs from
// queueFallbackMin doubling to queueFallbackMax, each checking the queue
// again, so a job waits at most about queueFallbackMax. The worker that was
// parked when the first denial happened learns it only when its SLEEP ends
// (at most max). The mark lapses queueDeniedTTL after the last denial. A
// pusher without PROCESS sees no other user's worker at all, gets no
// denial and sets no mark: such workers wake at the end of their SLEEP.

// Fallback when KILL QUERY is denied.
const (
	// queueFallbackMin and queueFallbackMax bound the SLEEPs of a parked
	// worker that may not be woken: each park sleeps at most the current
	// backoff, which doubles from queueFallbackMin to queueFallbackMax.
	// queueFallbackMax is the latency a push then has at most (besides
	// the claim), and one statement per queueFallbackMax is what an idle
	// worker costs.
	queueFallbackMin = 50 * time.Millisecond
	queueFallbackMax = time.Second
	// queueDeniedTTL is how long a denied wake-up keeps parked workers in
	// the fallback: the store's own workers after its last denial, and
	// every host's workers after the last mark in the database.
	queueDeniedTTL = 10 * time.Minute
	// queueDeniedRefresh is how often a store whose wake-ups are denied
	// renews the mark in the database (per queue), at most.
	queueDeniedRefresh = time.Minute
	// wakeTimeout bounds a wake-up sent after a push committed; it does
	// not follow the caller's context, since the push is done.
	wakeTimeout = 5 * time.Second
	// maxWake bounds the workers one call wakes (RequeueDead of many jobs).
	maxWake = 64
	// parkMarkAhead is how far past a park's end a worker's mark reaches
	// at least (qQueueParkMark), so that parks shorter than it (a
	// draining worker's, a re-park after a wake-up) seldom write it again.
	parkMarkAhead = 5 * time.Second
)

const (
	// qQueuePark is the parked statement of WaitQueue after the tag column
	// that parkQueue prepends. Columns: d, the seconds the statement sleeps;
	// fallback, true when d is the fallback backoff (nothing else bounded
	// it); then SLEEP(d). No row: the queue is absent (WaitQueue returns at
	// once and Claim reports it). d is the least of what is left of max,
	// the seconds until the earliest ready job's available_at or running
	// job's expires_at (0 when one is due already), and, in the fallback,
	// the backoff. The fallback applies when the caller says so (its store
	// was denied a wake-up) or the queue is marked (qQueueDeniedMark: another
	// store was). With keys (claim partition), a ready job waiting behind an
	// earlier job of its key counts for nothing: it becomes claimable only
	// by an ack, a retry or a death, which wake the worker, or by a lease
	// expiring, which counts. Arguments: left, backoff (seconds), the
	// store's denial, keys, queue. The nested derived tables compute each value once; MariaDB may
	// merge them, which changes nothing, since the server fixes now and the
	// read view for the whole statement.
	qQueuePark = "p.d, p.fallback, SLEEP(p.d) FROM (\n" +
		"  SELECT LEAST(e.lft, e.wait, IF(e.denied, e.backoff, e.lft)) AS d,\n" +
		"    e.denied AND e.backoff < LEAST(e.lft, e.wait) AS fallback\n" +
		"  FROM (SELECT ? AS lft, ? AS backoff,\n" +
		"      (? OR COALESCE((SELECT pt.expires_at FROM `{p}queue_partitions` pt\n" +
		"        WHERE pt.queue = q.name AND pt.`partition` = 0), 0) > " + nowSQL + ") AS denied,\n" +
		"      GREATEST(0, LEAST(\n" +
		"        COALESCE((SELECT j.available_at FROM `{p}queue_jobs` j FORCE INDEX (queue_jobs_state)\n" +
		"          WHERE j.queue = q.name AND j.state = 'ready' AND (NOT ? OR " + claimKeyFree + ")\n" +
		"          ORDER BY j.available_at LIMIT 1), " + farFuture + "),\n" +
		"        COALESCE((SELECT MIN(j.expires_at) FROM `{p}queue_jobs` j WHERE j.queue = q.name AND j.state = 'running'), " + farFuture + ")\n" +
		"      ) - " + nowSQL + ") / 1000000 AS wait\n" +
		"    FROM `{p}queues` q WHERE q.name = ?) e\n" +
		") p"

	// farFuture stands for "no such job" in qQueuePark: 2^62 µs, far past
	// any max.
	farFuture = "4611686018427387904"

	// qQueueParkMark marks that a worker may be parked on the queue until
	// now + a duration in microseconds (or later, if another worker's mark
	// reaches further). Pushes read the mark (qPushedParked) and wake
	// workers only while it lasts. Arguments: the duration, queue.
	qQueueParkMark = "UPDATE `{p}queues` SET parked_until = GREATEST(parked_until, " + nowSQL + " + ?) WHERE name = ?"

	// qQueueDeniedMark marks a queue whose wake-ups were denied until now +
	// a duration in microseconds. The mark lives in the expires_at column of
	// partition 0's lock row, which the partition claim does not use (it
	// locks the row instead) and which every queue has. Arguments: the
	// duration, queue.
	qQueueDeniedMark = "UPDATE `{p}queue_partitions` SET expires_at = " + nowSQL + " + ? WHERE queue = ? AND `partition` = 0"
)

// queueState is what a Store keeps for its queues: the ack batcher and
// what it remembers about wake-ups.
type queueState struct {
	acks   group.Batcher[backends.Job]
	claims group.Claimer[backends.Job]
	// configs maps a queue to the config its last claim saw
	// (*claimConfig), which the next claim script checks (Claim).
	configs sync.Map
	// denied is when a wake-up of this store was last denied (Unix
	// nanoseconds, 0 never).
	denied atomic.Int64
	// marked maps a queue to when this store last marked it denied in the
	// database (*atomic.Int64, Unix nanoseconds).
	marked sync.Map
	// parkMarks maps a queue to the end of this store's last park mark
	// (*atomic.Int64, host monotonic time as a duration since monoBase).
	parkMarks sync.Map
	// pushes maps a queue to the batcher of its pushes
	// (*group.Batcher[*pushItem], queue_push.go).
	pushes sync.Map
	// packet is the most bytes one statement may take (packetLimit; 0:
	// not read yet).
	packet atomic.Int64
	// pushTx makes pushes take MySQL's path (a transaction) on MariaDB
	// too; tests set it.
	pushTx atomic.Bool
}

// markParked makes sure that the queue's park mark (qQueueParkMark)
// lasts at least park beyond now, writing it when this store's last mark
// does not. The mark is written before the park, and a push reads it
// under a lock that the write waits for (see the top of this file).
func (s *Store) markParked(ctx context.Context, queue string, park time.Duration) error {
	v, _ := s.queues.parkMarks.LoadOrStore(queue, new(atomic.Int64))
	until := v.(*atomic.Int64)
	sent := time.Since(monoBase)
	if time.Duration(until.Load()) >= sent+park {
		return nil
	}
	ahead := park + parkMarkAhead
	if _, err := s.autocommit(ctx, qQueueParkMark, ahead.Microseconds(), queue); err != nil {
		return fmt.Errorf("mark the queue parked: %w", err)
	}
	// The server's now is at or after sent, so the mark lasts at least
	// until sent + ahead.
	for {
		old := until.Load()
		if old >= int64(sent+ahead) || until.CompareAndSwap(old, int64(sent+ahead)) {
			return nil
		}
	}
}

// killDenied reports whether a wake-up of s was denied within
// queueDeniedTTL.
func (qs *queueState) killDenied() bool {
	at := qs.denied.Load()
	return at != 0 && time.Since(time.Unix(0, at)) < queueDeniedTTL
}

// wakeQueue wakes up to n workers parked on queue after a change that made
// jobs ready (or brought a delayed job's available_at closer). The change
// is committed, so a failure only delays the workers until their SLEEP
// ends, and is not returned; ctx's cancellation does not stop it. A denied
// KILL is remembered and marked (queueState, qQueueDeniedMark).
func (s *Store) wakeQueue(ctx context.Context, queue string, n int) {
	if n < 1 {
		return
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wakeTimeout)
	defer cancel()
	if _, err := s.wakeParked(wctx, s.channel("queue", queue), n); errors.Is(err, ErrKillDenied) {
		s.markDenied(wctx, queue)
	}
}

// markDenied records a denied wake-up of queue: on the store at once, and
// in the database at most every queueDeniedRefresh.
func (s *Store) markDenied(ctx context.Context, queue string) {
	qs := &s.queues
	now := time.Now()
	qs.denied.Store(now.UnixNano())
	v, _ := qs.marked.LoadOrStore(queue, new(atomic.Int64))
	last := v.(*atomic.Int64)
	prev := last.Load()
	if prev != 0 && now.Sub(time.Unix(0, prev)) < queueDeniedRefresh {
		return
	}
	if !last.CompareAndSwap(prev, now.UnixNano()) {
		return // another push is marking it
	}
	if _, err := s.autocommit(ctx, qQueueDeniedMark, queueDeniedTTL.Microseconds(), queue); err != nil {
		last.Store(prev) // try again with the next denial
	}
}

// queuePark is how one parked statement ended.
type queuePark struct {
	absent   bool // no row: the queue does not exist
	woken    bool // a KILL QUERY ended it (a wake-up)
	fallback bool // it slept the fallback backoff, nothing else bounded it
}

// parkQueue runs qQueuePark on d, tagged with tag, and reports how it
// ended. It is Store.park with the statement's columns read, since
// WaitQueue needs to know why the statement ended.
func (s *Store) parkQueue(ctx context.Context, d *dedicated, tag, queue string, left, backoff time.Duration, denied, keys bool) (queuePark, error) {
	var r queuePark
	s.pool.CountTrip()
	err := s.interruptible(ctx, d, left+30*time.Second, func(rctx context.Context) error {
		rows, err := d.conn.QueryContext(rctx, "SELECT ?, "+s.q(qQueuePark),
			tag, sleepSeconds(left), sleepSeconds(backoff), denied, keys, queue)
		if err != nil {
			return err
		}
		defer rows.Close()
		if !rows.Next() {
			r.absent = true
			return rows.Err()
		}
		var tagCol string
		var slept float64
		var interrupted int64
		if err := rows.Scan(&tagCol, &slept, &r.fallback, &interrupted); err != nil {
			return err
		}
		r.woken = interrupted == 1 // SLEEP returns 1 when killed, where the server does not fail the statement
		return rows.Err()
	})
	switch {
	case errors.Is(err, errInterruptedStmt):
		return queuePark{woken: true}, nil
	case err != nil:
		return queuePark{}, err
	}
	return r, nil
}

// WaitQueue parks an idle worker until a job may be claimable (one is
// ready and available, or a running job's visibility expired), maxWait
// elapsed or ctx ended. It returns nil in the first two cases and ctx's
// error in the last. An absent queue (or a store never migrated) returns
// nil at once, so that Claim reports it. While nothing happens it sends one
// statement per maxWait (the park), or one per backoff step in the
// fallback (see the comment at the top of this file).
func (s *Store) WaitQueue(ctx context.Context, queue string, maxWait time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	waitErr := func(err error) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("wait queue %q: %w", queue, err)
	}
	ok, err := s.hasSchema(ctx)
	if err != nil {
		return waitErr(err)
	}
	if !ok {
		return nil
	}
	deadline := time.Now().Add(maxWait)
	if maxWait < time.Millisecond {
		return nil
	}
	d, err := s.dedicate(ctx)
	if err != nil {
		return waitErr(fmt.Errorf("dedicated connection: %w", err))
	}
	// A random tail breaks ties between workers that start in the same
	// microsecond; the ticket stays the same across re-parks.
	tag := parkTag(s.channel("queue", queue), time.Now().UnixMicro()*16+rand.Int64N(16))
	qs := &s.queues
	// The claim mode of the queue's last claim: claim partition holds a
	// job back behind its key, claim skip_locked does not. Unknown (no
	// claim yet): a job is claimable when ready, and a claim finds out.
	keys := false
	if v, ok := qs.configs.Load(queue); ok {
		keys = v.(*claimConfig).cfg.Claim != spec.ClaimSkipLocked
	}
	backoff := queueFallbackMin
	for {
		if err := ctx.Err(); err != nil {
			s.undedicate(d)
			return err
		}
		left := time.Until(deadline)
		if left < time.Millisecond {
			s.undedicate(d)
			return nil
		}
		if err := s.markParked(ctx, queue, left); err != nil {
			s.undedicate(d)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return waitErr(err)
		}
		r, err := s.parkQueue(ctx, d, tag, queue, left, backoff, qs.killDenied(), keys)
		switch {
		case err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()):
			s.undedicate(d) // parkQueue killed the statement; the connection is fine
			return err
		case err != nil:
			d.discard()
			return waitErr(err)
		case r.woken:
			// Look again: the statement returns at once when the push
			// made a job claimable, and otherwise parks with the new bound.
		case r.fallback:
			backoff = min(2*backoff, queueFallbackMax)
		default:
			s.undedicate(d)
			return nil // absent, claimable now, an event came due, or max elapsed
		}
	}
}
