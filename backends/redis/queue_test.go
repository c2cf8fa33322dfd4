package redis

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/queue"
	"github.com/coordd/coordd/spec"
)

// queueInsertScript adds jobs to one partition behind the API's back (the
// conformance harness's insertJobs): keyless ready jobs, ids from the
// queue's counter, the span raised to cover the partition, no wake.
//
// KEYS: the fixed keys, then the ready set of the partition.
// ARGV: partition, count.
var queueInsertScript = luaTestScript(`--#include lib/queue.lua
local p, n = tonumber(ARGV[1]), tonumber(ARGV[2])
local now = now_us()
if redis.call('EXISTS', K_IDS) == 0 then redis.call('SET', K_IDS, string.format('%d', now)) end
for i = 1, n do
  local id = string.format('%d', redis.call('INCR', K_IDS))
  redis.call('HSET', K_JOBS, id, encode({part = p, attempt = 0, enq = now, avail = now, owner = '', key = '', err = ''}))
  redis.call('HSET', K_PAYLOADS, id, 'inserted')
  redis.call('ZADD', KEYS[11], id, id)
end
local span = tonumber(redis.call('HGET', K_META, 'span') or '0')
if p + 1 > span then redis.call('HSET', K_META, 'span', p + 1) end
return n
`)

// InsertJobsForTest adds n ready jobs to partition p of queue behind
// coordd's back (tests only).
func (s *Store) InsertJobsForTest(ctx context.Context, queue string, p, n int) error {
	ks := append(s.keys.queueFixed(queue), s.keys.queueReady(queue, p))
	if err := queueInsertScript.Run(ctx, s.rdb, ks, p, n).Err(); err != nil {
		return fmt.Errorf("insert jobs: %w", err)
	}
	return nil
}

// The queue tests of the Redis store (package redis: they look at the
// Store's round-trip counter and its keys). They run against the real
// Redis of testenv, each under its own key prefix.

// queueTestConfig is a queue with partitions p and no unique keys.
func queueTestConfig(name string, p int) backends.QueueConfig {
	return backends.QueueConfig{
		Name: name, Partitions: p, VisibilityTimeout: time.Minute, MaxAttempts: 3,
		RetryBackoff: 0, Unique: spec.UniqueNone, MaxPayload: 1 << 20, Claim: spec.ClaimPartition,
	}
}

// openQueueStores opens n handles on one fresh prefix, closed by
// t.Cleanup.
func openQueueStores(t *testing.T, n int) []*Store {
	t.Helper()
	url, prefix := testenv.RedisURL(t)
	out := make([]*Store, n)
	for i := range out {
		s, err := Open(t.Context(), "q", url, prefix, backends.Options{Version: "0.1.0"})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		t.Cleanup(func() {
			_ = s.queues.close() // idempotent; Store.Close may close it too
			if err := s.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		})
		out[i] = s
	}
	return out
}

func putTestQueue(t *testing.T, s *Store, cfg backends.QueueConfig) {
	t.Helper()
	if _, err := s.PutQueue(t.Context(), cfg); err != nil {
		t.Fatalf("put queue %s: %v", cfg.Name, err)
	}
}

func mustPush(t *testing.T, s *Store, queue string, req backends.PushRequest) backends.Job {
	t.Helper()
	j, err := s.Push(t.Context(), queue, req)
	if err != nil {
		t.Fatalf("push %q to %s: %v", req.Key, queue, err)
	}
	return j
}

func mustClaim(t *testing.T, s *Store, queue, owner string, n int) []backends.Job {
	t.Helper()
	jobs, err := s.Claim(t.Context(), queue, owner, n)
	if err != nil {
		t.Fatalf("claim from %s: %v", queue, err)
	}
	return jobs
}

func observeTestQueue(t *testing.T, s *Store, queue string) *backends.QueueState {
	t.Helper()
	m, err := s.ObserveQueues(t.Context(), []string{queue})
	if err != nil {
		t.Fatalf("observe %s: %v", queue, err)
	}
	if m[queue] == nil {
		t.Fatalf("queue %s is absent", queue)
	}
	return m[queue]
}

