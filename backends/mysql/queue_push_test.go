package mysql_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/mysql"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/spec"
)

// Tests of the one-statement push (queue_push.go), on both of its paths:
// MariaDB's INSERT ... RETURNING and MySQL's transaction, which the test
// hook PushTxForTest makes a MariaDB store take.

// pushPaths runs f once per push path.
func pushPaths(t *testing.T, f func(t *testing.T, tx bool)) {
	for _, tx := range []bool{false, true} {
		name := "returning"
		if tx {
			name = "transaction"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f(t, tx)
		})
	}
}

// pushTrips pushes req and returns the job and the statements it sent.
func pushTrips(t *testing.T, s *mysql.Store, queue string, req backends.PushRequest) (backends.Job, uint64) {
	t.Helper()
	trips := s.RoundTrips()
	j := pushJob(t, s, queue, req)
	return j, s.RoundTrips() - trips
}

// TestQueuePushOneStatement: once a Store knows a queue's config, a push
// with no worker parked is one statement (MariaDB) or one transaction of
// two (MySQL), delayed and keyed (unique none) pushes included, and still
// returns the whole job; with a worker parked on another handle it also
// wakes that worker.
func TestQueuePushOneStatement(t *testing.T) {
	t.Parallel()
	pushPaths(t, func(t *testing.T, tx bool) {
		s, dsn := queueStore(t, wakeQueueConfig("q", spec.ClaimPartition))
		if tx {
			s.PushTxForTest()
		}
		want := uint64(1) // the INSERT ... RETURNING
		if tx {
			want = 3 // the transaction, its INSERT and its read
		}
		pushJob(t, s, "q", backends.PushRequest{Payload: []byte("first")}) // reads the config
		parts := map[int]bool{}
		for i, req := range []backends.PushRequest{
			{Payload: []byte("a")}, {Payload: []byte("b")}, {Payload: nil},
			{Payload: []byte("later"), Delay: time.Hour},
			{Payload: []byte("keyed"), Key: "k"},
			{Payload: []byte("urgent"), Priority: 4}, {Payload: []byte("low"), Key: "k2", Priority: -2},
		} {
			j, n := pushTrips(t, s, "q", req)
			if n != want {
				t.Errorf("push %d sent %d statements, want %d", i, n, want)
			}
			if j.ID == 0 || j.Queue != "q" || j.Key != req.Key || j.Priority != req.Priority || j.Attempt != 0 || j.EnqueuedAt.IsZero() ||
				j.Payload == nil || !bytes.Equal(j.Payload, req.Payload) || j.Partition < 0 || j.Partition >= 4 {
				t.Fatalf("push %d returned %+v", i, j)
			}
			if d := j.AvailableAt.Sub(j.EnqueuedAt); d < req.Delay || d > req.Delay+time.Second {
				t.Errorf("push %d with delay %v: available %v after its enqueue", i, req.Delay, d)
			}
			parts[j.Partition] = true
		}
		if len(parts) < 2 {
			t.Errorf("keyless pushes all went to partition %v", parts)
		}

		// A worker parked on another handle: the push wakes it.
		// The first claim takes the priorities as stored: urgent first,
		// low last.
		waiter := openStore(t, dsn, "coordd_", backends.Options{Version: "0.1.0"})
		for first := true; ; first = false {
			jobs, err := waiter.Claim(t.Context(), "q", "w", 10)
			if err != nil {
				t.Fatalf("claim: %v", err)
			}
			if len(jobs) == 0 {
				break
			}
			if last := jobs[len(jobs)-1]; first && (string(jobs[0].Payload) != "urgent" || jobs[0].Priority != 4 || string(last.Payload) != "low" || last.Priority != -2) {
				t.Fatalf("first claim took %+v first and %+v last, want urgent (4) and low (-2)", jobs[0], last)
			}
		}
		done, took := startWait(t.Context(), waiter, "q", longPark)
		waitParked(t, waiter, 1)
		if _, n := pushTrips(t, s, "q", backends.PushRequest{Payload: []byte("wake")}); n <= want {
			t.Errorf("a push with a worker parked sent %d statements: it cannot have woken it", n)
		}
		returnsWithin(t, done, early, "push to a queue with a parked worker")
		t.Logf("woken after %v", took())
	})
}

