package postgres_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
)

// TestBatchedPushesAndAcksKeepEachCallersResult: pushes and acks that go
// together in one batch each get their own result: a push to an absent
// queue or over max_payload fails alone, every other job is stored once in
// push order per producer, and an ack by an owner that no longer holds its
// job fails alone with ErrLost.
func TestBatchedPushesAndAcksKeepEachCallersResult(t *testing.T) {
	ctx := t.Context()
	a, _ := twoHosts(t, backends.Options{})
	if _, err := a.PutQueue(ctx, backends.QueueConfig{Name: "small", Partitions: 2, VisibilityTimeout: time.Minute, MaxAttempts: 3, MaxPayload: 4}); err != nil {
		t.Fatal(err)
	}
	const producers, each = 16, 40
	var wg sync.WaitGroup
	errs := make(chan error, producers*each*3)
	ids := make([][]int64, producers)
	for p := range producers {
		wg.Go(func() {
			for range each {
				j, err := a.Push(ctx, "q", backends.PushRequest{Payload: []byte("job")})
				if err != nil {
					errs <- err
					continue
				}
				ids[p] = append(ids[p], j.ID)
				if _, err := a.Push(ctx, "absent", backends.PushRequest{Payload: []byte("x")}); !errors.Is(err, backends.ErrNotFound) {
					errs <- err
				}
				if _, err := a.Push(ctx, "small", backends.PushRequest{Payload: []byte("too big")}); !errors.Is(err, backends.ErrPayloadTooLarge) {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("push: %v", err)
	}
	for p, got := range ids {
		for i := 1; i < len(got); i++ {
			if got[i] <= got[i-1] {
				t.Fatalf("producer %d: ids %v out of push order", p, got)
			}
		}
	}
	jobs, err := a.Claim(ctx, "q", "w", producers*each)
	if err != nil || len(jobs) != producers*each {
		t.Fatalf("claimed %d jobs, %v; want %d", len(jobs), err, producers*each)
	}
	stale := jobs[7]
	stale.Owner = "someone-else"
	jobs[7] = stale
	ackErrs := make([]error, len(jobs))
	for i, j := range jobs {
		wg.Go(func() { ackErrs[i] = a.Ack(ctx, j) })
	}
	wg.Wait()
	for i, err := range ackErrs {
		if i == 7 {
			if !errors.Is(err, backends.ErrLost) {
				t.Errorf("ack by a stale owner = %v, want ErrLost", err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ack %d: %v", i, err)
		}
	}
}