// TestQueueFIFO: within a partition jobs are claimed in insert order, and
// a job that comes back (a retry without backoff) takes its old place,
// ahead of jobs pushed after it, as in the SQL stores.
func TestQueueFIFO(t *testing.T) {
	s := openQueueStores(t, 1)[0]
	putTestQueue(t, s, queueTestConfig("q", 3))
	var ids []int64
	for i := range 30 {
		j := mustPush(t, s, "q", backends.PushRequest{Payload: fmt.Appendf(nil, "%d", i), Key: "k"})
		ids = append(ids, j.ID)
	}
	first := mustClaim(t, s, "q", "a", 1)
	if len(first) != 1 || first[0].ID != ids[0] {
		t.Fatalf("first claim %+v, want job %d", first, ids[0])
	}
	if err := s.Retry(t.Context(), first[0], "again"); err != nil {
		t.Fatalf("retry: %v", err)
	}
	var got []int64
	for len(got) < len(ids) {
		jobs := mustClaim(t, s, "q", "b", 7)
		if len(jobs) == 0 {
			t.Fatalf("claimed %d of %d jobs, then nothing", len(got), len(ids))
		}
		for _, j := range jobs {
			got = append(got, j.ID)
			if err := s.Ack(t.Context(), j); err != nil {
				t.Fatalf("ack %d: %v", j.ID, err)
			}
		}
	}
	if !slices.Equal(got, ids) {
		t.Fatalf("claim order %v, want %v", got, ids)
	}

	// Keyless jobs go round robin; each partition stays FIFO.
	byPart := map[int][]int64{}
	for range 40 {
		j := mustPush(t, s, "q", backends.PushRequest{Payload: []byte("x")})
		byPart[j.Partition] = append(byPart[j.Partition], j.ID)
	}
	if len(byPart) != 3 {
		t.Fatalf("keyless jobs went to %d partitions, want 3", len(byPart))
	}
	claimed := map[int][]int64{}
	for {
		jobs := mustClaim(t, s, "q", "c", 4)
		if len(jobs) == 0 {
			break
		}
		for _, j := range jobs {
			claimed[j.Partition] = append(claimed[j.Partition], j.ID)
		}
	}
	for p, want := range byPart {
		if !slices.Equal(claimed[p], want) {
			t.Errorf("partition %d claimed %v, want %v", p, claimed[p], want)
		}
	}
}

