package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	driver "github.com/go-sql-driver/mysql"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/internal/sqlstore"
	"github.com/coordd/coordd/spec"
)

// Push in one statement.
//
// Most pushes (no key, or a key on a queue whose unique is none; delayed or
// not) are one autocommit statement on MariaDB, qJobPushReturning: an
// INSERT ... RETURNING that checks, in the same statement, what a push
// used to read first in a transaction of its own:
//
//   - The config. The Store caches each queue's stored config text
//     (queueState.configs, which claims share), checks max_payload and
//     unique against it, and picks the partition with its partition count
//     (which the text holds). The statement reads the queue's row and fails
//     (rolling its insert back) unless the row exists and holds that text,
//     so a push never commits against a config it did not check, nor into
//     a queue that is gone. Then the Store reads the config again and
//     pushes again (at most maxConfigRefresh times), or reports
//     ErrNotFound.
//   - The order against config changes. The row is read LOCK IN SHARE
//     MODE and the lock held until the statement commits, as the push's
//     transaction used to: PutQueue (which may change the partition count
//     and move jobs out of removed partitions) and DeleteQueue take the row
//     exclusively, so a push and a config change serialise.
//   - The job's id and times, which RETURNING gives back: no read-back.
//   - Whether a worker may be parked on the queue (see queue_park.go): the
//     row's parked_until, read under the same lock. Only then does the push
//     read the processlist and KILL the parked statement (wakeQueue); a
//     push to a queue whose workers are all busy, or which has none, sends
//     nothing more.
//
// Concurrent pushes of one Store to one queue share that statement, one row
// each (see pushBatch).
//
// MySQL has no INSERT ... RETURNING: there a push is a transaction of an
// INSERT ... SELECT from the queue's row that checks the same (qJobPushFast)
// and a read of the new job (qJobPushed): the statements of the old push
// less the config read, the partition update and the separate wake-up.
//
// A job's partition is the shared store's (Core.JobPartition): the hash
// of its key, or round robin.
//
// A push with a key to a queue with unique pending or pending_or_running
// takes the shared store's path (pushUnique, sqlstore.PushJob): a
// transaction that reads the config LOCK IN SHARE MODE, looks for the
// duplicate with a locking read of the key's index range (so two pushes of
// one key serialise, or deadlock and the loser runs again and finds the
// winner's job), inserts and reads the job back.

