package redis

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// TestPushBatchEachAsIfAlone: one script call carries a batch of pushes
// (what concurrent Push calls share), and each job in it gets what it would
// have got alone: a unique job finds an earlier one of its key in the same
// batch, an oversized payload fails only its own push, ids rise in batch
// order, and the batch is split where its bytes would make one huge call.
func TestPushBatchEachAsIfAlone(t *testing.T) {
	s := openQueueStores(t, 1)[0]
	cfg := queueTestConfig("pb", 3)
	cfg.Unique, cfg.MaxPayload = spec.UniquePending, queueMaxPushBatchBytes/2+10
	putTestQueue(t, s, cfg)
	big := strings.Repeat("x", queueMaxPushBatchBytes/2)
	batch := []*queuePush{
		{req: backends.PushRequest{Payload: []byte("a"), Key: "k"}},
		{req: backends.PushRequest{Payload: []byte("b")}},
		{req: backends.PushRequest{Payload: []byte("c"), Key: "k"}}, // duplicate of the first
		{req: backends.PushRequest{Payload: []byte(big + big)}},     // too large
		{req: backends.PushRequest{Payload: []byte(big)}},
		{req: backends.PushRequest{Payload: []byte(big)}}, // a second call: over the byte bound
		{req: backends.PushRequest{Payload: []byte("d"), Key: "k2"}},
	}
	errs := s.pushBatch(t.Context(), "pb", batch)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("push %d: %v", i, err)
		}
	}
	var last int64
	for i, p := range batch {
		code := queueInt(p.res[0])
		switch i {
		case 2:
			if code != -3 || queueInt(p.res[1]) != queueInt(batch[0].res[1]) {
				t.Fatalf("duplicate in the batch got %v, want the first job %v", p.res, batch[0].res[1])
			}
		case 3:
			if code != -2 {
				t.Fatalf("oversized payload got %v, want -2", p.res)
			}
		default:
			if code != 1 {
				t.Fatalf("push %d got %v", i, p.res)
			}
			if id := queueInt(p.res[1]); id <= last {
				t.Fatalf("push %d got id %d after %d", i, id, last)
			} else {
				last = id
			}
		}
	}
	st, err := s.ObserveQueues(t.Context(), []string{"pb"})
	if err != nil {
		t.Fatal(err)
	}
	if n := st["pb"].Ready; n != 5 {
		t.Fatalf("%d ready, want 5", n)
	}
	if errs := s.pushBatch(t.Context(), "absent", batch[:2]); !errors.Is(errs[0], backends.ErrNotFound) || !errors.Is(errs[1], backends.ErrNotFound) {
		t.Fatalf("push to an absent queue: %v", errs)
	}
}

// TestConcurrentPushesOneKey: many concurrent pushes of one key to a unique
// queue, through Push (so batched as they come): exactly one job is
// created and every other push returns ErrDuplicate with that job.
func TestConcurrentPushesOneKey(t *testing.T) {
	s := openQueueStores(t, 1)[0]
	cfg := queueTestConfig("pk", 4)
	cfg.Unique = spec.UniquePending
	putTestQueue(t, s, cfg)
	const n = 64
	ids := make([]int64, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			j, err := s.Push(t.Context(), "pk", backends.PushRequest{Payload: []byte("p"), Key: "same"})
			ids[i], errs[i] = j.ID, err
		})
	}
	wg.Wait()
	created := 0
	for i := range n {
		switch {
		case errs[i] == nil:
			created++
		case !errors.Is(errs[i], backends.ErrDuplicate):
			t.Fatalf("push %d: %v", i, errs[i])
		}
		if ids[i] != ids[0] {
			t.Fatalf("push %d names job %d, push 0 job %d", i, ids[i], ids[0])
		}
	}
	if created != 1 {
		t.Fatalf("%d jobs created for one key", created)
	}
}

