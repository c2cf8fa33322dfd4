package redis

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/internal/group"
)

// The queue runtime. A claim is one script that sweeps (due delayed jobs
// into the ready sets, expired leases back to them or to the dead list)
// and leases the claimable jobs in claim order (priority, then push
// order), whatever their partition, to each caller (queueClaimScript); Ack,
// Retry and ExtendJob are one script each and check the owner token
// recorded with the job, so that a job whose lease expired and that
// another worker claimed is never touched by its old owner (ErrLost).
//
// Concurrent claims of one Store on one queue go in one script
// (group.Claimer), and concurrent acks of one Store in one script per
// queue (queueAckBatcher, several queues in one pipeline): a caller that
// finds none running sends at once, and those that arrive meanwhile go
// together in the next round trip.
//
// Idle workers block in WaitQueue with BLPOP on the queue's wake list, on a
// connection of their own (queueBlocking).

// queueJobAt reads the queueJobFields fields of one job from res at i.
func queueJobAt(queue string, res []any, i int) backends.Job {
	j := backends.Job{
		ID: queueInt(res[i]), Queue: queue, Partition: int(queueInt(res[i+1])), Attempt: int(queueInt(res[i+2])),
		EnqueuedAt: queueTime(queueInt(res[i+3])), AvailableAt: queueTime(queueInt(res[i+4])),
		Key: queueStr(res[i+5]), LastError: queueStr(res[i+6]), Priority: int(queueInt(res[i+7])),
		Payload: []byte(queueStr(res[i+8])),
	}
	return j
}

// Push enqueues a job (queuePushScript): ErrNotFound, ErrPayloadTooLarge,
// or ErrDuplicate with the existing job. Concurrent pushes of this Store to
// one queue go in batches, one script each (pushBatch; queueInfo.pushes):
// a push that finds fewer than queuePushRounds batches in flight is sent
// at once, those that arrive meanwhile go together in the next round trip. Once its batch is sent, a push is carried out even if
// ctx ends, like a request whose reply was lost.
func (s *Store) Push(ctx context.Context, queue string, req backends.PushRequest) (backends.Job, error) {
	if err := backends.CheckPush(req); err != nil {
		return backends.Job{}, fmt.Errorf("push to queue %q: %w", queue, err)
	}
	if err := s.writable(); err != nil {
		return backends.Job{}, err
	}
	p := &queuePush{req: req}
	err := s.queueInfo(queue).pushes.Do(ctx, p, func(ctx context.Context, batch []*queuePush) []error {
		return s.pushBatch(ctx, queue, batch)
	})
	if err != nil {
		return backends.Job{}, fmt.Errorf("push to queue %q: %w", queue, err)
	}
	return s.pushReply(queue, req, p.res)
}

// pushReply is a push's job or error from its reply.
func (s *Store) pushReply(queue string, req backends.PushRequest, res []any) (backends.Job, error) {
	switch queueInt(res[0]) {
	case 1:
		return backends.Job{
			ID: queueInt(res[1]), Queue: queue, Partition: int(queueInt(res[2])), Payload: req.Payload, Key: req.Key,
			Priority: req.Priority, EnqueuedAt: queueTime(queueInt(res[3])), AvailableAt: queueTime(queueInt(res[4])),
		}, nil
	case -2:
		return backends.Job{}, fmt.Errorf("push to queue %q: payload of %d bytes exceeds max_payload %d: %w",
			queue, queueInt(res[1]), queueInt(res[2]), backends.ErrPayloadTooLarge)
	case -3:
		j := queueJobAt(queue, res, 1)
		if exp := queueInt(res[1+queueJobFields]); exp > 0 {
			j.ExpiresAt = queueTime(exp)
			j.Owner = queueStr(res[2+queueJobFields])
		}
		return j, fmt.Errorf("push to queue %q: key %q is pending as job %d: %w", queue, req.Key, j.ID, backends.ErrDuplicate)
	}
	return backends.Job{}, fmt.Errorf("push to queue %q: script status %v", queue, res[0])
}

