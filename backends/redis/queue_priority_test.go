package redis

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// The Redis side of job priorities: the ready sets' scores (ready_score,
// lua/lib/queue.lua), the job record's layout, and the readers that list
// ready jobs by id rather than in claim order.

// queueOldInsertScript adds ready jobs to one partition as the version
// before priorities wrote them: a record of seven fields (no priority) and
// the id as the ready-set score. Keyless jobs, ids from the queue's
// counter (started at the server's time in µs, as a push starts it), no
// wake. It returns the ids.
//
// KEYS: the fixed keys, then the ready set of the partition.
// ARGV: partition, count.
var queueOldInsertScript = luaTestScript(`--#include lib/queue.lua
local p, n = tonumber(ARGV[1]), tonumber(ARGV[2])
local now = now_us()
local out = {}
if redis.call('EXISTS', K_IDS) == 0 then redis.call('SET', K_IDS, string.format('%d', now)) end
for i = 1, n do
  local id = string.format('%d', redis.call('INCR', K_IDS))
  redis.call('HSET', K_JOBS, id, cmsgpack.pack(p, 0, now, now, '', '', ''))
  redis.call('HSET', K_PAYLOADS, id, 'old')
  redis.call('ZADD', KEYS[11], id, id)
  out[#out + 1] = id
end
return out
`)

// queueRecordFieldsScript returns how many fields job ARGV[1]'s record
// holds (KEYS: the fixed keys).
var queueRecordFieldsScript = luaTestScript(`--#include lib/queue.lua
local rec = redis.call('HGET', K_JOBS, ARGV[1])
if not rec then return -1 end
return select('#', cmsgpack.unpack(rec))
`)

// insertOldJobs adds n ready jobs to partition p of queue as the previous
// version wrote them (queueOldInsertScript) and returns their ids.
func insertOldJobs(t *testing.T, s *Store, queue string, p, n int) []int64 {
	t.Helper()
	ks := append(s.keys.queueFixed(queue), s.keys.queueReady(queue, p))
	res, err := queueOldInsertScript.Run(t.Context(), s.rdb, ks, p, n).Slice()
	if err != nil {
		t.Fatalf("insert old jobs: %v", err)
	}
	ids := make([]int64, len(res))
	for i, v := range res {
		ids[i] = queueInt(v)
	}
	return ids
}

// recordFields is the number of fields of job id's record.
func recordFields(t *testing.T, s *Store, queue string, id int64) int64 {
	t.Helper()
	n, err := queueRecordFieldsScript.Run(t.Context(), s.rdb, s.keys.queueFixed(queue), strconv.FormatInt(id, 10)).Int64()
	if err != nil {
		t.Fatalf("record of job %d: %v", id, err)
	}
	return n
}

// claimOrdered returns jobs sorted in claim order (backends.ClaimOrder).
func claimOrdered(jobs []backends.Job) []int64 {
	jobs = slices.Clone(jobs)
	slices.SortFunc(jobs, backends.ClaimOrder)
	return jobIDs(jobs)
}