const (
	// qJobPushFast (MySQL) inserts a ready job available at now + the
	// delay in microseconds, only where the queue's row holds the config
	// text the push checked (no row inserted: the queue is absent or its
	// config changed). MySQL 8's default innodb_autoinc_lock_mode 2 lets
	// INSERT ... SELECT statements run side by side. Arguments: partition,
	// payload, key, priority, delay, queue, config text.
	qJobPushFast = "INSERT INTO `{p}queue_jobs` (queue, `partition`, payload, unique_key, priority, attempt, state, available_at, enqueued_at, last_error)\n" +
		"SELECT q.name, ?, ?, ?, ?, 0, 'ready', " + nowSQL + " + ?, " + nowSQL + ", ''\n" +
		"FROM `{p}queues` q WHERE q.name = ? AND q.config = ? LOCK IN SHARE MODE"

	// qPushedParked is true when a worker may be parked on the queue: its
	// mark (qQueueParkMark) has not run out. The statement that uses it
	// holds the queue row's share lock. Argument: queue.
	qPushedParked = "(SELECT q.parked_until > " + nowSQL + " FROM `{p}queues` q WHERE q.name = ? LOCK IN SHARE MODE)"

	// qJobPushReturning (MariaDB) inserts a ready job available at now +
	// the delay in microseconds and returns its id, enqueue and available
	// times (the same instant throughout: the server fixes the time for
	// one statement) and whether a worker may be parked on the queue. It
	// reads the queue's row once, LOCK IN SHARE MODE, in RETURNING, after
	// the insert and before the commit: when the row is absent or holds
	// another config text than the push checked, the last column
	// evaluates a subquery that returns two rows, which fails the
	// statement (error 1242, errSubqueryRows) and rolls the insert back.
	// (An INSERT ... SELECT from the queue row would check the same, but
	// MariaDB's default innodb_autoinc_lock_mode 1 makes every INSERT ...
	// SELECT hold a table lock on the AUTO_INCREMENT counter until it
	// ends, which serialises all pushes; a plain INSERT takes it only for
	// a moment.) Arguments: queue, partition, payload, key, priority,
	// delay, config text, queue. Concurrent pushes of one Store to one queue go
	// together in one such statement (pushBatch): qJobPushRowsHead, a
	// qJobPushRow per job, qJobPushRowsTail.
	qJobPushReturning = qJobPushRowsHead + qJobPushRow + qJobPushRowsTail
	qJobPushRowsHead  = "INSERT INTO `{p}queue_jobs` (queue, `partition`, payload, unique_key, priority, attempt, state, available_at, enqueued_at, last_error)\nVALUES "
	qJobPushRow       = "(?, ?, ?, ?, ?, 0, 'ready', " + nowSQL + " + ?, " + nowSQL + ", '')"
	qJobPushRowsTail  = "\nRETURNING id, enqueued_at, available_at,\n" +
		"  COALESCE((SELECT IF(q.config = ?, q.parked_until > " + nowSQL + ", NULL) FROM `{p}queues` q WHERE q.name = ? LOCK IN SHARE MODE),\n" +
		"    (SELECT 1 UNION ALL SELECT 2))"

	// qJobPushed reads the same of the job just inserted, in the push's
	// transaction (MySQL). Arguments: queue, id.
	qJobPushed = "SELECT j.id, j.enqueued_at, j.available_at, " + qPushedParked + "\n" +
		"FROM `{p}queue_jobs` j WHERE j.id = ?"

	// qPushConfig reads a queue's partition count, config text and whether
	// a worker may be parked on it, under a shared lock on its row
	// (pushUnique). No row: the queue is absent.
	qPushConfig = "SELECT partitions, config, parked_until > " + nowSQL + " FROM `{p}queues` WHERE name = ? LOCK IN SHARE MODE"
)

// Push enqueues a job and, when a worker may be parked on the queue, wakes
// one. With unique set on the queue and a key, a job with the same key
// that is ready (or, under pending_or_running, running) is returned with
// ErrDuplicate instead. Most pushes are one statement (see the top of this
// file).
func (s *Store) Push(ctx context.Context, queue string, req backends.PushRequest) (backends.Job, error) {
	if err := backends.CheckPush(req); err != nil {
		return backends.Job{}, fmt.Errorf("push to queue %q: %w", queue, err)
	}
	if err := s.writable(ctx); err != nil {
		return backends.Job{}, fmt.Errorf("push to queue %q: %w", queue, err)
	}
	job, parked, err := s.push(ctx, queue, req)
	if err != nil {
		if !errors.Is(err, backends.ErrDuplicate) {
			job = backends.Job{}
		}
		return job, fmt.Errorf("push to queue %q: %w", queue, err)
	}
	if parked {
		// A job ready now wakes a parked worker; a delayed one too, so
		// that the worker re-parks with the job's available_at as its
		// bound.
		s.wakeQueue(ctx, queue, 1)
	}
	return job, nil
}

// push inserts the job and reports whether a worker may be parked on the
// queue.
func (s *Store) push(ctx context.Context, queue string, req backends.PushRequest) (backends.Job, bool, error) {
	for range maxConfigRefresh {
		cc, fresh, err := s.pushConfig(ctx, queue)
		if err != nil {
			return backends.Job{}, false, err
		}
		if err := backends.CheckPayload(len(req.Payload), cc.cfg.MaxPayload); err != nil {
			if fresh {
				return backends.Job{}, false, err
			}
			s.queues.configs.Delete(queue) // max_payload may have been raised since
			continue
		}
		if req.Key != "" && (cc.cfg.Unique == spec.UniquePending || cc.cfg.Unique == spec.UniquePendingOrRunning) {
			return s.pushUnique(ctx, queue, req)
		}
		job, parked, ok, err := s.pushFast(ctx, queue, cc, req)
		if err != nil || ok {
			return job, parked, err
		}
		// The stored config is not the one checked, or the queue is gone.
		s.queues.configs.Delete(queue)
	}
	return backends.Job{}, false, fmt.Errorf("the queue's config changed %d times in a row: %w", maxConfigRefresh, errRetry)
}