// PushOnce pushes req unless once was pushed to queue before: the check,
// the push and the record in one script call (queuePushScript with the
// once key), outside the batches of Push.
func (s *Store) PushOnce(ctx context.Context, queue, once string, req backends.PushRequest) (backends.Job, bool, error) {
	if err := backends.CheckPushOnce(once); err != nil {
		return backends.Job{}, false, fmt.Errorf("push to queue %q: %w", queue, err)
	}
	if err := backends.CheckPush(req); err != nil {
		return backends.Job{}, false, fmt.Errorf("push to queue %q: %w", queue, err)
	}
	if err := s.writable(); err != nil {
		return backends.Job{}, false, err
	}
	p := &queuePush{req: req, once: once}
	if err := s.pushBatch(ctx, queue, []*queuePush{p})[0]; err != nil {
		return backends.Job{}, false, fmt.Errorf("push to queue %q: %w", queue, err)
	}
	if queueInt(p.res[0]) == 3 {
		return backends.Job{ID: queueInt(p.res[1]), Queue: queue}, false, nil
	}
	j, err := s.pushReply(queue, req, p.res)
	if errors.Is(err, backends.ErrDuplicate) {
		return j, false, nil
	}
	return j, err == nil, err
}

// PrunePushOnce deletes nothing: each push once sweeps old records.
func (s *Store) PrunePushOnce(context.Context, time.Duration) (int, error) { return 0, nil }

// queuePush is one Push in its batch; res is its reply (queuePushScript).
// once is the once key of a PushOnce, which goes in a batch of its own.
type queuePush struct {
	req  backends.PushRequest
	once string
	res  []any
}

// The bounds of one batch of pushes: jobs, and payload and key bytes (a
// batch is one script call, which Redis reads whole before it runs it).
const (
	queueMaxPushBatch      = 128
	queueMaxPushBatchBytes = 1 << 20
)

// queuePushRounds is how many batches of pushes to one queue a Store has
// in flight at once. Pushes from a few producers are bound by the chain of
// round trips, not by CPU (16 producers: the client and the server used
// 1.1 of the 2 cores of the test machine with one batch in flight, 8 jobs
// a script); a second batch in flight overlaps that chain at the price of
// smaller batches (4.8 jobs a script). Same-run averages of six runs
// against asynq: 0.91x with 1, 1.02x with 2, 0.98x with 3.
const queuePushRounds = 2

// queuePushTimeout bounds a batch of pushes, which runs for several callers
// and so follows none of their contexts.
const queuePushTimeout = 30 * time.Second

// pushBatch runs queuePushScript for batch, split into runs within
// queueMaxPushBatchBytes (a single job always goes, whatever its size), and
// sets each push's reply.
func (s *Store) pushBatch(ctx context.Context, queue string, batch []*queuePush) []error {
	errs := make([]error, len(batch))
	for from := 0; from < len(batch); {
		to, size := from+1, len(batch[from].req.Payload)+len(batch[from].req.Key)
		for ; to < len(batch); to++ {
			n := len(batch[to].req.Payload) + len(batch[to].req.Key)
			if size+n > queueMaxPushBatchBytes {
				break
			}
			size += n
		}
		run := batch[from:to]
		res, err := s.runQueueScript(ctx, queuePushScript, queue, func(sets int) []any {
			args := make([]any, 1, 1+5*len(run))
			args[0] = len(run)
			for _, p := range run {
				part := 0
				if p.req.Key != "" {
					part = backends.KeyPartition(p.req.Key, sets)
				}
				args = append(args, p.req.Payload, p.req.Key, part, queueMicros(p.req.Delay), p.req.Priority)
			}
			if len(run) == 1 && run[0].once != "" {
				args = append(args, run[0].once)
			}
			return args
		})
		switch {
		case err != nil:
		case queueInt(res[0]) == 0:
			err = backends.ErrNotFound
		case queueInt(res[0]) == 4 && len(res) == 2:
			err = fmt.Errorf("queue script: job id %d would reach %d, past which a ready-set score (id - priority * 2^45) "+
				"is no longer exact; the ids start at the server's clock in µs, which gets there in the year 2143: "+
				"was the id counter set behind coordd's back?", queueInt(res[1]), queueIDLimit)
		case queueInt(res[0]) == 3 && len(res) == 2 && len(run) == 1:
			run[0].res = res
			from = to
			continue
		case queueInt(res[0]) == 2 && len(res) == 4:
			pushedAll(run, queueInt(res[1]), queueInt(res[2]), int(queueInt(res[3])))
			from = to
			continue
		case queueInt(res[0]) != 1 || len(res) != 1+len(run):
			err = fmt.Errorf("queue script: push of %d jobs got %d replies (status %v)", len(run), len(res)-1, res[0])
		}
		for i, p := range run {
			if errs[from+i] = err; err == nil {
				if p.res, _ = res[1+i].([]any); len(p.res) == 0 {
					errs[from+i] = fmt.Errorf("queue script: reply %v for a push", res[1+i])
				}
			}
		}
		from = to
	}
	return errs
}

