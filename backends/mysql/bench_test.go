package mysql_test

import (
	"context"
	"database/sql"
	"strconv"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/mysql"
	"github.com/coordd/coordd/internal/benchutil"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/spec"
)

// Benchmarks with round-trip and latency targets on MariaDB (the shared
// test server, a database of their own):
//
//	go test -run '^$' -bench 'AcquireRelease|CronClaimFinish' -benchtime 2000x ./backends/mysql/
//
// Each one measures the raw reference of its target in the same run: a
// single-row autocommit UPDATE of a table of the benchmark's own (one round
// trip and one commit; innodb_flush_log_at_trx_commit = 1 makes every commit
// wait for the disk, which dominates both). The reference is measured two
// ways, because the result depends on it: raw-update-us interleaved one to
// one with the measured operation (op, UPDATE, op, UPDATE, ...), so that
// both see the same disk and log state; raw-solo-us back to back, 50 at a
// time after every 50 operations (UPDATE, UPDATE, ...), where consecutive
// commits of one small row are markedly cheaper than the same UPDATE
// between other transactions (the background writes of the operation's
// pages then go to the operation's account). The x-* ratios are given
// against both. rt-us is the clock query
// (benchutil.RawRoundTrip), as the other benchmarks report it.

// qBenchRawTable and qBenchRawUpdate are the raw reference: one row, updated
// by primary key in autocommit, so one round trip and one commit (fsync).
const (
	qBenchRawTable  = "CREATE TABLE bench_raw (id INT NOT NULL PRIMARY KEY, n BIGINT NOT NULL) ENGINE=InnoDB"
	qBenchRawRow    = "INSERT INTO bench_raw (id, n) VALUES (1, 0)"
	qBenchRawUpdate = "UPDATE bench_raw SET n = n + 1 WHERE id = 1"
)