func jobIDs(jobs []backends.Job) []int64 {
	out := make([]int64, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

// drain claims every ready job of queue in batches of n, acking each, and
// returns them in the order claimed; each batch must come in claim order.
func drain(t *testing.T, s *Store, queue string, n int) []backends.Job {
	t.Helper()
	var got []backends.Job
	for {
		jobs := mustClaim(t, s, queue, "d", n)
		if len(jobs) == 0 {
			return got
		}
		for i, j := range jobs {
			if i > 0 && backends.ClaimOrder(jobs[i-1], j) >= 0 {
				t.Fatalf("one claim out of claim order: %d (priority %d) after %d (priority %d)",
					j.ID, j.Priority, jobs[i-1].ID, jobs[i-1].Priority)
			}
			if err := s.Ack(t.Context(), j); err != nil {
				t.Fatalf("ack %d: %v", j.ID, err)
			}
		}
		got = append(got, jobs...)
	}
}

// TestQueuePriorityConstants: lib/queue.lua's PRIO_STEP and ID_LIMIT are
// the Go constants, 2^45 and 2^53 + MinPriority * 2^45, and the scores at
// the bounds are exact in a double.
func TestQueuePriorityConstants(t *testing.T) {
	lib, err := luaFiles.ReadFile("lua/lib/queue.lua")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]int64{"PRIO_STEP": queuePrioStep, "ID_LIMIT": queueIDLimit} {
		found := false
		for line := range strings.Lines(string(lib)) {
			v, ok := strings.CutPrefix(line, "local "+name+" = ")
			if !ok {
				continue
			}
			v, _, _ = strings.Cut(v, " ")
			found = true
			if strings.TrimSpace(v) != strconv.FormatInt(want, 10) {
				t.Errorf("%s = %s, want %d", name, v, want)
			}
		}
		if !found {
			t.Errorf("lib/queue.lua: no %s", name)
		}
	}
	if queuePrioStep != 1<<45 || queueIDLimit-1-spec.MinPriority*queuePrioStep != 1<<53-1 {
		t.Errorf("PRIO_STEP %d, ID_LIMIT %d: the lowest priority's last score is not 2^53 - 1", queuePrioStep, queueIDLimit)
	}
	if f := float64(queueIDLimit - 1 - spec.MinPriority*queuePrioStep); int64(f) != queueIDLimit-1-spec.MinPriority*queuePrioStep {
		t.Errorf("the highest score %d is not exact in a double", queueIDLimit-1-spec.MinPriority*queuePrioStep)
	}
}

// TestQueuePriorityOldScores: a ready set written by the version before
// priorities (score = id, records without a priority) needs no migration:
// its jobs are priority 0 in every read and are claimed in their place
// among new jobs of every priority, across partitions, and the id-ordered
// readers (JobsPage, ObserveQueues' oldest ready) still see push order.
func TestQueuePriorityOldScores(t *testing.T) {
	s := openQueueStores(t, 1)[0]
	ctx := t.Context()
	putTestQueue(t, s, queueTestConfig("q", 3))
	var all []backends.Job
	old := func(p, n int) {
		for _, id := range insertOldJobs(t, s, "q", p, n) {
			all = append(all, backends.Job{ID: id})
		}
	}
	old(0, 3)
	old(2, 2)
	for i, pr := range []int{0, 2, -1, 0, 2, spec.MaxPriority, spec.MinPriority} {
		all = append(all, mustPush(t, s, "q", backends.PushRequest{Payload: fmt.Appendf(nil, "new-%d", i), Priority: pr}))
	}
	old(1, 3)
	all = append(all, mustPush(t, s, "q", backends.PushRequest{Payload: []byte("last"), Priority: 1}))

	oldest := all[0].ID
	pj, state, err := s.JobByID(ctx, "q", oldest, 16)
	if err != nil || state != backends.JobReady || pj.Priority != 0 || string(pj.Payload) != "old" {
		t.Fatalf("JobByID of an old job: %+v %s %v", pj, state, err)
	}
	if n := recordFields(t, s, "q", oldest); n != 7 {
		t.Fatalf("an old record has %d fields, want 7", n)
	}
	st := observeTestQueue(t, s, "q")
	ej, _, _ := s.JobByID(ctx, "q", oldest, 0)
	if !st.OldestReady.Equal(ej.EnqueuedAt) || st.Ready != int64(len(all)) {
		t.Fatalf("observed %d ready, oldest %v; want %d, the first old job's %v", st.Ready, st.OldestReady, len(all), ej.EnqueuedAt)
	}
	page, err := s.JobsPage(ctx, "q", backends.JobPage{State: backends.JobReady, Limit: 100})
	if err != nil {
		t.Fatalf("jobs page: %v", err)
	}
	var paged []int64
	for _, j := range page {
		paged = append(paged, j.ID)
	}
	byID := jobIDs(all)
	slices.Sort(byID)
	if !slices.Equal(paged, byID) {
		t.Fatalf("ready page %v, want push order %v", paged, byID)
	}

	got := drain(t, s, "q", 4)
	if want := claimOrdered(all); !slices.Equal(jobIDs(got), want) {
		t.Fatalf("claimed %v, want %v", jobIDs(got), want)
	}
	for _, j := range got {
		if string(j.Payload) == "old" && j.Priority != 0 {
			t.Fatalf("old job %d claimed with priority %d", j.ID, j.Priority)
		}
	}
}

// TestQueuePriorityRecord: a priority-0 job's record is as small as before
// priorities (seven fields, eight once an attempt failed); another
// priority adds itself at the end (after false for attempt errors not yet
// there), and survives a retry, which adds the errors; its ready-set score
// is id - priority * 2^45 and a priority-0 one's is its id; ObserveQueues'
// oldest ready job is the oldest, not the first in claim order.
func TestQueuePriorityRecord(t *testing.T) {
	s := openQueueStores(t, 1)[0]
	ctx := t.Context()
	putTestQueue(t, s, queueTestConfig("q", 1))
	zero := mustPush(t, s, "q", backends.PushRequest{Payload: []byte("zero")})
	high := mustPush(t, s, "q", backends.PushRequest{Payload: []byte("high"), Priority: 3})
	if zero.Priority != 0 || high.Priority != 3 {
		t.Fatalf("pushed priorities %d, %d", zero.Priority, high.Priority)
	}
	if a, b := recordFields(t, s, "q", zero.ID), recordFields(t, s, "q", high.ID); a != 7 || b != 9 {
		t.Fatalf("records of %d and %d fields, want 7 and 9", a, b)
	}
	set := s.keys.queueReady("q", 0)
	scores := s.rdb.ZRangeWithScores(ctx, set, 0, -1).Val()
	if len(scores) != 2 || scores[0].Member != strconv.FormatInt(high.ID, 10) ||
		int64(scores[0].Score) != high.ID-3*queuePrioStep || int64(scores[1].Score) != zero.ID {
		t.Fatalf("ready set %+v, want %d at %d then %d at its id", scores, high.ID, high.ID-3*queuePrioStep, zero.ID)
	}
	// The oldest ready job is the first pushed, not the first to claim.
	if st := observeTestQueue(t, s, "q"); !st.OldestReady.Equal(zero.EnqueuedAt) {
		t.Fatalf("oldest ready %v, want the priority-0 job's %v (the priority-3 one's %v)", st.OldestReady, zero.EnqueuedAt, high.EnqueuedAt)
	}
	jobs := mustClaim(t, s, "q", "w", 2)
	if !slices.Equal(jobIDs(jobs), []int64{high.ID, zero.ID}) || jobs[0].Priority != 3 {
		t.Fatalf("claimed %+v, want the priority-3 job first", jobs)
	}
	for _, j := range jobs {
		if err := s.Retry(ctx, j, "boom"); err != nil {
			t.Fatalf("retry: %v", err)
		}
	}
	if a, b := recordFields(t, s, "q", zero.ID), recordFields(t, s, "q", high.ID); a != 8 || b != 9 {
		t.Fatalf("records after a retry of %d and %d fields, want 8 and 9", a, b)
	}
	pj, _, err := s.JobByID(ctx, "q", high.ID, 16)
	if err != nil || pj.Priority != 3 || len(pj.Errors) != 1 || pj.LastError != "boom" {
		t.Fatalf("after a retry: %+v, %v; want priority 3 and one attempt error", pj, err)
	}
	jobs = mustClaim(t, s, "q", "w", 2)
	if !slices.Equal(jobIDs(jobs), []int64{high.ID, zero.ID}) || jobs[0].Priority != 3 || jobs[0].Attempt != 2 {
		t.Fatalf("claimed after the retry %+v, want the priority-3 job first", jobs)
	}
}

// TestQueuePriorityMoves: a job keeps its priority through the moves the
// conformance group does not make: a delayed push becoming due, run-now,
// one dead job requeued, and a shrink of the partitions (PutQueue moves
// ready sets whole, scores and all), with the dead and browse reads
// reporting it.
func TestQueuePriorityMoves(t *testing.T) {
	s := openQueueStores(t, 1)[0]
	ctx := t.Context()
	cfg := queueTestConfig("q", 6)
	cfg.MaxAttempts = 1
	putTestQueue(t, s, cfg)
	var all []backends.Job
	for i := range 60 {
		req := backends.PushRequest{Payload: fmt.Appendf(nil, "%d", i), Priority: i%7 - 3}
		if i%5 == 0 {
			req.Key = fmt.Sprintf("k%d", i%3) // keyed jobs, of any priority
		}
		all = append(all, mustPush(t, s, "q", req))
	}
	due := mustPush(t, s, "q", backends.PushRequest{Payload: []byte("due"), Priority: 9, Delay: 50 * time.Millisecond})
	later := mustPush(t, s, "q", backends.PushRequest{Payload: []byte("later"), Priority: 8, Delay: time.Hour})
	dead := mustPush(t, s, "q", backends.PushRequest{Payload: []byte("dead"), Priority: 7})
	// The dead one: claimed first (priority 7 is the highest ready), its
	// one attempt used up.
	j := mustClaim(t, s, "q", "w", 1)[0]
	if j.ID != dead.ID {
		t.Fatalf("claimed %d, want the priority-7 job %d", j.ID, dead.ID)
	}
	if err := s.Retry(ctx, j, "boom"); err != nil {
		t.Fatal(err)
	}
	dj, err := s.DeadJob(ctx, "q", dead.ID, 16)
	if err != nil || dj.Priority != 7 {
		t.Fatalf("dead job: %+v, %v; want priority 7", dj, err)
	}
	dp, err := s.DeadPage(ctx, "q", 0, 10, 16)
	if err != nil || len(dp) != 1 || dp[0].Priority != 7 {
		t.Fatalf("dead page: %+v, %v", dp, err)
	}
	dl, err := s.Dead(ctx, "q", 0)
	if err != nil || len(dl) != 1 || dl[0].Priority != 7 {
		t.Fatalf("dead: %+v, %v", dl, err)
	}
	if err := s.RequeueDeadJob(ctx, "q", dead.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.RunJobNow(ctx, "q", later.ID); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // due is due: the next claim moves it

	if _, err := s.PutQueue(ctx, queueTestConfig("q", 2)); err != nil {
		t.Fatalf("shrink: %v", err)
	}
	all = append(all, due, later, dead)
	// The ready page lists every job but due (still in the delayed set
	// until a claim sweeps it) in push order, page by page.
	var paged []int64
	for off := 0; ; off += 7 {
		page, err := s.JobsPage(ctx, "q", backends.JobPage{State: backends.JobReady, Offset: off, Limit: 7})
		if err != nil {
			t.Fatalf("jobs page at %d: %v", off, err)
		}
		if len(page) == 0 {
			break
		}
		for _, j := range page {
			paged = append(paged, j.ID)
			if j.Priority != all[slices.IndexFunc(all, func(a backends.Job) bool { return a.ID == j.ID })].Priority {
				t.Fatalf("page: job %d with priority %d", j.ID, j.Priority)
			}
		}
	}
	var want []int64
	for _, j := range all {
		if j.ID != due.ID {
			want = append(want, j.ID)
		}
	}
	slices.Sort(want)
	if !slices.Equal(paged, want) {
		t.Fatalf("ready pages %v, want push order %v", paged, want)
	}

	// One claim takes the keyed jobs only in their key's push order; the
	// rest come in claim order.
	got := drain(t, s, "q", 5)
	if len(got) != len(all) {
		t.Fatalf("drained %d jobs, want %d", len(got), len(all))
	}
	lastOfKey := map[string]int64{}
	var free []backends.Job
	for _, j := range got {
		if j.Partition >= 2 {
			t.Fatalf("job %d claimed from partition %d of 2", j.ID, j.Partition)
		}
		if j.Key != "" {
			if j.ID < lastOfKey[j.Key] {
				t.Fatalf("key %s: job %d after %d", j.Key, j.ID, lastOfKey[j.Key])
			}
			lastOfKey[j.Key] = j.ID
			continue
		}
		free = append(free, j)
	}
	if !slices.Equal(jobIDs(free), claimOrdered(free)) {
		t.Fatalf("keyless jobs claimed %v, want %v", jobIDs(free), claimOrdered(free))
	}
	if got[0].ID != due.ID || got[1].ID != later.ID || got[2].ID != dead.ID {
		t.Fatalf("first claimed %v, want due %d, later %d, dead %d (priorities 9, 8, 7)", jobIDs(got[:3]), due.ID, later.ID, dead.ID)
	}
}

// TestPushIDLimit: a push whose id would reach ID_LIMIT (where a
// ready-set score stops being exact) is refused, the counter put back and
// nothing written; the last id below it scores exactly at the lowest
// priority.
func TestPushIDLimit(t *testing.T) {
	s := openQueueStores(t, 1)[0]
	ctx := t.Context()
	putTestQueue(t, s, queueTestConfig("q", 1))
	ids := s.keys.queueFixed("q")[1]
	if err := s.rdb.Set(ctx, ids, queueIDLimit-2, 0).Err(); err != nil {
		t.Fatal(err)
	}
	last := mustPush(t, s, "q", backends.PushRequest{Payload: []byte("last"), Priority: spec.MinPriority})
	if last.ID != queueIDLimit-1 {
		t.Fatalf("pushed id %d, want %d", last.ID, int64(queueIDLimit-1))
	}
	if _, err := s.Push(ctx, "q", backends.PushRequest{Payload: []byte("over")}); err == nil || !strings.Contains(err.Error(), "no longer exact") {
		t.Fatalf("push past the limit: %v, want a refusal", err)
	}
	if _, _, err := s.PushOnce(ctx, "q", "once", backends.PushRequest{Payload: []byte("over")}); err == nil {
		t.Fatal("push once past the limit: no error")
	}
	if v, err := s.rdb.Get(ctx, ids).Int64(); err != nil || v != queueIDLimit-1 {
		t.Fatalf("counter %d, %v after the refusals; want %d", v, err, int64(queueIDLimit-1))
	}
	if st := observeTestQueue(t, s, "q"); st.Ready != 1 {
		t.Fatalf("%d ready after the refusals, want 1", st.Ready)
	}
	sc := s.rdb.ZScore(ctx, s.keys.queueReady("q", 0), strconv.FormatInt(last.ID, 10)).Val()
	if int64(sc) != 1<<53-1 {
		t.Fatalf("score %v, want 2^53 - 1", sc)
	}
	j := mustClaim(t, s, "q", "w", 2)
	if len(j) != 1 || j[0].ID != last.ID || j[0].Priority != spec.MinPriority {
		t.Fatalf("claimed %+v, want job %d priority %d", j, last.ID, spec.MinPriority)
	}
}