// pushedAll sets each push's reply from the script's short reply for a
// batch pushed whole (queuePushScript): ids from first in batch order, all
// enqueued at now, a keyless job in partition id % partitions.
func pushedAll(run []*queuePush, first, now int64, partitions int) {
	for i, p := range run {
		id, part := first+int64(i), 0
		if p.req.Key != "" {
			part = backends.KeyPartition(p.req.Key, partitions)
		} else if partitions > 0 {
			part = int(id % int64(partitions))
		}
		p.res = []any{int64(1), id, int64(part), now, now + queueMicros(p.req.Delay)}
	}
}

// Claim sweeps and then leases up to max claimable jobs to owner, the
// highest priority first and the oldest first within one, whatever their
// partition, at most one of a key and none of a key that has a job running
// or an older job waiting (queueClaimScript), and returns them in that
// order, the script's. Concurrent claims of this Store on
// one queue go together in one script (group.Claimer); once its group
// is sent, a Claim waits for the reply even if ctx ends, so that no job is
// leased to a caller that left.
func (s *Store) Claim(ctx context.Context, queue, owner string, max int) ([]backends.Job, error) {
	if err := s.writable(); err != nil {
		return nil, err
	}
	if err := backends.CheckClaimJobs(queue, owner, max); err != nil {
		return nil, err
	}
	jobs, err := s.queues.claims.Claim(ctx, queue, owner, max, s.claimGroup)
	if err != nil {
		return nil, backends.ClaimJobsError(queue, owner, err)
	}
	return jobs, nil
}

// queueMaxClaimGroup bounds the jobs one grouped claim asks for (the
// members' max summed); a claim asking for more goes alone.
const queueMaxClaimGroup = 512

// claimGroup runs one claim script for group (no member: WaitQueue's look,
// which only sweeps) and returns each member's jobs. It records what an
// empty claim learnt for WaitQueue.
func (s *Store) claimGroup(ctx context.Context, queue string, group []*group.Claim[backends.Job]) ([][]backends.Job, error) {
	args := make([]any, 0, 1+2*len(group))
	args = append(args, len(group))
	for _, r := range group {
		args = append(args, r.Owner, r.Max)
	}
	sent := time.Now()
	res, err := s.runQueueScript(ctx, queueClaimScript, queue, queueArgs(args...))
	if err != nil {
		return nil, err
	}
	qi := s.queueInfo(queue)
	if queueInt(res[0]) == 0 {
		qi.idle.Store(nil)
		return nil, backends.ErrNotFound
	}
	if len(res) < 5 {
		return nil, errors.New("claim script: short reply")
	}
	now, vis := queueInt(res[1]), queueInt(res[2])
	if queueInt(res[3]) == 1 {
		qi.idle.Store(&queueIdle{sent: sent, now: now, next: queueInt(res[4])})
	} else {
		qi.idle.Store(nil)
	}
	out := make([][]backends.Job, len(group))
	i := 5
	for k, r := range group {
		if i >= len(res) {
			return nil, errors.New("claim script: short reply")
		}
		n := int(queueInt(res[i]))
		i++
		if i+n*queueJobFields > len(res) {
			return nil, errors.New("claim script: short reply")
		}
		jobs := make([]backends.Job, n)
		for x := range n {
			j := queueJobAt(queue, res, i)
			j.Owner, j.ExpiresAt = r.Owner, queueTime(now+vis)
			jobs[x] = j
			i += queueJobFields
		}
		out[k] = jobs
	}
	return out, nil
}

// Ack deletes a finished job while j.Owner still holds it (ErrLost).
//
// Acks are batched per Store: an Ack with none in flight goes at once;
// acks that arrive while one is in flight wait for it and then go
// together, up to queueMaxAckBatch, as one script per queue
// (queueAckScript) and one pipeline for all queues: one round trip. The
// script answers per job, so each Ack learns whether its own lease was
// lost. An Ack whose ctx ends while it waits returns ctx's error, and its
// job may be deleted anyway.
func (s *Store) Ack(ctx context.Context, j backends.Job) error {
	if err := s.writable(); err != nil {
		return err
	}
	if err := s.queues.acks.Do(ctx, j, s.ackBatch); err != nil {
		return fmt.Errorf("ack job %d of queue %q as %q: %w", j.ID, j.Queue, j.Owner, err)
	}
	return nil
}

