package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/internal/benchutil"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/spec"
)

// Benchmarks on the shared PostgreSQL (a database of their own):
//
//	go test -run '^$' -bench . -benchtime 2000x ./backends/postgres/

// BenchmarkLeaseAcquireRelease is one client taking and giving back the
// only slot of a lease-mode semaphore (TryAcquire then Release) against
// two `SELECT 1` round trips on one connection, alternating in chunks.
// Target: acquire+release at least 0.5x as fast as the two round trips,
// i.e. x-two-select1 <= 2. Each of the two is a write that commits, which
// a SELECT is not: BenchmarkLeaseAcquireReleaseVsUpdates measures the
// floor of two committed single-row UPDATEs in the same way.
func BenchmarkLeaseAcquireRelease(b *testing.B) { leaseAcquireRelease(b, false) }

// BenchmarkLeaseAcquireReleaseVsUpdates is BenchmarkLeaseAcquireRelease
// against two autocommit single-row UPDATEs (two round trips and two
// commits, each waiting for the WAL flush as the semaphore's do).
func BenchmarkLeaseAcquireReleaseVsUpdates(b *testing.B) { leaseAcquireRelease(b, true) }

func leaseAcquireRelease(b *testing.B, updates bool) {
	ctx := context.Background()
	s := openStore(b, testenv.PostgresDSN(b), "coordd", backends.Options{Version: "0.1.0"})
	if err := s.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	if err := s.PutSemaphore(ctx, backends.SemaphoreConfig{Name: "s", Limit: 1, Lease: time.Minute, Mode: spec.ModeLease, MaxWaiting: -1}); err != nil {
		b.Fatal(err)
	}
	conn, err := s.DB().Conn(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	var one int
	refName := "two-select1"
	ref := func() {
		for range 2 {
			if err := conn.QueryRowContext(ctx, `SELECT 1`).Scan(&one); err != nil {
				b.Fatal(err)
			}
		}
	}
	if updates {
		if _, err := conn.ExecContext(ctx, `CREATE TABLE bench_raw (id int PRIMARY KEY, n bigint NOT NULL); INSERT INTO bench_raw VALUES (1, 0)`); err != nil {
			b.Fatal(err)
		}
		refName = "two-updates"
		ref = func() {
			for range 2 {
				if _, err := conn.ExecContext(ctx, `UPDATE bench_raw SET n = n + 1 WHERE id = 1`); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	op := func() {
		if _, err := s.TryAcquire(ctx, backends.SemRef{Name: "s"}, backends.AcquireRequest{Owner: "bench", Lease: time.Minute}); err != nil {
			b.Fatalf("acquire: %v", err)
		}
		if err := s.Release(ctx, backends.SemRef{Name: "s"}, "bench"); err != nil {
			b.Fatal(err)
		}
	}
	benchutil.Alternate(b, refName, op, ref)
}

// BenchmarkSessionWakeUp is the wake-up of a session-mode waiter: a waiter
// of a full semaphore, on a handle of its own, heads the line (it holds
// the line lock and LISTENs); the time measured runs from the holder's
// Release to the waiter's TryAcquire returning its grant: the release
// statement (unlock and NOTIFY), the notification, the head's try that
// takes the slot, and the grant that commits. Target: p99 <= 2 ms. rtt-us
// is one round trip of the clock query, measured after the samples.
//
//	go test -run '^$' -bench SessionWakeUp -benchtime 500x ./backends/postgres/
func BenchmarkSessionWakeUp(b *testing.B) {
	for _, limit := range []int{1, 3} {
		b.Run(fmt.Sprintf("limit=%d", limit), func(b *testing.B) { sessionWakeUp(b, limit) })
	}
}

func sessionWakeUp(b *testing.B, limit int) {
	ctx := context.Background()
	dsn := testenv.PostgresDSN(b)
	s := openStore(b, dsn, "coordd", backends.Options{Version: "0.1.0"})
	w := openStore(b, dsn, "coordd", backends.Options{Version: "0.1.0"})
	if err := s.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	if err := s.PutSemaphore(ctx, backends.SemaphoreConfig{Name: "s", Limit: limit, Lease: time.Minute, Mode: spec.ModeSession, MaxWaiting: -1}); err != nil {
		b.Fatal(err)
	}
	req := func(o string) backends.AcquireRequest {
		return backends.AcquireRequest{Owner: o, Host: "bench", PID: 1, Lease: time.Minute}
	}
	lat := make([]time.Duration, 0, b.N)
	var rel, woke []time.Duration // the release's own time; release to the end of the wait
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		var holders []string
		for j := range limit {
			o := fmt.Sprintf("h%d-%d", i, j)
			if _, err := s.TryAcquire(ctx, backends.SemRef{Name: "s"}, req(o)); err != nil {
				b.Fatal(err)
			}
			holders = append(holders, o)
		}
		waiter := "w" + strconv.Itoa(i)
		if err := w.EnterWait(ctx, backends.SemRef{Name: "s"}, backends.AcquireRequest{Owner: waiter, Lease: time.Minute}); err != nil {
			b.Fatal(err)
		}
		got := make(chan time.Time, 1)
		var waited time.Time
		trips := w.RoundTrips()
		go func() {
			for {
				if err := w.WaitSemaphore(ctx, backends.SemRef{Name: "s"}, waiter, time.Minute); err != nil {
					b.Error(err)
					got <- time.Time{}
					return
				}
				waited = time.Now()
				_, err := w.TryAcquire(ctx, backends.SemRef{Name: "s"}, req(waiter))
				if err == nil {
					got <- time.Now()
					return
				}
				if !errors.Is(err, backends.ErrNoSlot) {
					b.Error(err)
					got <- time.Time{}
					return
				}
			}
		}()
		for w.RoundTrips() < trips+2 { // the line lock and the head's try are sent
			time.Sleep(100 * time.Microsecond)
		}
		time.Sleep(2 * time.Millisecond) // let the head wait for its notification
		b.StartTimer()
		t0 := time.Now()
		if err := s.Release(ctx, backends.SemRef{Name: "s"}, holders[0]); err != nil {
			b.Fatal(err)
		}
		rel = append(rel, time.Since(t0))
		t1 := <-got
		woke = append(woke, waited.Sub(t0))
		b.StopTimer()
		if t1.IsZero() {
			b.FailNow()
		}
		lat = append(lat, t1.Sub(t0))
		for _, o := range holders[1:] {
			if err := s.Release(ctx, backends.SemRef{Name: "s"}, o); err != nil {
				b.Fatal(err)
			}
		}
		if err := w.Release(ctx, backends.SemRef{Name: "s"}, waiter); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(benchutil.Pct(lat, 50).Microseconds()), "p50-us")
	b.ReportMetric(float64(benchutil.Pct(lat, 99).Microseconds()), "p99-us")
	b.ReportMetric(float64(benchutil.Pct(lat, 100).Microseconds()), "max-us")
	b.ReportMetric(float64(benchutil.Pct(rel, 50).Microseconds()), "release-p50-us")
	b.ReportMetric(float64(benchutil.Pct(woke, 50).Microseconds()), "woken-p50-us")
	// The floor in the same run: the path is three round trips (the
	// release, the head's try, the grant) and a notification.
	b.ReportMetric(float64(benchutil.RawRoundTrip(b, s).Microseconds()), "rtt-us")
}
