package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/internal/testenv"
)

// TestServerKilledMidHoldComesBack: the server is killed with SIGKILL
// (postmaster and backends) while a slot is held and a worker waits for
// jobs. Calls meanwhile fail within their deadline instead of hanging;
// once the server is back the same handle works again, the committed hold
// is still there and still counts against the limit, the next grant's
// fencing number is above the first one's, and the idle worker (whose
// listening connection died) finds a job pushed after the restart.
func TestServerKilledMidHoldComesBack(t *testing.T) {
	p := testenv.StartPostgres(t)
	dsn := p.CreateDatabase(t)
	s := openStore(t, dsn, "coordd", backends.Options{Version: "0.1.0"})
	ctx := t.Context()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSemaphore(ctx, backends.SemaphoreConfig{Name: "s", Limit: 1, Lease: time.Minute, Mode: "lease", MaxWaiting: -1}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutQueue(ctx, backends.QueueConfig{Name: "q", Partitions: 1, VisibilityTimeout: time.Minute, MaxAttempts: 3}); err != nil {
		t.Fatal(err)
	}
	first, err := s.TryAcquire(ctx, backends.SemRef{Name: "s"}, backends.AcquireRequest{Owner: "a", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// An idle wait, so that the listening connection is up when the
	// server dies.
	if err := s.WaitQueue(ctx, "q", 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}

	p.Kill()
	down, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = s.TryAcquire(down, backends.SemRef{Name: "s"}, backends.AcquireRequest{Owner: "b", Lease: time.Minute})
	cancel()
	if err == nil || errors.Is(err, backends.ErrNoSlot) {
		t.Fatalf("acquire while the server is down = %v, want a connection error", err)
	}

	p.Start(t)
	// The pool may hand out a connection that died with the server once;
	// database/sql then opens a new one.
	var hs []backends.Holder
	deadline := time.Now().Add(20 * time.Second)
	for {
		if hs, err = s.Holders(ctx, backends.SemRef{Name: "s"}); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil || len(hs) != 1 || hs[0].Owner != "a" || hs[0].Fencing != first.Fencing {
		t.Fatalf("holders after the restart = %+v, %v; want a with fencing %d", hs, err, first.Fencing)
	}
	if _, err := s.TryAcquire(ctx, backends.SemRef{Name: "s"}, backends.AcquireRequest{Owner: "b", Lease: time.Minute}); !errors.Is(err, backends.ErrNoSlot) {
		t.Fatalf("acquire past the limit after the restart = %v, want ErrNoSlot", err)
	}
	if err := s.Release(ctx, backends.SemRef{Name: "s"}, "a"); err != nil {
		t.Fatal(err)
	}
	next, err := s.TryAcquire(ctx, backends.SemRef{Name: "s"}, backends.AcquireRequest{Owner: "b", Lease: time.Minute})
	if err != nil || next.Fencing <= first.Fencing {
		t.Fatalf("acquire after the release = %+v, %v; want fencing above %d", next, err, first.Fencing)
	}

	other := openStore(t, dsn, "coordd", backends.Options{Version: "0.1.0"})
	done := make(chan error, 1)
	go func() {
		for {
			err := s.WaitQueue(ctx, "q", 30*time.Second)
			if err != nil {
				done <- err
				return
			}
			jobs, err := s.Claim(ctx, "q", "w", 1)
			if err != nil || len(jobs) > 0 {
				done <- err
				return
			}
		}
	}()
	time.Sleep(200 * time.Millisecond)
	if _, err := other.Push(ctx, "q", backends.PushRequest{Payload: []byte("after")}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the idle worker did not find the job pushed after the restart")
	}
}