// queueMaxAckBatch bounds the acks of one batch.
const queueMaxAckBatch = 512

// queueAckTimeout bounds a batch of acks, which runs for several callers
// and so follows none of their contexts.
const queueAckTimeout = 30 * time.Second

// ackBatch runs the acks of batch, one script per queue in one pipeline,
// and returns each ack's error: nil, ErrLost, or the batch's own failure.
func (s *Store) ackBatch(ctx context.Context, batch []backends.Job) []error {
	errs := make([]error, len(batch))
	var queues []string
	byQueue := map[string][]int{}
	for i, r := range batch {
		if _, ok := byQueue[r.Queue]; !ok {
			queues = append(queues, r.Queue)
		}
		byQueue[r.Queue] = append(byQueue[r.Queue], i)
	}
	cmds := make([]*goredis.Cmd, len(queues))
	err := queueScriptsPipelined(ctx, s.rdb, queueAckScript, len(queues), func(q int) ([]string, []any) {
		idx := byQueue[queues[q]]
		args := make([]any, 0, 2*len(idx))
		for _, i := range idx {
			args = append(args, strconv.FormatInt(batch[i].ID, 10), batch[i].Owner)
		}
		return s.queueInfo(queues[q]).fixed, args
	}, func(q int, c *goredis.Cmd) { cmds[q] = c })
	for q, name := range queues {
		idx := byQueue[name]
		if err == nil {
			var res []any
			res, err2 := cmds[q].Slice()
			if err2 == nil && len(res) != len(idx) {
				err2 = fmt.Errorf("ack script: %d results for %d acks", len(res), len(idx))
			}
			for k, i := range idx {
				switch {
				case err2 != nil:
					errs[i] = err2
				case queueInt(res[k]) != 1:
					errs[i] = backends.ErrLost
				}
			}
			continue
		}
		for _, i := range idx {
			errs[i] = err
		}
	}
	return errs
}

// Retry returns a job j.Owner still holds (ErrLost) to the queue after
// retry_backoff, or to the dead list when it used max_attempts attempts
// (queueRetryScript).
func (s *Store) Retry(ctx context.Context, j backends.Job, reason string) error {
	if err := s.writable(); err != nil {
		return err
	}
	res, err := s.runQueueScript(ctx, queueRetryScript, j.Queue, queueArgs(strconv.FormatInt(j.ID, 10), j.Owner, reason, backends.OwnerWorker(j.Owner), backends.MaxAttemptErrors))
	if err == nil {
		switch queueInt(res[0]) {
		case 1, 2:
		case 3:
			err = backends.ErrLost
		default:
			err = fmt.Errorf("script status %v", res[0])
		}
	}
	if err != nil {
		return fmt.Errorf("retry job %d of queue %q as %q: %w", j.ID, j.Queue, j.Owner, err)
	}
	return nil
}

// ExtendJob renews j.Owner's visibility lease to now + visibility_timeout,
// only while it holds the job and the lease has not expired (ErrLost).
func (s *Store) ExtendJob(ctx context.Context, j backends.Job) (time.Time, error) {
	if err := s.writable(); err != nil {
		return time.Time{}, err
	}
	exp, err := queueExtendScript.Run(ctx, s.rdb, s.queueInfo(j.Queue).fixed, strconv.FormatInt(j.ID, 10), j.Owner).Int64()
	if err == nil && exp == 0 {
		err = backends.ErrLost
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("extend job %d of queue %q as %q: %w", j.ID, j.Queue, j.Owner, err)
	}
	return queueTime(exp), nil
}

// Dead lists up to limit dead jobs (limit <= 0: all), in the order they
// died.
func (s *Store) Dead(ctx context.Context, queue string, limit int) ([]backends.Job, error) {
	res, err := s.queueEval(ctx, queueDeadScript, s.queueInfo(queue).fixed, max(limit, 0))
	if err != nil {
		return nil, fmt.Errorf("list dead jobs of queue %q: %w", queue, err)
	}
	jobs := make([]backends.Job, 0, len(res)/queueJobFields)
	for i := 0; i+queueJobFields <= len(res); i += queueJobFields {
		jobs = append(jobs, queueJobAt(queue, res, i))
	}
	return jobs, nil
}