// pushConfig returns the queue's config as this Store last read it, or
// reads it (fresh) when it has none; ErrNotFound when the queue is absent.
func (s *Store) pushConfig(ctx context.Context, queue string) (*claimConfig, bool, error) {
	if v, ok := s.queues.configs.Load(queue); ok {
		return v.(*claimConfig), false, nil
	}
	cc, err := s.readClaimConfig(ctx, queue)
	return cc, true, err
}

// pushFast runs qJobPushFast. ok is false when it inserted nothing: the
// stored config is not cc's, or the queue is absent.
func (s *Store) pushFast(ctx context.Context, queue string, cc *claimConfig, req backends.PushRequest) (job backends.Job, parked, ok bool, err error) {
	job = backends.Job{Queue: queue, Payload: req.Payload, Key: req.Key, Priority: req.Priority}
	if job.Payload == nil {
		job.Payload = []byte{} // the column is NOT NULL
	}
	job.Partition = s.JobPartition(req.Key, cc.cfg.Partitions)
	if s.mariadb && !s.queues.pushTx.Load() {
		v, ok := s.queues.pushes.Load(queue)
		if !ok {
			v, _ = s.queues.pushes.LoadOrStore(queue, &pushGroup{})
		}
		it := &pushItem{cc: cc, job: job, delay: sqlstore.NonNegMicros(req.Delay), done: make(chan error, 1)}
		if err := s.pushGrouped(ctx, v.(*pushGroup), it); err != nil || it.miss {
			return backends.Job{}, false, false, err
		}
		return it.job, it.parked, true, nil
	}
	var enq, avail int64
	err = s.write(ctx, func(c conn) error {
		ok = false
		res, err := c.Exec(ctx, qJobPushFast, job.Partition, job.Payload, sqlstore.NullKey(job.Key), job.Priority, sqlstore.NonNegMicros(req.Delay), queue, cc.text)
		n, err := affected(res, err)
		if err != nil || n == 0 {
			return err
		}
		id, err := res.LastInsertId()
		if err != nil {
			return err
		}
		ok = true
		return c.QueryRow(ctx, qJobPushed, queue, id).Scan(&job.ID, &enq, &avail, &parked)
	})
	if err != nil || !ok {
		return backends.Job{}, false, false, err
	}
	job.EnqueuedAt, job.AvailableAt = fromMicros(enq), fromMicros(avail)
	return job, parked, true, nil
}

// Batched pushes (MariaDB). Concurrent pushes of one Store to one queue go
// together in one statement (pushGroup): one round trip, one read of the
// queue's row and one commit for them all, each still getting its own job.
const (
	// maxPushBatch bounds the jobs of one batch.
	maxPushBatch = 64
	// pushRowBytes bounds what one row adds to the statement besides its
	// escaped payload and key.
	pushRowBytes = 160
)

// pushItem is one push of a batch: its checked config and job in, the
// job's id and times, and whether a worker may be parked, out. miss: the
// statement's config check failed (the config changed or the queue is
// gone), and nothing was pushed.
type pushItem struct {
	cc     *claimConfig
	job    backends.Job
	delay  int64
	parked bool
	miss   bool
	done   chan error // buffered: a round never blocks on its caller
}

// pushGroup gathers one queue's pushes into batches. A push that finds
// fewer than maxPushRounds batches on their way starts one: it first
// yields the processor until no push arrived for pushGatherQuiet (at most
// pushGatherMax), since pushes tend to come from callers that got their
// last answer together, then sends what is pending; later arrivals wait
// for the next round. Up to maxPushRounds rounds overlap, so that a push
// seldom waits for a whole round before its own starts. Eight producers on
// this repository's 2-core test machine (make bench-peers, same runs
// against a plain INSERT): 3 rounds 0.96-0.99x, 2 rounds 0.84-0.97x, 4
// rounds 0.87x; without gathering every count was slower (batches of 1
// to 4 jobs: each statement pays the queue row's read and its commit).
// More rounds at once contend on the last pages of the job indexes.
type pushGroup struct {
	mu      sync.Mutex
	pending []*pushItem
	running int // rounds on their way
}

