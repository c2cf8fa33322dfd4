package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/internal/group"
	"github.com/coordd/coordd/spec"
)

// Queues on Redis. Every key of a queue shares the hash tag {queue:name}
// (keys.object), so that one script may touch them all:
//
//	meta       hash: config (the QueueConfig as JSON, for ObserveQueues),
//	           partitions, span, vis (µs), max_attempts, backoff (µs),
//	           unique, max_payload, cursor (where claims of older
//	           coordd versions started their round robin over the
//	           partitions; no longer read or written), pause (an
//	           operator's pause, JSON as a cron task's; absent: none)
//	ids        the id counter (INCR; recreated at TIME µs when missing)
//	jobs       hash: id -> the job's record (cmsgpack of partition,
//	           attempt, enqueued_at, available_at, owner, key, last_error,
//	           then the attempt errors and the priority when there are
//	           any: a priority-0 job's record is as before priorities)
//	payloads   hash: id -> payload
//	ready:<p>  sorted set per partition: the ids of jobs available now,
//	           scored by id - priority * 2^45 (queuePrioStep), so that a
//	           claim, merging the sets by score, takes them in claim order:
//	           the highest priority first, then push order. A priority-0
//	           job's score is its id, as before priorities (no migration).
//	           The ids of the jobs ready at once differ by far less than
//	           2^45 and stay under queueIDLimit, so the scores are exact and
//	           unique; readers that list by id (the browser's ready page,
//	           the oldest ready job) read each priority's run of scores
//	           (lua/lib/queue_bands.lua)
//	inflight   sorted set: ids of claimed jobs scored by lease deadline
//	           (µs, server time)
//	delayed    sorted set: ids of ready jobs not yet available (a delayed
//	           push, a retry in its backoff) scored by available_at
//	dead       list: ids of dead jobs in the order they died
//	kready     sorted set (lex): keyed jobs that are ready or delayed
//	krunning   sorted set (lex): keyed jobs in flight
//	wake       list: wake elements for idle workers (WaitQueue)
//
// A job is in exactly one of the ready sets, delayed, inflight and dead,
// and moves between them only inside a script (queue_scripts.go). Its
// record and payload live in two hashes rather than a hash per job: every
// key a script touches is passed in KEYS (as Redis Cluster requires), and a
// claim does not know its jobs' ids before it runs. The payload has a hash
// of its own so that a claim, which rewrites the record (attempt, owner),
// never copies it.
//
// The span is the number of ready sets that may exist: the partition
// count, or more after a write behind coordd's back (the conformance
// harness's insertJobs, an older writer). ObserveQueues counts jobs in sets
// at or above the partition count as stranded; PutQueue moves them.
//
// Partitions are not objects of their own on Redis: a ready set exists
// while it holds a job. PartitionsPresent is therefore the partition count
// of the stored config; there is nothing that can go missing.

// queueFixedKeys is the number of fixed keys every queue script takes
// before the ready sets (queue_scripts.go lists them).
const queueFixedKeys = 10

// queueFixed returns a queue's fixed keys in the order the scripts expect.
func (k keys) queueFixed(name string) []string {
	parts := [queueFixedKeys]string{"meta", "ids", "jobs", "payloads", "inflight", "delayed", "dead", "kready", "krunning", "wake"}
	out := make([]string, queueFixedKeys, queueFixedKeys+8)
	for i, p := range parts {
		out[i] = k.object("queue", name, p)
	}
	return out
}

// queueReady is the ready set of partition p of a queue.
func (k keys) queueReady(name string, p int) string {
	return k.object("queue", name, "ready:"+strconv.Itoa(p))
}

// queueWake is the wake list of a queue (also queueFixed's last key).
func (k keys) queueWake(name string) string { return k.object("queue", name, "wake") }

// close closes what the queues opened besides the Store's client (the
// blocking connections). Store.Close calls it.
func (q *queueState) close() error { return q.blk.close() }

// queueState is what a Store keeps for its queues.
type queueState struct {
	infos  sync.Map // queue name -> *queueInfo
	claims group.Claimer[backends.Job]
	acks   group.Batcher[backends.Job]
	blk    queueBlocking
}