// rawUpdate creates the reference table in s's database and returns the
// reference UPDATE, sent through s's own pool (the same driver settings).
func rawUpdate(b *testing.B, s interface{ DB() *sql.DB }) func() {
	b.Helper()
	ctx := context.Background()
	for _, q := range []string{qBenchRawTable, qBenchRawRow} {
		if _, err := s.DB().ExecContext(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	return func() {
		if _, err := s.DB().ExecContext(ctx, qBenchRawUpdate); err != nil {
			b.Fatal(err)
		}
	}
}

// measureChunk is how many raw UPDATEs run back to back after every
// measureChunk operations (see measure).
const measureChunk = 50

// measure runs op b.N times, each followed by raw (op, raw, op, raw, ...),
// and after every measureChunk operations measureChunk more raws back to
// back, so that both raw figures come from the same stretches of the run.
// It returns the mean time of op, of raw between ops and of raw alone.
func measure(b *testing.B, op, raw func()) (opT, rawT, soloT time.Duration) {
	b.Helper()
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		op()
		t1 := time.Now()
		raw()
		opT += t1.Sub(t0)
		rawT += time.Since(t1)
		if i%measureChunk == measureChunk-1 || i == b.N-1 {
			k := i%measureChunk + 1
			t0 := time.Now()
			for range k {
				raw()
			}
			soloT += time.Since(t0)
		}
	}
	b.StopTimer()
	n := time.Duration(b.N)
	return opT / n, rawT / n, soloT / n
}

// BenchmarkLeaseAcquireRelease is one client taking and giving back the only
// slot of a lease-mode semaphore through the Store (TryAcquire then Release),
// against two single-row autocommit UPDATEs measured in the same run. Target:
// ns/op <= 2.5 x two UPDATEs, i.e. x-two-updates <= 2.5.
func BenchmarkLeaseAcquireRelease(b *testing.B) {
	ctx := context.Background()
	s := migrated(b, testenv.MySQLDSN(b), "coordd_")
	if err := s.PutSemaphore(ctx, backends.SemaphoreConfig{Name: "s", Limit: 1, Lease: time.Minute, Mode: spec.ModeLease, MaxWaiting: -1}); err != nil {
		b.Fatal(err)
	}
	raw := rawUpdate(b, s)
	pairT, rawT, soloT := measurePair(b, s, raw)
	b.ReportMetric(float64(rawT.Nanoseconds())/1e3, "raw-update-us")
	b.ReportMetric(float64(soloT.Nanoseconds())/1e3, "raw-solo-us")
	b.ReportMetric(float64(pairT)/float64(2*rawT), "x-two-updates")
	b.ReportMetric(float64(pairT)/float64(2*soloT), "x-two-solo-updates")
}

// BenchmarkCronClaimFinish claims attempt 1 of one scheduled occurrence
// and records its completion (ClaimOccurrence then FinishOne, as the
// scheduler does for every run), on a task with the default history_limit
// of 100 that quickly fills, so that most finishes also trim the history.
// It counts the Store's RoundTrips per occurrence (a script of several
// statements sent in one request is one round trip; a transaction of
// separate statements counts one per statement plus one for its BEGIN and
// COMMIT) and times it against the raw autocommit UPDATE of the same run.
// Target: trips/op <= 3.
func BenchmarkCronClaimFinish(b *testing.B) {
	ctx := context.Background()
	s := migrated(b, testenv.MySQLDSN(b), "coordd_")
	now, err := s.Now(ctx)
	if err != nil {
		b.Fatal(err)
	}
	at := now.Add(-time.Hour).Truncate(time.Second)
	if err := s.PutCron(ctx, "tick", []byte(`{"schedule":"@every 1s","command":{"argv":["true"]}}`), at, true); err != nil {
		b.Fatal(err)
	}
	raw := rawUpdate(b, s)
	var claimTrips, finishTrips uint64
	occurrence := func() {
		t0 := s.RoundTrips()
		occ, err := s.ClaimOccurrence(ctx, backends.ClaimRequest{Task: "tick", ScheduledAt: at, Next: at.Add(time.Second),
			Attempt: 1, Owner: "bench-" + strconv.FormatInt(at.Unix(), 10), Host: "bench", Lease: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		t1 := s.RoundTrips()
		if err := backends.FinishOne(ctx, s, occ, backends.RunResult{Status: backends.RunSucceeded, Output: []byte("ok\n")}); err != nil {
			b.Fatal(err)
		}
		claimTrips += t1 - t0
		finishTrips += s.RoundTrips() - t1
		at = at.Add(time.Second)
	}
	for range 150 { // past history_limit, so that every finish trims
		occurrence()
		raw()
	}
	rt := benchutil.RawRoundTrip(b, s)
	claimTrips, finishTrips = 0, 0
	occT, rawT, soloT := measure(b, occurrence, raw)
	runs, err := s.History(ctx, "tick", 0)
	if err != nil || len(runs) != 100 {
		b.Fatalf("history: %d runs, %v; want the 100 of history_limit", len(runs), err)
	}
	n := float64(b.N)
	b.ReportMetric(float64(occT.Nanoseconds()), "ns/op")
	b.ReportMetric(float64(claimTrips+finishTrips)/n, "trips/op")
	b.ReportMetric(float64(claimTrips)/n, "claim-trips/op")
	b.ReportMetric(float64(finishTrips)/n, "finish-trips/op")
	b.ReportMetric(float64(rawT.Nanoseconds())/1e3, "raw-update-us")
	b.ReportMetric(float64(soloT.Nanoseconds())/1e3, "raw-solo-us")
	b.ReportMetric(float64(occT)/float64(rawT), "x-update")
	b.ReportMetric(float64(occT)/float64(soloT), "x-solo-update")
	b.ReportMetric(float64(rt.Nanoseconds())/1e3, "rt-us")
}

// BenchmarkSessionAcquireRelease is one client taking and giving back the
// only slot of a session-mode semaphore through the Store (TryAcquire then
// Release), against its raw reference measured in the same run (measure):
// GET_LOCK and RELEASE_LOCK on one connection plus one single-row autocommit
// UPDATE for the fencing number. Target: x-raw <= 1.5.
func BenchmarkSessionAcquireRelease(b *testing.B) {
	ctx := context.Background()
	s := migrated(b, testenv.MySQLDSN(b), "coordd_")
	if err := s.PutSemaphore(ctx, backends.SemaphoreConfig{Name: "s", Limit: 1, Lease: time.Minute, Mode: spec.ModeSession, MaxWaiting: -1}); err != nil {
		b.Fatal(err)
	}
	update := rawUpdate(b, s)
	c, err := s.DB().Conn(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	lock := func(q string) {
		var got sql.NullInt64
		if err := c.QueryRowContext(ctx, q, "coordd-bench-raw").Scan(&got); err != nil || got.Int64 != 1 {
			b.Fatalf("%s: %v %v", q, got, err)
		}
	}
	raw := func() {
		lock("SELECT GET_LOCK(?, 0)")
		update()
		lock("SELECT RELEASE_LOCK(?)")
	}
	pairT, rawT, soloT := measurePair(b, s, raw)
	b.ReportMetric(float64(rawT.Nanoseconds())/1e3, "raw-us")
	b.ReportMetric(float64(soloT.Nanoseconds())/1e3, "raw-solo-us")
	b.ReportMetric(float64(pairT)/float64(rawT), "x-raw")
	b.ReportMetric(float64(pairT)/float64(soloT), "x-solo-raw")
}

// measurePair measures acquire+release of semaphore "s" on s (a new owner
// each time) against raw with measure, after warming both up, and reports
// ns/op, trips/op and rt-us (the clock query, measured in the same run).
func measurePair(b *testing.B, s *mysql.Store, raw func()) (pairT, rawT, soloT time.Duration) {
	b.Helper()
	ctx := context.Background()
	owner := 0
	pair := func() {
		owner++
		o := "owner-" + strconv.Itoa(owner)
		if _, err := s.TryAcquire(ctx, backends.SemRef{Name: "s"}, backends.AcquireRequest{Owner: o, Host: "bench", PID: 1, Lease: time.Minute}); err != nil {
			b.Fatal(err)
		}
		if err := s.Release(ctx, backends.SemRef{Name: "s"}, o); err != nil {
			b.Fatal(err)
		}
	}
	for range 50 { // warm the pools and the buffer pool
		pair()
		raw()
	}
	rt := benchutil.RawRoundTrip(b, s)
	trips0 := s.RoundTrips()
	pairT, rawT, soloT = measure(b, pair, raw)
	trips := s.RoundTrips() - trips0
	b.ReportMetric(float64(pairT.Nanoseconds()), "ns/op")
	b.ReportMetric(float64(trips)/float64(b.N), "trips/op")
	b.ReportMetric(float64(rt.Nanoseconds())/1e3, "rt-us")
	return pairT, rawT, soloT
}