// Bounds of a pushGroup.
const (
	maxPushRounds   = 3
	pushGatherQuiet = 50 * time.Microsecond
	pushGatherMax   = 500 * time.Microsecond
)

// pushGrouped queues it and waits for its result. The caller that starts
// a round runs it (its own push in it); if pushes are still pending after
// that, a goroutine runs the next rounds until none is. A push whose ctx
// ends while it waits returns ctx's error, and its job may be pushed
// anyway (as when a single statement's answer is lost).
func (s *Store) pushGrouped(ctx context.Context, g *pushGroup, it *pushItem) error {
	g.mu.Lock()
	g.pending = append(g.pending, it)
	lead := g.running < maxPushRounds
	if lead {
		g.running++
	}
	g.mu.Unlock()
	if lead {
		g.gather()
		if s.pushRound(ctx, g) {
			go func() {
				for s.pushRound(ctx, g) {
				}
			}()
		}
	}
	select {
	case err := <-it.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// gather lets the pushes on their way join the next round.
func (g *pushGroup) gather() {
	start := time.Now()
	last := start
	g.mu.Lock()
	n := len(g.pending)
	g.mu.Unlock()
	for {
		runtime.Gosched()
		now := time.Now()
		g.mu.Lock()
		m := len(g.pending)
		g.mu.Unlock()
		switch {
		case m >= maxPushBatch:
			return
		case m > n:
			n, last = m, now
		case now.Sub(last) >= pushGatherQuiet || now.Sub(start) >= pushGatherMax:
			return
		}
	}
}

// pushRound runs one batch of g's pending pushes and reports whether more
// are pending; when none is, it gives its round up.
func (s *Store) pushRound(ctx context.Context, g *pushGroup) bool {
	g.mu.Lock()
	n := min(len(g.pending), maxPushBatch)
	batch := g.pending[:n:n]
	g.pending = g.pending[n:]
	g.mu.Unlock()
	if n > 0 {
		// The batch runs for several callers, so it follows none of
		// their contexts.
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ackTimeout)
		errs := s.pushBatch(bctx, batch)
		cancel()
		for i, it := range batch {
			it.done <- errs[i]
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.pending) == 0 {
		g.pending = nil // let the array go
		g.running--
		return false
	}
	return true
}

// pushBatch inserts a batch of one queue's jobs: one statement per run of
// jobs checked against one config, each within the packet limit
// (pushChunks).
func (s *Store) pushBatch(ctx context.Context, batch []*pushItem) []error {
	errs := make([]error, len(batch))
	limit, err := s.packetLimit(ctx)
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	for _, c := range pushChunks(batch, limit) {
		err := s.pushRows(ctx, batch[c[0]:c[1]])
		for i := c[0]; i < c[1]; i++ {
			errs[i] = err
		}
	}
	return errs
}

// pushChunks splits batch into runs [from, to) that share a config and
// whose statement stays within limit bytes (a single job always fits: the
// queue's max_payload leaves payloadHeadroom for the rest).
func pushChunks(batch []*pushItem, limit int64) [][2]int {
	var out [][2]int
	from, size := 0, int64(0)
	for i, it := range batch {
		row := 2*int64(len(it.job.Payload)+len(it.job.Key)) + pushRowBytes
		if i > from && (it.cc != batch[from].cc || size+row > limit-payloadHeadroom) {
			out = append(out, [2]int{from, i})
			from, size = i, 0
		}
		size += row
	}
	return append(out, [2]int{from, len(batch)})
}

// pushRows runs one qJobPushReturning for rows (one queue, one config).
func (s *Store) pushRows(ctx context.Context, rows []*pushItem) error {
	cc := rows[0].cc
	queue := cc.cfg.Name
	args := make([]any, 0, 6*len(rows)+2)
	for _, it := range rows {
		args = append(args, queue, it.job.Partition, it.job.Payload, sqlstore.NullKey(it.job.Key), it.job.Priority, it.delay)
	}
	args = append(args, cc.text, queue)
	query := qJobPushReturning
	if len(rows) > 1 {
		query = qJobPushRowsHead + tuples(qJobPushRow, len(rows)) + qJobPushRowsTail
	}
	err := s.retry(ctx, func() error {
		rs, err := s.on(nil).Query(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rs.Close()
		n := 0
		for ; rs.Next(); n++ {
			if n == len(rows) {
				return fmt.Errorf("push returned more than its %d jobs", len(rows))
			}
			it := rows[n]
			var enq, avail int64
			if err := rs.Scan(&it.job.ID, &enq, &avail, &it.parked); err != nil {
				return err
			}
			it.job.EnqueuedAt, it.job.AvailableAt = fromMicros(enq), fromMicros(avail)
		}
		if err := rs.Err(); err != nil {
			return err
		}
		if n != len(rows) {
			return fmt.Errorf("push of %d jobs returned %d", len(rows), n)
		}
		return nil
	})
	if isSubqueryRows(err) {
		for _, it := range rows {
			it.miss = true
		}
		return nil
	}
	return err
}

// packetLimit is the most bytes one statement may take: the smaller of the
// server's max_allowed_packet, read once, and the driver's own limit.
func (s *Store) packetLimit(ctx context.Context) (int64, error) {
	if p := s.queues.packet.Load(); p > 0 {
		return p, nil
	}
	var packet int64
	if err := s.on(nil).QueryRow(ctx, qMaxPacket).Scan(&packet); err != nil {
		return 0, fmt.Errorf("read max_allowed_packet: %w", err)
	}
	if s.clientPacket > 0 && s.clientPacket < packet {
		packet = s.clientPacket
	}
	s.queues.packet.Store(packet)
	return packet, nil
}

// errSubqueryRows is MySQL's error 1242, "Subquery returns more than 1
// row": qJobPushReturning's failed config check.
const errSubqueryRows = 1242

// isSubqueryRows reports error 1242.
func isSubqueryRows(err error) bool {
	var me *driver.MySQLError
	return errors.As(err, &me) && me.Number == errSubqueryRows
}

// pushUnique pushes a job with a key to a queue with unique pending or
// pending_or_running: in a transaction that reads the config under a
// shared lock, then pushes as the shared store does (sqlstore.PushJob),
// locking the key's duplicates first.
func (s *Store) pushUnique(ctx context.Context, queue string, req backends.PushRequest) (backends.Job, bool, error) {
	var job backends.Job
	var parked bool
	err := s.write(ctx, func(c conn) error {
		var partitions int
		var text string
		err := c.QueryRow(ctx, qPushConfig, queue).Scan(&partitions, &text, &parked)
		if errors.Is(err, sql.ErrNoRows) {
			s.queues.configs.Delete(queue)
			return backends.ErrNotFound
		}
		if err != nil {
			return err
		}
		cc, err := newClaimConfig(queue, text, partitions)
		if err != nil {
			return err
		}
		cc = s.cacheConfig(queue, cc)
		job, err = sqlstore.PushJob(ctx, c, s.dialect, cc.cfg, s.JobPartition(req.Key, cc.cfg.Partitions), req)
		return err
	})
	return job, parked, err
}

// PushOnce is the shared store's PushOnce (one transaction), then the
// wake-up of a parked worker a push owes it.
func (s *Store) PushOnce(ctx context.Context, queue, once string, req backends.PushRequest) (backends.Job, bool, error) {
	if err := s.writable(ctx); err != nil {
		return backends.Job{}, false, fmt.Errorf("push to queue %q: %w", queue, err)
	}
	job, pushed, err := s.Core.PushOnce(ctx, queue, once, req)
	if err == nil && pushed {
		s.wakeQueue(ctx, queue, 1)
	}
	return job, pushed, err
}