// queueInfo is what a Store keeps per queue: its keys for the partition
// count it last saw, and what its last empty claim said (WaitQueue).
type queueInfo struct {
	fixed []string
	// withReady is fixed followed by the ready sets of the partition count
	// last seen (nil: not known yet; scripts then say how many they need).
	withReady atomic.Pointer[[]string]
	// idle is set by a claim that found nothing claimable, and cleared by
	// one that found jobs.
	idle atomic.Pointer[queueIdle]
	// pushes batches the concurrent pushes to the queue (Push): the pushes
	// that arrive while queuePushRounds batches are in flight go together
	// in the next one, and a bigger batch costs the server less per job.
	pushes group.Batcher[*queuePush]
}

// queueIdle is what a claim that found nothing claimable learnt: until
// when (server µs next, seen at server µs now, on the host at sent) no job
// can become claimable without a wake element being pushed.
type queueIdle struct {
	sent      time.Time
	now, next int64
}

// info returns the Store's record of a queue.
func (s *Store) queueInfo(name string) *queueInfo {
	if v, ok := s.queues.infos.Load(name); ok {
		return v.(*queueInfo)
	}
	qi := &queueInfo{fixed: s.keys.queueFixed(name)}
	qi.pushes.Limit, qi.pushes.Timeout = queueMaxPushBatch, queuePushTimeout
	qi.pushes.Rounds = queuePushRounds
	v, _ := s.queues.infos.LoadOrStore(name, qi)
	return v.(*queueInfo)
}

// keysFor returns the fixed keys followed by the ready sets 0..n-1, and
// remembers them.
func (s *Store) queueKeysFor(name string, qi *queueInfo, n int) []string {
	if cur := qi.withReady.Load(); cur != nil && len(*cur) == queueFixedKeys+n {
		return *cur
	}
	ks := make([]string, queueFixedKeys, queueFixedKeys+n)
	copy(ks, qi.fixed)
	for p := range n {
		ks = append(ks, s.keys.queueReady(name, p))
	}
	qi.withReady.Store(&ks)
	return ks
}

// queueMaxRefresh bounds the runs of a script that found the wrong number
// of ready sets: the partition count would have to change between every
// two of them.
const queueMaxRefresh = 4

// runQueueScript runs a script that takes the queue's ready sets. It
// starts with the ready sets of the partition count this Store last saw
// (none, the first time) and, when the script answers {-1, n}, runs it
// again with n. args builds the arguments for a number of ready sets. It
// returns the script's reply, a non-empty array.
func (s *Store) runQueueScript(ctx context.Context, sc *goredis.Script, name string, args func(sets int) []any) ([]any, error) {
	return s.withQueueKeys(name, func(ks []string) ([]any, error) {
		return s.queueEval(ctx, sc, ks, args(len(ks)-queueFixedKeys)...)
	})
}

// withQueueKeys runs call with queue name's keys, the ready sets as this
// Store last knew them, and again with the sets a reply {-1, n} names
// (the span changed under it), up to queueMaxRefresh times. It returns the
// reply, a non-empty array.
func (s *Store) withQueueKeys(name string, call func(ks []string) ([]any, error)) ([]any, error) {
	qi := s.queueInfo(name)
	ks := qi.fixed
	if cur := qi.withReady.Load(); cur != nil {
		ks = *cur
	}
	for range queueMaxRefresh {
		res, err := call(ks)
		if err != nil {
			return nil, err
		}
		if len(res) == 0 {
			return nil, errors.New("queue script: empty reply")
		}
		if queueInt(res[0]) != -1 {
			return res, nil
		}
		if len(res) < 2 {
			return nil, errors.New("queue script: short reply")
		}
		ks = s.queueKeysFor(name, qi, int(queueInt(res[1])))
	}
	return nil, fmt.Errorf("the partition count of queue %q changed %d times in a row", name, queueMaxRefresh)
}

// queueArgs is a runQueueScript argument builder for arguments that do not
// depend on the partition count.
func queueArgs(args ...any) func(int) []any { return func(int) []any { return args } }

// queueEval runs a script (EVALSHA, then EVAL when the server does not
// have it) and returns its array reply.
func (s *Store) queueEval(ctx context.Context, sc *goredis.Script, ks []string, args ...any) ([]any, error) {
	v, err := sc.Run(ctx, s.rdb, ks, args...).Result()
	if err != nil {
		return nil, err
	}
	arr, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("queue script: reply %T, want an array", v)
	}
	return arr, nil
}

// queueInt reads an integer element of a script's reply.
func queueInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	}
	return 0
}

// queueStr reads a string element of a script's reply.
func queueStr(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	}
	return ""
}

// queueTime converts server microseconds to a time.
func queueTime(us int64) time.Time { return time.UnixMicro(us).UTC() }

