package mysql_test

import (
	"context"
	"database/sql"
	"strconv"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/internal/benchutil"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/spec"
)

// BenchmarkSessionAcquireRelease is one client taking and giving back the
// only slot of a session-mode semaphore through the Store (TryAcquire then
// Release), against its raw reference measured in the same run, in
// alternating chunks: GET_LOCK and RELEASE_LOCK on one connection plus one
// single-row autocommit UPDATE for the fencing number. Target (issue 4):
// x-raw <= 1.5.
//
//	go test -run '^$' -bench SessionAcquireRelease -benchtime 2000x ./backends/mysql/
func BenchmarkSessionAcquireRelease(b *testing.B) {
	ctx := context.Background()
	s := migrated(b, testenv.MySQLDSN(b), "coordd_")
	if err := s.PutSemaphore(ctx, backends.SemaphoreConfig{Name: "s", Limit: 1, Lease: time.Minute, Mode: spec.ModeSession, MaxWaiting: -1}); err != nil {
		b.Fatal(err)
	}
	for _, q := range []string{
		"CREATE TABLE session_raw (id INT NOT NULL PRIMARY KEY, n BIGINT NOT NULL) ENGINE=InnoDB",
		"INSERT INTO session_raw (id, n) VALUES (1, 0)",
	} {
		if _, err := s.DB().ExecContext(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	c, err := s.DB().Conn(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	raw := func() {
		var got sql.NullInt64
		if err := c.QueryRowContext(ctx, "SELECT GET_LOCK('coordd-bench-raw', 0)").Scan(&got); err != nil || got.Int64 != 1 {
			b.Fatalf("GET_LOCK: %v %v", got, err)
		}
		if _, err := c.ExecContext(ctx, "UPDATE session_raw SET n = n + 1 WHERE id = 1"); err != nil {
			b.Fatal(err)
		}
		if err := c.QueryRowContext(ctx, "SELECT RELEASE_LOCK('coordd-bench-raw')").Scan(&got); err != nil || got.Int64 != 1 {
			b.Fatalf("RELEASE_LOCK: %v %v", got, err)
		}
	}
	owner := 0
	pair := func() {
		owner++
		o := "owner-" + strconv.Itoa(owner)
		if _, err := s.TryAcquire(ctx, "s", backends.AcquireRequest{Owner: o, Host: "bench", PID: 1, Lease: time.Minute}); err != nil {
			b.Fatal(err)
		}
		if err := s.Release(ctx, "s", o); err != nil {
			b.Fatal(err)
		}
	}
	const chunk = 50
	for range chunk { // warm the pools and the buffer pool
		pair()
		raw()
	}
	rt := benchutil.RawRoundTrip(b, s)
	b.ResetTimer()
	var pairT, rawT time.Duration
	pairs, raws := 0, 0
	trips0 := s.RoundTrips()
	for pairs < b.N {
		n := min(chunk, b.N-pairs)
		t0 := time.Now()
		for range n {
			pair()
		}
		pairT += time.Since(t0)
		pairs += n
		b.StopTimer()
		t0 = time.Now()
		for range n {
			raw()
		}
		rawT += time.Since(t0)
		raws += n
		b.StartTimer()
	}
	trips := s.RoundTrips() - trips0
	per := pairT / time.Duration(pairs)
	rawPer := rawT / time.Duration(raws)
	b.ReportMetric(float64(rt.Nanoseconds())/1e3, "rt-us")
	b.ReportMetric(float64(rawPer.Nanoseconds())/1e3, "raw-us")
	b.ReportMetric(float64(per)/float64(rawPer), "x-raw")
	b.ReportMetric(float64(trips)/float64(pairs), "trips/op")
}
