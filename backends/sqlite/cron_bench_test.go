package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/internal/benchutil"
)

// BenchmarkCronClaimFinish claims attempt 1 of one scheduled occurrence
// and records its completion (ClaimOccurrence then FinishOne, as
// the scheduler does for a lone run), on a task with the default
// history_limit of 100 that is filled first, so that every finish also
// trims the history. It counts the Store's RoundTrips per occurrence (a
// transaction counts one per statement plus one for BEGIN and COMMIT);
// rt-us is the clock query (benchutil.RawRoundTrip) of the same file.
//
//	go test -run '^$' -bench CronClaimFinish -benchtime 5000x ./backends/sqlite/
func BenchmarkCronClaimFinish(b *testing.B) {
	ctx := context.Background()
	s := migrated(b, filepath.Join(b.TempDir(), "coordd.db"))
	now, err := s.Now(ctx)
	if err != nil {
		b.Fatal(err)
	}
	// next_exec moves a microsecond per claim, so it stays due for hours.
	at := now.Add(-time.Hour)
	if err := s.PutCron(ctx, "tick", []byte(`{"schedule":"@every 1s","command":{"argv":["true"]}}`), at, true); err != nil {
		b.Fatal(err)
	}
	var trips uint64
	occurrence := func() {
		t0 := s.RoundTrips()
		occ, err := s.ClaimOccurrence(ctx, backends.ClaimRequest{Task: "tick", ScheduledAt: at, Next: at.Add(time.Microsecond),
			Attempt: 1, Owner: "bench-owner", Host: "bench", Lease: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		if err := backends.FinishOne(ctx, s, occ, backends.RunResult{Status: backends.RunSucceeded, Output: []byte("ok\n")}); err != nil {
			b.Fatal(err)
		}
		trips += s.RoundTrips() - t0
		at = at.Add(time.Microsecond)
	}
	for range 150 { // past history_limit, so that every finish trims
		occurrence()
	}
	rt := benchutil.RawRoundTrip(b, s)
	trips = 0
	b.ResetTimer()
	for range b.N {
		occurrence()
	}
	b.StopTimer()
	if runs, err := s.History(ctx, "tick", 0); err != nil || len(runs) != 100 {
		b.Fatalf("history: %d runs, %v; want the 100 of history_limit", len(runs), err)
	}
	b.ReportMetric(float64(trips)/float64(b.N), "trips/op")
	b.ReportMetric(float64(rt.Nanoseconds())/1e3, "rt-us")
}

// BenchmarkCronClaimBatch claims one due occurrence of each of 100 tasks
// in one ClaimOccurrences call and records their results in one
// FinishOccurrences call, as the scheduler does for a burst; ns/op is one
// such round of 100 occurrences.
//
//	go test -run '^$' -bench CronClaimBatch -benchtime 200x ./backends/sqlite/
func BenchmarkCronClaimBatch(b *testing.B) {
	const tasks = 100
	ctx := context.Background()
	s := migrated(b, filepath.Join(b.TempDir(), "coordd.db"))
	now, err := s.Now(ctx)
	if err != nil {
		b.Fatal(err)
	}
	at := now.Add(-time.Hour)
	for i := range tasks {
		if err := s.PutCron(ctx, fmt.Sprintf("t%03d", i), []byte(`{"schedule":"@every 1s","command":{"argv":["true"]}}`), at, true); err != nil {
			b.Fatal(err)
		}
	}
	round := func() {
		reqs := make([]backends.ClaimRequest, tasks)
		for i := range reqs {
			reqs[i] = backends.ClaimRequest{Task: fmt.Sprintf("t%03d", i), ScheduledAt: at, Next: at.Add(time.Microsecond),
				Attempt: 1, Owner: "bench-owner", Host: "bench", Lease: time.Minute}
		}
		res, err := s.ClaimOccurrences(ctx, reqs)
		if err != nil {
			b.Fatal(err)
		}
		fins := make([]backends.Finish, tasks)
		for i, r := range res {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
			fins[i] = backends.Finish{Occurrence: r.Occurrence, Result: backends.RunResult{Status: backends.RunSucceeded, Output: []byte("ok\n")}}
		}
		errs, err := s.FinishOccurrences(ctx, fins)
		if err != nil {
			b.Fatal(err)
		}
		for _, err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
		at = at.Add(time.Microsecond)
	}
	for range 110 { // past history_limit, so that every finish trims
		round()
	}
	t0 := s.RoundTrips()
	b.ResetTimer()
	for range b.N {
		round()
	}
	b.StopTimer()
	b.ReportMetric(float64(s.RoundTrips()-t0)/float64(b.N), "trips/op")
}