// RequeueDead makes every dead job of queue ready now with attempts reset,
// and returns how many.
func (s *Store) RequeueDead(ctx context.Context, queue string) (int64, error) {
	if err := s.writable(); err != nil {
		return 0, err
	}
	res, err := s.runQueueScript(ctx, queueRequeueDeadScript, queue, queueArgs())
	if err != nil {
		return 0, fmt.Errorf("requeue dead jobs of queue %q: %w", queue, err)
	}
	if queueInt(res[0]) == 0 {
		return 0, nil // absent: nothing dead
	}
	return queueInt(res[1]), nil
}

// PurgeDead deletes every dead job of queue and returns how many.
func (s *Store) PurgeDead(ctx context.Context, queue string) (int64, error) {
	if err := s.writable(); err != nil {
		return 0, err
	}
	n, err := queuePurgeDeadScript.Run(ctx, s.rdb, s.queueInfo(queue).fixed).Int64()
	if err != nil {
		return 0, fmt.Errorf("purge dead jobs of queue %q: %w", queue, err)
	}
	return n, nil
}

// WaitQueue blocks until a job may be claimable, max elapsed or ctx ended.
//
// It blocks with BLPOP on the queue's wake list, to which every push (of a
// ready or a delayed job), a retry to the queue, RequeueDead and a PutQueue
// that moved jobs push an element. The claim that found nothing claimable
// deleted the list in the same script, so an element in it is news: no
// wake-up is lost between that claim and the BLPOP, and none is stale.
// The BLPOP's timeout is the least of max and what that claim said about
// time: the first delayed job's available_at, the first lease deadline,
// and now + the visibility timeout (so that a lease taken later by another
// host that expires is noticed). Without such a claim (the last claim
// found jobs, or none ran), WaitQueue first looks (a claim script without
// members: one more round trip) and returns at once if a job is claimable.
// So a worker of queue.Client, whose every wait follows an empty claim,
// sends nothing but its blocking call while idle.
//
// The BLPOP runs on a connection of its own (queueBlocking), so idle
// workers never hold the connections that claims and acks use. When ctx
// ends first, CLIENT UNBLOCK ends it at once.
func (s *Store) WaitQueue(ctx context.Context, queue string, max time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	wait := max
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl))
	}
	qi := s.queueInfo(queue)
	idle := qi.idle.Load()
	if idle == nil && s.writable() == nil {
		_, err := s.claimGroup(ctx, queue, nil)
		if errors.Is(err, backends.ErrNotFound) {
			// An absent queue: nothing to look at; block until max, a
			// push after a PutQueue wakes the worker.
		} else if err != nil {
			return fmt.Errorf("wait on queue %q: %w", queue, err)
		}
		if idle = qi.idle.Load(); idle == nil && err == nil {
			return nil // a job is claimable
		}
	}
	if idle != nil {
		until := idle.sent.Add(time.Duration(idle.next-idle.now) * time.Microsecond)
		wait = min(wait, time.Until(until))
	}
	if wait < time.Millisecond {
		return ctx.Err()
	}
	woke, err := s.queues.blk.pop(ctx, s, s.keys.queueWake(queue), wait)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("wait on queue %q: %w", queue, err)
	}
	if woke {
		qi.idle.Store(nil) // something happened; look before the next wait
	}
	return nil
}

// queueBlocking holds the connections of blocking calls: a client of its
// own, created on first use, with no read timeout (each call carries a
// deadline), whose connections are taken as sticky connections with their
// CLIENT ID, so that a call whose ctx ends can be ended with CLIENT
// UNBLOCK. Idle ones are kept for the next call, up to queueBlockIdle.
type queueBlocking struct {
	mu     sync.Mutex
	client *goredis.Client
	free   []*queueBlockConn
	closed bool
}

// queueBlockConn is one connection for blocking calls.
type queueBlockConn struct {
	c  *goredis.Conn
	id int64
}

