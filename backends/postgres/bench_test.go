package postgres_test

import (
	"context"
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