// queueMicros converts a non-negative duration to microseconds.
func queueMicros(d time.Duration) int64 { return max(d, 0).Microseconds() }

// PutQueue creates or updates the queue and moves the jobs of removed
// partitions (or of ready sets written behind coordd's back above the
// partition count) into the remaining ones, in one script, and returns how
// many moved. Claim mode skip_locked is MySQL's; Redis refuses it.
func (s *Store) PutQueue(ctx context.Context, cfg backends.QueueConfig) (int64, error) {
	if err := s.writable(); err != nil {
		return 0, err
	}
	if cfg.Name == "" {
		return 0, errors.New("put queue: empty name")
	}
	if cfg.Partitions < 1 {
		return 0, fmt.Errorf("put queue %q: partitions %d: must be at least 1", cfg.Name, cfg.Partitions)
	}
	if cfg.Claim == spec.ClaimSkipLocked {
		return 0, fmt.Errorf("put queue %q: claim %s: %w", cfg.Name, cfg.Claim, backends.ErrUnsupported)
	}
	if cfg.VisibilityTimeout < time.Microsecond {
		return 0, fmt.Errorf("put queue %q: visibility_timeout %v: must be at least 1µs", cfg.Name, cfg.VisibilityTimeout)
	}
	conf, err := json.Marshal(cfg)
	if err != nil {
		return 0, fmt.Errorf("put queue %q: %w", cfg.Name, err)
	}
	qi := s.queueInfo(cfg.Name)
	ks := s.queueKeysFor(cfg.Name, qi, cfg.Partitions)
	args := []any{string(conf), cfg.Partitions, cfg.VisibilityTimeout.Microseconds(), cfg.MaxAttempts,
		queueMicros(cfg.RetryBackoff), cfg.Unique, cfg.MaxPayload}
	for range queueMaxRefresh {
		res, err := s.queueEval(ctx, queuePutScript, ks, args...)
		if err != nil {
			return 0, fmt.Errorf("put queue %q: %w", cfg.Name, err)
		}
		switch queueInt(res[0]) {
		case 1:
			s.queueKeysFor(cfg.Name, qi, cfg.Partitions)
			return queueInt(res[1]), nil
		case -1:
			ks = s.queueKeysFor(cfg.Name, qi, int(queueInt(res[1])))
		default:
			return 0, fmt.Errorf("put queue %q: script status %v", cfg.Name, res[0])
		}
	}
	return 0, fmt.Errorf("put queue %q: the span changed %d times in a row", cfg.Name, queueMaxRefresh)
}

// DeleteQueue removes the queue and (with force) its jobs; with jobs left
// and no force it returns ErrHasJobs. Absent is not an error. Workers
// blocked in WaitQueue notice when their wait ends.
func (s *Store) DeleteQueue(ctx context.Context, name string, force bool) error {
	if err := s.writable(); err != nil {
		return err
	}
	f := "0"
	if force {
		f = "1"
	}
	res, err := s.runQueueScript(ctx, queueDeleteScript, name, queueArgs(f))
	if err == nil && queueInt(res[0]) == -2 {
		err = fmt.Errorf("%d jobs: %w", queueInt(res[1]), backends.ErrHasJobs)
	}
	if err == nil {
		// The counts are a record, not the queue: a second call mends a
		// failure here (the queue is already gone then).
		err = s.rdb.Del(ctx, s.keys.queueCounts(name)...).Err()
	}
	if err != nil {
		return fmt.Errorf("delete queue %q: %w", name, err)
	}
	s.queues.infos.Delete(name)
	return nil
}