const (
	// queueBlockIdle bounds the idle blocking connections kept.
	queueBlockIdle = 64
	// queueBlockPool bounds the blocking connections open at once: the
	// workers waiting at once on this Store.
	queueBlockPool = 1000
	// queueBlockSlack is added to a blocking call's timeout for its
	// deadline: the server answers at the timeout, so the deadline only
	// fires when the server or the network is gone.
	queueBlockSlack = 5 * time.Second
)

// get returns an idle blocking connection (reused) or opens one.
func (b *queueBlocking) get(ctx context.Context, s *Store) (c *queueBlockConn, reused bool, err error) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, false, errors.New("store is closed")
	}
	if n := len(b.free); n > 0 {
		c := b.free[n-1]
		b.free = b.free[:n-1]
		b.mu.Unlock()
		return c, true, nil
	}
	if b.client == nil {
		o := *s.rdb.Options()
		o.ReadTimeout = -1 // none: each call's ctx carries a deadline
		o.MaxRetries = -1
		o.PoolSize = queueBlockPool
		o.MinIdleConns, o.MaxIdleConns = 0, 0
		b.client = goredis.NewClient(&o)
		b.client.AddHook(tripCounter{&s.trips})
	}
	cl := b.client
	b.mu.Unlock()
	conn := cl.Conn()
	id, err := conn.ClientID(ctx).Result()
	if err != nil {
		conn.Close()
		return nil, false, err
	}
	return &queueBlockConn{c: conn, id: id}, false, nil
}

// put keeps an idle connection for the next call, or closes it.
func (b *queueBlocking) put(c *queueBlockConn) {
	b.mu.Lock()
	if !b.closed && len(b.free) < queueBlockIdle {
		b.free = append(b.free, c)
		c = nil
	}
	b.mu.Unlock()
	if c != nil {
		c.c.Close()
	}
}

// close closes the idle connections and the client; connections in use
// are closed when their call returns.
func (b *queueBlocking) close() error {
	b.mu.Lock()
	free, cl := b.free, b.client
	b.free, b.client, b.closed = nil, nil, true
	b.mu.Unlock()
	for _, c := range free {
		c.c.Close()
	}
	if cl != nil {
		return cl.Close()
	}
	return nil
}

// pop runs BLPOP key with timeout d on a blocking connection and reports
// whether it popped an element. When ctx ends first, CLIENT UNBLOCK (sent
// on the Store's client) ends the BLPOP; an element it popped all the same
// is pushed back for another worker. A kept connection that fails (the
// server closed it while it was idle) is replaced once.
func (b *queueBlocking) pop(ctx context.Context, s *Store, key string, d time.Duration) (bool, error) {
	for attempt := 0; ; attempt++ {
		c, reused, err := b.get(ctx, s)
		if err != nil {
			return false, err
		}
		woke, err := b.popOn(ctx, s, c, key, d)
		if err != nil {
			c.c.Close()
			if reused && attempt == 0 && ctx.Err() == nil {
				continue
			}
			return false, err
		}
		b.put(c)
		return woke, nil
	}
}

// popOn is one BLPOP of pop on c.
func (b *queueBlocking) popOn(ctx context.Context, s *Store, c *queueBlockConn, key string, d time.Duration) (bool, error) {
	returned := make(chan struct{})
	unblocked := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(unblocked)
		for {
			uctx, cancel := context.WithTimeout(context.Background(), queueBlockSlack)
			n, err := s.rdb.ClientUnblock(uctx, c.id).Result()
			cancel()
			if err != nil || n == 1 {
				return
			}
			// Not blocked yet (the BLPOP is on its way) or any more.
			select {
			case <-returned:
				return
			case <-time.After(time.Millisecond):
			}
		}
	})
	secs := strconv.FormatFloat(math.Ceil(float64(d)/float64(time.Millisecond))/1000, 'f', 3, 64)
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d+queueBlockSlack)
	v, err := c.c.Do(bctx, "BLPOP", key, secs).Slice()
	cancel()
	close(returned)
	if !stop() {
		<-unblocked
	}
	if errors.Is(err, goredis.Nil) {
		return false, nil // timed out, or unblocked
	}
	if err != nil {
		return false, err
	}
	woke := len(v) == 2
	if woke && ctx.Err() != nil {
		pctx, cancel := context.WithTimeout(context.Background(), queueBlockSlack)
		_ = s.rdb.LPush(pctx, key, v[1]).Err()
		cancel()
	}
	return woke, nil
}