// TestQueuePushSeesConfigChange: a Store pushes with the config it last
// read, and the statement checks it: a config changed by another handle
// (max_payload, unique, partitions) or a deleted queue is seen at the next
// push.
func TestQueuePushSeesConfigChange(t *testing.T) {
	t.Parallel()
	pushPaths(t, func(t *testing.T, tx bool) {
		ctx := t.Context()
		cfg := wakeQueueConfig("q", spec.ClaimPartition)
		cfg.MaxPayload = 16
		s, dsn := queueStore(t, cfg)
		if tx {
			s.PushTxForTest()
		}
		other := openStore(t, dsn, "coordd_", backends.Options{Version: "0.1.0"})
		put := func(cfg backends.QueueConfig) {
			t.Helper()
			if _, err := other.PutQueue(ctx, cfg); err != nil {
				t.Fatalf("put queue: %v", err)
			}
		}
		pushJob(t, s, "q", backends.PushRequest{Payload: make([]byte, 16), Key: "k"})

		cfg.MaxPayload = 8
		put(cfg)
		if _, err := s.Push(ctx, "q", backends.PushRequest{Payload: make([]byte, 9)}); !errors.Is(err, backends.ErrPayloadTooLarge) {
			t.Fatalf("push of 9 bytes after max_payload became 8: %v, want ErrPayloadTooLarge", err)
		}
		cfg.MaxPayload = 32
		put(cfg)
		pushJob(t, s, "q", backends.PushRequest{Payload: make([]byte, 32)})

		cfg.Unique = spec.UniquePending
		put(cfg)
		dup, err := s.Push(ctx, "q", backends.PushRequest{Payload: []byte("again"), Key: "k"})
		if !errors.Is(err, backends.ErrDuplicate) {
			t.Fatalf("push of a pending key after unique became pending: %v, want ErrDuplicate", err)
		}
		if dup.ID == 0 || dup.Key != "k" {
			t.Fatalf("duplicate push returned %+v, want the pending job", dup)
		}

		cfg.Unique, cfg.Partitions = spec.UniqueNone, 2
		put(cfg)
		for range 6 {
			if j := pushJob(t, s, "q", backends.PushRequest{Payload: []byte("x")}); j.Partition >= 2 {
				t.Fatalf("push after partitions became 2 returned partition %d", j.Partition)
			}
		}
		st, err := other.ObserveQueues(ctx, []string{"q"})
		if err != nil {
			t.Fatalf("observe: %v", err)
		}
		if st["q"].Stranded != 0 {
			t.Fatalf("%d jobs stranded in removed partitions", st["q"].Stranded)
		}

		if err := other.DeleteQueue(ctx, "q", true); err != nil {
			t.Fatalf("delete queue: %v", err)
		}
		if _, err := s.Push(ctx, "q", backends.PushRequest{Payload: []byte("x")}); !errors.Is(err, backends.ErrNotFound) {
			t.Fatalf("push to a deleted queue: %v, want ErrNotFound", err)
		}
	})
}