// TestPushBatchWithoutUnique: on a queue without unique keys a batch is
// written with one call per key (ids from one INCRBY), and each job lands
// where a push of its own would put it: keyed jobs in the key index (one
// key's jobs still run in push order), delayed ones in the delayed set, an
// oversized payload refused alone.
func TestPushBatchWithoutUnique(t *testing.T) {
	s := openQueueStores(t, 1)[0]
	cfg := queueTestConfig("pn", 2)
	cfg.MaxPayload = 10
	putTestQueue(t, s, cfg)
	batch := []*queuePush{
		{req: backends.PushRequest{Payload: []byte("a"), Key: "k"}},
		{req: backends.PushRequest{Payload: []byte("b")}},
		{req: backends.PushRequest{Payload: []byte("far too large")}},
		{req: backends.PushRequest{Payload: []byte("c"), Delay: time.Hour}},
		{req: backends.PushRequest{Payload: []byte("d"), Key: "k"}},
	}
	for i, err := range s.pushBatch(t.Context(), "pn", batch) {
		if err != nil {
			t.Fatalf("push %d: %v", i, err)
		}
	}
	var last int64
	for i, p := range batch {
		code := queueInt(p.res[0])
		if i == 2 {
			if code != -2 {
				t.Fatalf("oversized payload got %v", p.res)
			}
			continue
		}
		if id := queueInt(p.res[1]); code != 1 || id <= last {
			t.Fatalf("push %d got %v after id %d", i, p.res, last)
		} else {
			last = id
		}
	}
	if p := queueInt(batch[3].res[4]) - queueInt(batch[3].res[3]); p != time.Hour.Microseconds() {
		t.Fatalf("delayed job available %d µs after its push", p)
	}
	jobs, err := s.Claim(t.Context(), "pn", "w", 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, j := range jobs {
		got = append(got, string(j.Payload))
	}
	slices.Sort(got)
	if want := []string{"a", "b"}; !slices.Equal(got, want) {
		t.Fatalf("claimed %v, want %v (d waits for a, its key's elder; c is delayed)", got, want)
	}
	st, err := s.ObserveQueues(t.Context(), []string{"pn"})
	if err != nil {
		t.Fatal(err)
	}
	if q := st["pn"]; q.Ready != 2 || q.Delayed != 1 || q.InFlight != 2 {
		t.Fatalf("ready %d (delayed %d), in flight %d; want 2 (1), 2", q.Ready, q.Delayed, q.InFlight)
	}
}

// TestPushShortReply: a batch pushed whole gets the script's short reply
// (first id, time, partition count), and each push's job must still be the
// one stored: consecutive ids in batch order, a keyless job in partition
// id % P, a keyed one in its key's partition, available after its delay.
func TestPushShortReply(t *testing.T) {
	s := openQueueStores(t, 1)[0]
	putTestQueue(t, s, queueTestConfig("sr", 3))
	batch := []*queuePush{
		{req: backends.PushRequest{Payload: []byte("a")}},
		{req: backends.PushRequest{Payload: []byte("b"), Key: "k1"}},
		{req: backends.PushRequest{Payload: []byte("c")}},
		{req: backends.PushRequest{Payload: []byte("d"), Delay: time.Hour}},
		{req: backends.PushRequest{Payload: []byte("e"), Key: "k2"}},
	}
	for i, err := range s.pushBatch(t.Context(), "sr", batch) {
		if err != nil {
			t.Fatalf("push %d: %v", i, err)
		}
	}
	first := queueInt(batch[0].res[1])
	ready := map[int64]backends.Job{}
	jobs, err := s.Claim(t.Context(), "sr", "w", 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		ready[j.ID] = j
	}
	for i, p := range batch {
		id, part, enq, avail := queueInt(p.res[1]), int(queueInt(p.res[2])), queueInt(p.res[3]), queueInt(p.res[4])
		if queueInt(p.res[0]) != 1 || id != first+int64(i) {
			t.Fatalf("push %d got %v, want status 1 and id %d", i, p.res, first+int64(i))
		}
		if want := queueMicros(p.req.Delay); avail-enq != want {
			t.Errorf("push %d: available %d µs after enqueue, want %d", i, avail-enq, want)
		}
		if p.req.Delay > 0 {
			if _, ok := ready[id]; ok {
				t.Errorf("delayed push %d was claimable", i)
			}
			continue
		}
		j, ok := ready[id]
		if !ok {
			t.Fatalf("push %d: job %d not claimed (claimed %v)", i, id, jobs)
		}
		if j.Partition != part || string(j.Payload) != string(p.req.Payload) || j.Key != p.req.Key || !j.EnqueuedAt.Equal(queueTime(enq)) {
			t.Errorf("push %d replied partition %d, enqueued %v; stored %+v", i, part, queueTime(enq), j)
		}
		want := int(id % 3)
		if p.req.Key != "" {
			want = backends.KeyPartition(p.req.Key, 3)
		}
		if part != want {
			t.Errorf("push %d in partition %d, want %d", i, part, want)
		}
	}
}

// TestPushIDsAfterLoss: when the id counter is lost (a restart without
// persistence, a failover to a replica that had not got it), the next push
// moves it to the server's time in µs, above any id handed out before.
func TestPushIDsAfterLoss(t *testing.T) {
	s := openQueueStores(t, 1)[0]
	putTestQueue(t, s, queueTestConfig("il", 1))
	before := mustPush(t, s, "il", backends.PushRequest{Payload: []byte("a")})
	if err := s.rdb.Del(t.Context(), s.keys.queueFixed("il")[1]).Err(); err != nil {
		t.Fatal(err)
	}
	now, err := s.Now(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	after := mustPush(t, s, "il", backends.PushRequest{Payload: []byte("b")})
	if after.ID <= before.ID || after.ID <= now.UnixMicro() {
		t.Fatalf("id after the counter's loss %d, want above %d and the server's time %d µs", after.ID, before.ID, now.UnixMicro())
	}
}
