package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/internal/benchutil"
	"github.com/coordd/coordd/internal/testenv"
)

// BenchmarkCronClaimFinish claims attempt 1 of one scheduled occurrence and
// records its completion (ClaimOccurrence then FinishOne, as the
// scheduler does for every run), on a task with the default history_limit
// of 100 that is filled first, so that every finish also trims the
// history. It counts the Store's RoundTrips per occurrence (a script run
// by EVALSHA is one) and times each occurrence against a raw PING sent
// right after it on the same client, so both see the same server and
// network state; rt-us is the clock query (benchutil.RawRoundTrip) as the
// other benchmarks report it. The ideal is two round trips, so x-2ping is
// the figure to watch: 1.0 would mean the scripts cost nothing on the
// server.
//
//	go test -run '^$' -bench CronClaimFinish -benchtime 5000x ./backends/redis/
func BenchmarkCronClaimFinish(b *testing.B) {
	ctx := context.Background()
	url, prefix := testenv.RedisURL(b)
	s := openStore(b, url, prefix, backends.Options{Version: "bench"})
	now, err := s.Now(ctx)
	if err != nil {
		b.Fatal(err)
	}
	// next_exec moves a microsecond per claim, so it stays due for hours.
	at := now.Add(-time.Hour)
	if err := s.PutCron(ctx, "tick", []byte(`{"schedule":"@every 1s","command":{"argv":["true"]}}`), at, true); err != nil {
		b.Fatal(err)
	}
	var claimTrips, finishTrips uint64
	occurrence := func() {
		t0 := s.RoundTrips()
		occ, err := s.ClaimOccurrence(ctx, backends.ClaimRequest{Task: "tick", ScheduledAt: at, Next: at.Add(time.Microsecond),
			Attempt: 1, Owner: "bench-owner", Host: "bench", Lease: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		t1 := s.RoundTrips()
		if err := backends.FinishOne(ctx, s, occ, backends.RunResult{Status: backends.RunSucceeded, Output: []byte("ok\n")}); err != nil {
			b.Fatal(err)
		}
		claimTrips += t1 - t0
		finishTrips += s.RoundTrips() - t1
		at = at.Add(time.Microsecond)
	}
	ping := func() {
		if err := s.Client().Ping(ctx).Err(); err != nil {
			b.Fatal(err)
		}
	}
	for range 150 { // past history_limit (and the scripts loaded), so that every finish trims
		occurrence()
	}
	rt := benchutil.RawRoundTrip(b, s)
	claimTrips, finishTrips = 0, 0
	occT := make([]time.Duration, 0, b.N)
	pingT := make([]time.Duration, 0, b.N)
	var occSum, pingSum time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		occurrence()
		t1 := time.Now()
		ping()
		t2 := time.Now()
		occT, pingT = append(occT, t1.Sub(t0)), append(pingT, t2.Sub(t1))
		occSum, pingSum = occSum+t1.Sub(t0), pingSum+t2.Sub(t1)
	}
	b.StopTimer()
	runs, err := s.History(ctx, "tick", 0)
	if err != nil || len(runs) != 100 {
		b.Fatalf("history: %d runs, %v; want the 100 of history_limit", len(runs), err)
	}
	n := float64(b.N)
	p50, p50ping := benchutil.Pct(occT, 50), benchutil.Pct(pingT, 50)
	b.ReportMetric(float64(occSum.Nanoseconds())/n, "ns/op")
	b.ReportMetric(float64(claimTrips+finishTrips)/n, "trips/op")
	b.ReportMetric(float64(claimTrips)/n, "claim-trips/op")
	b.ReportMetric(float64(finishTrips)/n, "finish-trips/op")
	b.ReportMetric(float64(p50.Nanoseconds())/1e3, "p50-us")
	b.ReportMetric(float64(benchutil.Pct(occT, 99).Nanoseconds())/1e3, "p99-us")
	b.ReportMetric(float64(p50ping.Nanoseconds())/1e3, "ping-p50-us")
	b.ReportMetric(float64(rt.Nanoseconds())/1e3, "rt-us")
	b.ReportMetric(float64(occSum)/float64(pingSum), "x-ping")
	b.ReportMetric(float64(occSum)/float64(2*pingSum), "x-2ping")
	b.ReportMetric(float64(p50)/float64(2*p50ping), "x-2ping-p50")
}