// TestQueuePushMarkRunsOut: a worker's park mark outlives its park by a
// bounded time; once it has run out, pushes send no wake-up again.
func TestQueuePushMarkRunsOut(t *testing.T) {
	t.Parallel()
	s, _ := queueStore(t, wakeQueueConfig("q", spec.ClaimPartition))
	pushJob(t, s, "q", backends.PushRequest{Payload: []byte("first")})
	if _, err := s.Claim(t.Context(), "q", "w", 10); err != nil {
		t.Fatalf("claim: %v", err)
	}
	if err := s.WaitQueue(t.Context(), "q", 100*time.Millisecond); err != nil {
		t.Fatalf("wait queue: %v", err)
	}
	deadline := time.Now().Add(early)
	for {
		var marked bool
		err := s.DB().QueryRowContext(t.Context(),
			"SELECT parked_until > TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) FROM coordd_queues WHERE name = 'q'").Scan(&marked)
		if err != nil {
			t.Fatalf("read the mark: %v", err)
		}
		if !marked {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the park mark of a 100ms wait still lasts after %v", early)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, n := pushTrips(t, s, "q", backends.PushRequest{Payload: []byte("x")}); n != 1 {
		t.Errorf("push after the mark ran out sent %d statements, want 1", n)
	}
}

// TestQueuePushConcurrent: pushes of many goroutines through one Store
// (which go together in one statement) each get their own job, whole, and
// each job is stored as pushed; a config change on another handle in the
// middle is seen by the pushes after it. Payloads of max_payload bytes
// with a small packet limit in the DSN, several in one batch, are stored
// whole.
func TestQueuePushConcurrent(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dsn := testenv.MySQLDSN(t)
	s := migrated(t, withParam(dsn, "maxAllowedPacket=1048576"), "coordd_")
	bound, err := s.MaxPayload(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := wakeQueueConfig("q", spec.ClaimPartition)
	cfg.MaxPayload = bound
	if _, err := s.PutQueue(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	other := openStore(t, dsn, "coordd_", backends.Options{Version: "0.1.0"})

	const workers, each = 8, 40
	var mu sync.Mutex
	pushed := map[int64][]byte{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := range each {
				payload := fmt.Appendf(nil, "%d/%d", w, i)
				if i < 3 {
					payload = bytes.Repeat([]byte{'\''}, int(bound)) // escaped to twice its size
					payload[0] = byte(w)
					payload[1] = byte(i)
				}
				req := backends.PushRequest{Payload: payload}
				if i%3 == 0 {
					req.Key = fmt.Sprintf("k%d", w)
				}
				j, err := s.Push(ctx, "q", req)
				if err != nil {
					t.Errorf("push %d/%d: %v", w, i, err)
					return
				}
				if j.ID == 0 || j.Key != req.Key || !bytes.Equal(j.Payload, payload) || j.EnqueuedAt.IsZero() {
					t.Errorf("push %d/%d returned %+v", w, i, j)
					return
				}
				mu.Lock()
				if _, dup := pushed[j.ID]; dup {
					t.Errorf("two pushes returned job %d", j.ID)
				}
				pushed[j.ID] = payload
				mu.Unlock()
				if w == 0 && i == each/2 {
					cfg.Partitions = 3
					if _, err := other.PutQueue(ctx, cfg); err != nil {
						t.Errorf("put queue: %v", err)
					}
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	if t.Failed() {
		return
	}
	// Every job comes back as pushed (keyed ones one at a time: each is
	// acked before the next claim).
	got := 0
	for got < len(pushed) {
		jobs, err := s.Claim(ctx, "q", "w", 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(jobs) == 0 {
			t.Fatalf("claimed %d of %d jobs, then none", got, len(pushed))
		}
		for _, j := range jobs {
			want, ok := pushed[j.ID]
			if !ok || !bytes.Equal(j.Payload, want) {
				t.Fatalf("claimed job %d with a payload of %d bytes; pushed: %v", j.ID, len(j.Payload), ok)
			}
			if err := s.Ack(ctx, j); err != nil {
				t.Fatal(err)
			}
			got++
		}
	}
}

// TestQueuePushMaxPayloadOneStatement: the one-statement push carries the
// config text besides the payload; a payload of exactly the reported
// bound, every byte of which the driver escapes, with the longest queue
// name and key, still fits the server's packet (as TestMaxPayloadIsTrue
// checks for the unique push).
func TestQueuePushMaxPayloadOneStatement(t *testing.T) {
	t.Parallel()
	pushPaths(t, func(t *testing.T, tx bool) {
		ctx := t.Context()
		s := migrated(t, testenv.MySQLDSN(t), "coordd_")
		if tx {
			s.PushTxForTest()
		}
		bound, err := s.MaxPayload(ctx)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.Repeat("q", spec.MaxNameLen)
		cfg := backends.QueueConfig{Name: name, Partitions: 1, VisibilityTimeout: time.Minute, MaxAttempts: 3,
			Unique: spec.UniqueNone, MaxPayload: bound, Claim: spec.ClaimPartition}
		if _, err := s.PutQueue(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		payload := bytes.Repeat([]byte{'\''}, int(bound))
		key := strings.Repeat("'", spec.MaxKeyLen)
		for _, k := range []string{"", key} {
			if _, err := s.Push(ctx, name, backends.PushRequest{Key: k, Payload: payload}); err != nil {
				t.Fatalf("push of %d bytes (the bound) with a key of %d bytes: %v", bound, len(k), err)
			}
			jobs, err := s.Claim(ctx, name, "w", 1)
			if err != nil || len(jobs) != 1 || !bytes.Equal(jobs[0].Payload, payload) || jobs[0].Key != k {
				t.Fatalf("claim = %d jobs, %v; want the %d-byte job back", len(jobs), err, bound)
			}
		}
	})
}