// TestQueueLeaseLost: once a job's visibility expired and another owner
// claimed it, the first owner's ack, extend and retry change nothing and
// return ErrLost; the job's attempts count on.
func TestQueueLeaseLost(t *testing.T) {
	ss := openQueueStores(t, 2)
	a, b := ss[0], ss[1]
	cfg := queueTestConfig("q", 2)
	cfg.VisibilityTimeout = 200 * time.Millisecond
	putTestQueue(t, a, cfg)
	pushed := mustPush(t, a, "q", backends.PushRequest{Payload: []byte("slow"), Key: "k"})
	old := mustClaim(t, a, "q", "old", 1)[0]

	var again backends.Job
	deadline := time.Now().Add(10 * time.Second)
	for {
		if jobs := mustClaim(t, b, "q", "new", 1); len(jobs) == 1 {
			again = jobs[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the expired job was not claimable again after 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if again.ID != pushed.ID || again.Attempt != 2 || again.LastError != "visibility timeout" {
		t.Fatalf("reclaimed %+v, want job %d attempt 2 after a visibility timeout", again, pushed.ID)
	}
	if err := a.Ack(t.Context(), old); !errors.Is(err, backends.ErrLost) {
		t.Errorf("late ack: %v, want ErrLost", err)
	}
	if _, err := a.ExtendJob(t.Context(), old); !errors.Is(err, backends.ErrLost) {
		t.Errorf("late extend: %v, want ErrLost", err)
	}
	if err := a.Retry(t.Context(), old, "late"); !errors.Is(err, backends.ErrLost) {
		t.Errorf("late retry: %v, want ErrLost", err)
	}
	st := observeTestQueue(t, a, "q")
	if st.InFlight != 1 || st.Ready != 0 {
		t.Fatalf("after the late calls: %+v, want the job in flight for its new owner", st)
	}
	// The new owner extends in time and acks.
	if _, err := b.ExtendJob(t.Context(), again); err != nil {
		t.Fatalf("extend by the new owner: %v", err)
	}
	if err := b.Ack(t.Context(), again); err != nil {
		t.Fatalf("ack by the new owner: %v", err)
	}
}

// TestQueueDeadSet: retries use up max_attempts and the job goes to the
// dead list; RequeueDead makes it ready with attempts reset, PurgeDead
// deletes it (records and payloads too).
func TestQueueDeadSet(t *testing.T) {
	s := openQueueStores(t, 1)[0]
	ctx := t.Context()
	cfg := queueTestConfig("q", 2)
	cfg.MaxAttempts = 2
	putTestQueue(t, s, cfg)
	var pushed []backends.Job
	for i := range 3 {
		pushed = append(pushed, mustPush(t, s, "q", backends.PushRequest{Payload: fmt.Appendf(nil, "p%d", i), Key: fmt.Sprintf("k%d", i)}))
	}
	failAll := func() {
		t.Helper()
		for range 2 {
			for range pushed {
				j := mustClaim(t, s, "q", "w", 1)[0]
				if err := s.Retry(ctx, j, fmt.Sprintf("boom %d", j.Attempt)); err != nil {
					t.Fatalf("retry: %v", err)
				}
			}
		}
		if jobs := mustClaim(t, s, "q", "w", 10); len(jobs) != 0 {
			t.Fatalf("claimed %+v from a queue of dead jobs", jobs)
		}
	}
	failAll()
	dead, err := s.Dead(ctx, "q", 0)
	if err != nil || len(dead) != 3 {
		t.Fatalf("dead = %+v, %v; want 3 jobs", dead, err)
	}
	for _, d := range dead {
		if d.Attempt != 2 || d.LastError != "boom 2" || !bytes.HasPrefix(d.Payload, []byte("p")) || d.Owner != "" {
			t.Errorf("dead job %+v", d)
		}
	}
	if lim, _ := s.Dead(ctx, "q", 2); len(lim) != 2 {
		t.Errorf("dead with limit 2 listed %d", len(lim))
	}
	if st := observeTestQueue(t, s, "q"); st.Dead != 3 || st.Ready != 0 || st.InFlight != 0 {
		t.Fatalf("observed %+v, want 3 dead", st)
	}
	n, err := s.RequeueDead(ctx, "q")
	if err != nil || n != 3 {
		t.Fatalf("requeue dead = %d, %v; want 3", n, err)
	}
	// Requeued keyed jobs are pending again for unique checks.
	cfg.Unique = spec.UniquePending
	putTestQueue(t, s, cfg)
	if dup, err := s.Push(ctx, "q", backends.PushRequest{Key: "k1"}); !errors.Is(err, backends.ErrDuplicate) || dup.ID != pushed[1].ID {
		t.Fatalf("push of a requeued key = %+v, %v; want ErrDuplicate with job %d", dup, err, pushed[1].ID)
	}
	failAll() // attempts start over
	n, err = s.PurgeDead(ctx, "q")
	if err != nil || n != 3 {
		t.Fatalf("purge dead = %d, %v; want 3", n, err)
	}
	for _, k := range []string{"jobs", "payloads"} {
		if l := s.rdb.HLen(ctx, s.keys.object("queue", "q", k)).Val(); l != 0 {
			t.Errorf("%d entries left in %s after purging", l, k)
		}
	}
}

// TestQueueUnique: the three unique modes, including a key with two ready
// jobs (a retried one and one pushed while it ran): the oldest is the
// duplicate, and once it is claimed, the other one.
func TestQueueUnique(t *testing.T) {
	s := openQueueStores(t, 1)[0]
	ctx := t.Context()
	for _, mode := range []string{spec.UniqueNone, spec.UniquePending, spec.UniquePendingOrRunning} {
		cfg := queueTestConfig(mode, 4)
		cfg.Unique = mode
		putTestQueue(t, s, cfg)
	}
	a := mustPush(t, s, spec.UniqueNone, backends.PushRequest{Key: "k"})
	if b := mustPush(t, s, spec.UniqueNone, backends.PushRequest{Key: "k"}); b.ID == a.ID {
		t.Fatal("unique none: one job for two pushes")
	}

	q := spec.UniquePending
	a = mustPush(t, s, q, backends.PushRequest{Payload: []byte("a"), Key: "k"})
	ja := mustClaim(t, s, q, "w", 1)[0]
	b := mustPush(t, s, q, backends.PushRequest{Payload: []byte("b"), Key: "k"}) // a runs: allowed
	if err := s.Retry(ctx, ja, "again"); err != nil {
		t.Fatal(err)
	}
	dup, err := s.Push(ctx, q, backends.PushRequest{Key: "k"})
	if !errors.Is(err, backends.ErrDuplicate) || dup.ID != a.ID || string(dup.Payload) != "a" {
		t.Fatalf("pending with two ready: %+v, %v; want job %d", dup, err, a.ID)
	}
	if j := mustClaim(t, s, q, "w", 1)[0]; j.ID != a.ID {
		t.Fatalf("claimed %d, want %d", j.ID, a.ID)
	}
	dup, err = s.Push(ctx, q, backends.PushRequest{Key: "k"})
	if !errors.Is(err, backends.ErrDuplicate) || dup.ID != b.ID {
		t.Fatalf("pending with one ready: %+v, %v; want job %d", dup, err, b.ID)
	}
	// A delayed job is pending too.
	d := mustPush(t, s, q, backends.PushRequest{Key: "later", Delay: time.Hour})
	if dup, err := s.Push(ctx, q, backends.PushRequest{Key: "later"}); !errors.Is(err, backends.ErrDuplicate) || dup.ID != d.ID {
		t.Fatalf("pending delayed: %+v, %v; want job %d", dup, err, d.ID)
	}

	q = spec.UniquePendingOrRunning
	a = mustPush(t, s, q, backends.PushRequest{Key: "k"})
	ja = mustClaim(t, s, q, "w", 1)[0]
	dup, err = s.Push(ctx, q, backends.PushRequest{Key: "k"})
	if !errors.Is(err, backends.ErrDuplicate) || dup.ID != a.ID || dup.Owner != "w" || dup.ExpiresAt.IsZero() {
		t.Fatalf("pending_or_running with one running: %+v, %v; want the running job %d", dup, err, a.ID)
	}
	if err := s.Ack(ctx, ja); err != nil {
		t.Fatal(err)
	}
	if c := mustPush(t, s, q, backends.PushRequest{Key: "k"}); c.ID == a.ID {
		t.Fatal("pending_or_running: the acked job still counts")
	}
	// Dead jobs do not count.
	cfg := queueTestConfig(q, 4)
	cfg.Unique, cfg.MaxAttempts = q, 1
	putTestQueue(t, s, cfg)
	jc := mustClaim(t, s, q, "w", 1)[0]
	if err := s.Retry(ctx, jc, "dies"); err != nil {
		t.Fatal(err)
	}
	mustPush(t, s, q, backends.PushRequest{Key: "k"})
}

// TestQueueShrink: shrinking a queue moves the ready jobs of removed
// partitions into the remaining ones; jobs that were in flight or delayed
// meanwhile land in the remaining partitions when they come back; no job
// is lost and the moved ones keep their order.
func TestQueueShrink(t *testing.T) {
	s := openQueueStores(t, 1)[0]
	ctx := t.Context()
	putTestQueue(t, s, queueTestConfig("q", 8))
	all := map[int64]bool{}
	for i := range 200 {
		req := backends.PushRequest{Payload: []byte("x")}
		if i%4 == 0 {
			req.Key = fmt.Sprintf("k%d", i%9)
		}
		if i%10 == 0 {
			req.Delay = 300 * time.Millisecond
		}
		all[mustPush(t, s, "q", req).ID] = true
	}
	var held []backends.Job
	for range 6 {
		held = append(held, mustClaim(t, s, "q", "h", 3)...)
	}
	before := observeTestQueue(t, s, "q")
	var inRemoved int64
	for p := 3; p < 8; p++ {
		inRemoved += s.rdb.ZCard(ctx, s.keys.queueReady("q", p)).Val()
	}
	moved, err := s.PutQueue(ctx, queueTestConfig("q", 3))
	if err != nil || moved != inRemoved || moved == 0 {
		t.Fatalf("shrink moved %d, %v; want %d", moved, err, inRemoved)
	}
	after := observeTestQueue(t, s, "q")
	if after.Ready != before.Ready || after.InFlight != before.InFlight || after.Stranded != 0 || after.PartitionsPresent != 3 {
		t.Fatalf("after shrinking: %+v, before %+v", after, before)
	}
	for _, j := range held {
		if err := s.Retry(ctx, j, "back"); err != nil {
			t.Fatalf("retry of a job of a removed partition: %v", err)
		}
	}
	seen := map[int64]bool{}
	deadline := time.Now().Add(10 * time.Second)
	for len(seen) < len(all) {
		jobs := mustClaim(t, s, "q", "d", 16)
		if len(jobs) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("drained %d of %d jobs", len(seen), len(all))
			}
			time.Sleep(20 * time.Millisecond) // the delayed ones
			continue
		}
		for i, j := range jobs {
			if j.Partition >= 3 {
				t.Fatalf("claimed job %d from partition %d of 3", j.ID, j.Partition)
			}
			if i > 0 && j.ID <= jobs[i-1].ID {
				t.Fatalf("claim out of order: %d after %d", j.ID, jobs[i-1].ID)
			}
			if !all[j.ID] || seen[j.ID] {
				t.Fatalf("job %d claimed twice or unknown", j.ID)
			}
			seen[j.ID] = true
			if err := s.Ack(ctx, j); err != nil {
				t.Fatalf("ack: %v", err)
			}
		}
	}
	if st := observeTestQueue(t, s, "q"); st.Jobs() != 0 {
		t.Fatalf("drained queue observed as %+v", st)
	}
}

// TestQueueIdleWait: a worker waiting on an idle queue sends nothing but
// its BLPOP per wait (after its first look), a push through another
// Store handle wakes it, and a cancelled wait returns at once.
func TestQueueIdleWait(t *testing.T) {
	ss := openQueueStores(t, 2)
	w, p := ss[0], ss[1]
	ctx := t.Context()
	putTestQueue(t, w, queueTestConfig("q", 2))
	if err := w.WaitQueue(ctx, "q", 100*time.Millisecond); err != nil { // looks, opens its connection
		t.Fatal(err)
	}
	const waits = 5
	before := w.RoundTrips()
	for range waits {
		if err := w.WaitQueue(ctx, "q", 300*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	if n := w.RoundTrips() - before; n != waits {
		t.Fatalf("%d idle waits sent %d requests, want %d (one BLPOP each)", waits, n, waits)
	}

	// A kept blocking connection that the server closed is replaced.
	w.queues.blk.mu.Lock()
	idleConn := w.queues.blk.free[len(w.queues.blk.free)-1]
	w.queues.blk.mu.Unlock()
	if err := p.rdb.ClientKillByFilter(ctx, "ID", strconv.FormatInt(idleConn.id, 10)).Err(); err != nil {
		t.Fatalf("client kill: %v", err)
	}
	if err := w.WaitQueue(ctx, "q", 100*time.Millisecond); err != nil {
		t.Fatalf("wait after the server closed the idle connection: %v", err)
	}

	done := make(chan error, 1)
	go func() { done <- w.WaitQueue(ctx, "q", time.Minute) }()
	mustPush(t, p, "q", backends.PushRequest{Payload: []byte("wake")})
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a push through another handle did not wake the waiter")
	}
	jobs := mustClaim(t, w, "q", "w", 1)
	if len(jobs) != 1 {
		t.Fatalf("woken, then claimed %d jobs", len(jobs))
	}

	// Many waiters at once hold their own connections, not the Store's
	// pool: claims and acks still go through.
	cctx, cancel := context.WithCancel(ctx)
	const waiters = 50
	errs := make(chan error, waiters)
	for range waiters {
		go func() { errs <- w.WaitQueue(cctx, "other", time.Minute) }()
	}
	if err := w.Ack(ctx, jobs[0]); err != nil {
		t.Fatalf("ack with %d waiters blocked: %v", waiters, err)
	}
	cancel()
	for range waiters {
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled wait returned %v", err)
		}
	}
}

// TestQueueWaitDelayed: an idle wait is bounded by the available_at of a
// delayed job, which is claimable when the wait returns (or after at most
// one more short wait).
func TestQueueWaitDelayed(t *testing.T) {
	s := openQueueStores(t, 1)[0]
	ctx := t.Context()
	putTestQueue(t, s, queueTestConfig("q", 2))
	j := mustPush(t, s, "q", backends.PushRequest{Payload: []byte("later"), Delay: 400 * time.Millisecond})
	if jobs := mustClaim(t, s, "q", "w", 1); len(jobs) != 0 {
		t.Fatalf("claimed a delayed job early: %+v", jobs)
	}
	start := time.Now()
	const maxWait = 20 * time.Second
	for waits := 1; ; waits++ {
		if err := s.WaitQueue(ctx, "q", maxWait); err != nil {
			t.Fatal(err)
		}
		if time.Since(start) >= maxWait {
			t.Fatal("the wait ran to its max: not bounded by the delayed job")
		}
		if jobs := mustClaim(t, s, "q", "w", 1); len(jobs) == 1 {
			if jobs[0].ID != j.ID {
				t.Fatalf("claimed %d, want %d", jobs[0].ID, j.ID)
			}
			break
		}
		if waits == 3 {
			t.Fatal("three waits ended without the delayed job being claimable")
		}
	}
}

// TestQueueWorkers drains a queue with queue.Client.Work, several workers
// on one Store (so that claims group and acks batch), some jobs failing
// once: every job is worked to success exactly once, none is lost.
func TestQueueWorkers(t *testing.T) {
	s := openQueueStores(t, 1)[0]
	ctx := t.Context()
	cfg := queueTestConfig("q", 4)
	putTestQueue(t, s, cfg)
	c, err := queue.New(s)
	if err != nil {
		t.Fatal(err)
	}
	const jobs, works = 2000, 4
	for i := range jobs {
		key := ""
		if i%5 == 0 {
			key = fmt.Sprintf("k%d", i%13)
		}
		if _, err := c.Push(ctx, "q", fmt.Appendf(nil, "%d", i), queue.PushOptions{Key: key}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	done := map[string]int{}
	failed := map[string]bool{}
	errs := make(chan error, works)
	for range works {
		go func() {
			errs <- c.Work(ctx, "q", queue.WorkerOptions{Concurrency: 8, Batch: 8, Drain: true}, func(_ context.Context, j backends.Job) error {
				mu.Lock()
				defer mu.Unlock()
				p := string(j.Payload)
				if len(p)%2 == 0 && !failed[p] {
					failed[p] = true
					return errors.New("first attempt fails")
				}
				done[p]++
				return nil
			})
		}()
	}
	for range works {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if len(done) != jobs {
		t.Fatalf("%d of %d jobs done", len(done), jobs)
	}
	for p, n := range done {
		if n != 1 {
			t.Fatalf("job %s done %d times", p, n)
		}
	}
	if st := observeTestQueue(t, s, "q"); st.Jobs() != 0 {
		t.Fatalf("drained queue observed as %+v", st)
	}
}

// TestQueueWaitKeyBlocked: a job waiting behind an earlier job of its key
// is not claimable, so an idle worker blocks in its BLPOP rather than
// returning at once; the ack of the earlier job through
// another handle pushes a wake element, and the worker claims the next
// job of the key.
func TestQueueWaitKeyBlocked(t *testing.T) {
	ss := openQueueStores(t, 2)
	w, p := ss[0], ss[1]
	ctx := t.Context()
	putTestQueue(t, w, queueTestConfig("q", 2))
	mustPush(t, p, "q", backends.PushRequest{Payload: []byte("k1"), Key: "k"})
	k2 := mustPush(t, p, "q", backends.PushRequest{Payload: []byte("k2"), Key: "k"})
	held := mustClaim(t, p, "q", "worker", 1)
	if len(held) != 1 {
		t.Fatalf("worker claimed %d jobs, want k1", len(held))
	}
	if jobs := mustClaim(t, w, "q", "waiter", 5); len(jobs) != 0 {
		t.Fatalf("waiter claimed %+v while k1 runs, want nothing", jobs)
	}
	done := make(chan error, 1)
	go func() { done <- w.WaitQueue(ctx, "q", time.Minute) }()
	select {
	case err := <-done:
		t.Fatalf("the wait returned (%v) while k2 waits behind k1", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := p.Ack(ctx, held[0]); err != nil {
		t.Fatalf("ack k1: %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the ack of k1 through another handle did not wake the waiter")
	}
	if jobs := mustClaim(t, w, "q", "waiter", 5); len(jobs) != 1 || jobs[0].ID != k2.ID {
		t.Fatalf("claim after the ack = %+v, want k2 (%d)", jobs, k2.ID)
	}
}