// ObserveQueues reads many queues: one pipeline reads each queue's span,
// one more runs the observe script of each queue that exists (with as
// many ready sets as its span), each queue in one atomic script.
func (s *Store) ObserveQueues(ctx context.Context, names []string) (map[string]*backends.QueueState, error) {
	out := make(map[string]*backends.QueueState, len(names))
	if len(names) == 0 {
		return out, nil
	}
	spans := make([]*goredis.SliceCmd, len(names))
	_, err := s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, n := range names {
			spans[i] = p.HMGet(ctx, s.queueInfo(n).fixed[0], "span", "partitions")
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("observe queues: %w", err)
	}
	type pending struct {
		name string
		keys []string
		cmd  *goredis.Cmd
	}
	var todo []*pending
	for i, n := range names {
		v := spans[i].Val()
		if len(v) < 2 || v[1] == nil {
			continue // absent
		}
		span := max(queueInt(v[0]), queueInt(v[1]))
		qi := s.queueInfo(n)
		ks := make([]string, queueFixedKeys, queueFixedKeys+int(span))
		copy(ks, qi.fixed)
		for p := range int(span) {
			ks = append(ks, s.keys.queueReady(n, p))
		}
		todo = append(todo, &pending{name: n, keys: ks})
	}
	for round := 0; len(todo) > 0; round++ {
		if round == queueMaxRefresh {
			return nil, fmt.Errorf("observe queues: the span of queue %q changed %d times in a row", todo[0].name, queueMaxRefresh)
		}
		if err := queueScriptsPipelined(ctx, s.rdb, queueObserveScript, len(todo), func(i int) ([]string, []any) {
			return todo[i].keys, nil
		}, func(i int, c *goredis.Cmd) { todo[i].cmd = c }); err != nil {
			return nil, fmt.Errorf("observe queues: %w", err)
		}
		var again []*pending
		for _, pd := range todo {
			res, err := pd.cmd.Slice()
			if err != nil {
				return nil, fmt.Errorf("observe queue %q: %w", pd.name, err)
			}
			switch queueInt(res[0]) {
			case 0: // deleted meanwhile
			case -1:
				n := int(queueInt(res[1]))
				ks := make([]string, queueFixedKeys, queueFixedKeys+n)
				copy(ks, pd.keys[:queueFixedKeys])
				for p := range n {
					ks = append(ks, s.keys.queueReady(pd.name, p))
				}
				pd.keys = ks
				again = append(again, pd)
			case 1:
				st, err := queueStateOf(pd.name, res)
				if err != nil {
					return nil, fmt.Errorf("observe queue %q: %w", pd.name, err)
				}
				out[pd.name] = st
			default:
				return nil, fmt.Errorf("observe queue %q: script status %v", pd.name, res[0])
			}
		}
		todo = again
	}
	return out, nil
}

// queueStateOf reads the observe script's reply.
func queueStateOf(name string, res []any) (*backends.QueueState, error) {
	if len(res) < 9 {
		return nil, errors.New("short reply")
	}
	var st backends.QueueState
	if err := json.Unmarshal([]byte(queueStr(res[1])), &st.Config); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	st.Config.Name = name
	st.Config.Partitions = int(queueInt(res[2]))
	st.PartitionsPresent = st.Config.Partitions
	st.Ready, st.InFlight, st.Dead, st.Delayed = queueInt(res[3]), queueInt(res[4]), queueInt(res[5]), queueInt(res[6])
	if oldest := queueInt(res[7]); oldest >= 0 {
		st.OldestReady = queueTime(oldest)
	}
	st.Stranded = queueInt(res[8])
	if len(res) > 9 {
		if next := queueInt(res[9]); next >= 0 {
			st.NextDelayed = queueTime(next)
		}
	}
	if len(res) > 10 {
		p, err := queuePauseOf(queueStr(res[10]))
		if err != nil {
			return nil, err
		}
		st.Paused = p
	}
	return &st, nil
}

// queueScriptsPipelined runs n calls of one script in one pipeline with
// EVALSHA; the calls the server refused with NOSCRIPT (it lost its script
// cache) are run again one by one with Script.Run, which loads the script:
// a refused call did not run. got receives each call's command.
func queueScriptsPipelined(ctx context.Context, rdb *goredis.Client, sc *goredis.Script, n int,
	call func(i int) ([]string, []any), got func(i int, c *goredis.Cmd)) error {
	if n == 1 {
		ks, args := call(0)
		got(0, sc.Run(ctx, rdb, ks, args...))
		return nil
	}
	cmds := make([]*goredis.Cmd, n)
	_, err := rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i := range n {
			ks, args := call(i)
			cmds[i] = sc.EvalSha(ctx, p, ks, args...)
		}
		return nil
	})
	if err != nil && !queueNoScript(err) {
		// A script's own error is reported by its command; a failed
		// pipeline fails every command.
		var rerr goredis.Error
		if !errors.As(err, &rerr) {
			return err
		}
	}
	for i, c := range cmds {
		if queueNoScript(c.Err()) {
			ks, args := call(i)
			c = sc.Run(ctx, rdb, ks, args...)
		}
		got(i, c)
	}
	return nil
}

// queueNoScript reports whether err is the server's NOSCRIPT refusal.
func queueNoScript(err error) bool {
	return err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT")
}
