package mysql_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/mysql"
	"github.com/coordd/coordd/internal/benchutil"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/queue"
	"github.com/coordd/coordd/spec"
)

// Queue benchmarks with throughput and latency targets on MariaDB (the
// shared test server, a database of their own). Each iteration does a
// fixed amount of work, so run them once:
//
//	go test -run '^$' -bench Queue -benchtime 1x ./backends/mysql/
//
// Every one reports, measured in the same run on the same server, rt-us
// (the clock query, benchutil.RawRoundTrip) and raw-update-us (a
// single-row autocommit UPDATE by primary key: one round trip and one
// commit, which waits for the disk with innodb_flush_log_at_trx_commit =
// 1). The drain benchmarks also report raw-8x-commits/s, the commits per
// second 8 connections get at once (queueBenchCommits).

// qQueueBenchRaw* are the raw reference: one row of a table of the
// benchmark's own, updated by primary key in autocommit.
const (
	qQueueBenchRawTable  = "CREATE TABLE queue_bench_raw (id INT NOT NULL PRIMARY KEY, n BIGINT NOT NULL) ENGINE=InnoDB"
	qQueueBenchRawRow    = "INSERT INTO queue_bench_raw (id, n) VALUES (1, 0)"
	qQueueBenchRawUpdate = "UPDATE queue_bench_raw SET n = n + 1 WHERE id = 1"
)

// queueBenchRaw returns the clock query and the autocommit UPDATE, each
// averaged over many calls on s.
func queueBenchRaw(b *testing.B, s *mysql.Store) (rt, update time.Duration) {
	b.Helper()
	ctx := context.Background()
	for _, q := range []string{qQueueBenchRawTable, qQueueBenchRawRow} {
		if _, err := s.DB().ExecContext(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	rt = benchutil.RawRoundTrip(b, s)
	const n = 1000
	start := time.Now()
	for range n {
		if _, err := s.DB().ExecContext(ctx, qQueueBenchRawUpdate); err != nil {
			b.Fatal(err)
		}
	}
	return rt, time.Since(start) / n
}

// qQueueBenchRawRows and qQueueBenchRawUpdateRow: one row per committer
// of queueBenchCommits.
const (
	qQueueBenchRawRows      = "INSERT IGNORE INTO queue_bench_raw (id, n) VALUES (11, 0), (12, 0), (13, 0), (14, 0), (15, 0), (16, 0), (17, 0), (18, 0)"
	qQueueBenchRawUpdateRow = "UPDATE queue_bench_raw SET n = n + 1 WHERE id = ?"
)

// queueBenchCommits measures how many commits per second the server takes
// from 8 connections at once, each updating a row of its own in
// autocommit for a second: what group commit allows, the ceiling of any
// workload that commits (queueBenchRaw made the table).
func queueBenchCommits(b *testing.B, s *mysql.Store) float64 {
	b.Helper()
	ctx := context.Background()
	if _, err := s.DB().ExecContext(ctx, qQueueBenchRawRows); err != nil {
		b.Fatal(err)
	}
	const committers = 8
	var total atomic.Int64
	errs := make(chan error, committers)
	start := time.Now()
	end := start.Add(time.Second)
	for c := range committers {
		go func() {
			for time.Now().Before(end) {
				if _, err := s.DB().ExecContext(ctx, qQueueBenchRawUpdateRow, 11+c); err != nil {
					errs <- err
					return
				}
				total.Add(1)
			}
			errs <- nil
		}()
	}
	for range committers {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	return float64(total.Load()) / time.Since(start).Seconds()
}

func reportRaw(b *testing.B, rt, update time.Duration) {
	b.ReportMetric(float64(rt.Nanoseconds())/1e3, "rt-us")
	b.ReportMetric(float64(update.Nanoseconds())/1e3, "raw-update-us")
}

func benchQueueConfig(name, claim string) backends.QueueConfig {
	return backends.QueueConfig{
		Name: name, Partitions: 4, VisibilityTimeout: 5 * time.Minute, MaxAttempts: 5,
		RetryBackoff: 10 * time.Second, Unique: spec.UniqueNone, MaxPayload: 1 << 20, Claim: claim,
	}
}

// fillQueue inserts n ready keyless jobs behind the API's back, in
// multi-row INSERTs (pushes are measured separately): round robin over 4
// partitions as Push places them, available and enqueued now.
func fillQueue(b *testing.B, s *mysql.Store, queue string, n int) { fillQueueP(b, s, queue, n, 4) }

// fillQueueP is fillQueue for a queue of the given partition count.
func fillQueueP(b *testing.B, s *mysql.Store, queue string, n, partitions int) {
	b.Helper()
	const chunk = 1000
	payload := []byte(`{"image":"a.png"}`)
	for done := 0; done < n; done += chunk {
		k := min(chunk, n-done)
		var sb strings.Builder
		sb.WriteString("INSERT INTO coordd_queue_jobs (queue, `partition`, payload, state, available_at, enqueued_at, last_error) VALUES ")
		args := make([]any, 0, 3*k)
		for i := range k {
			if i > 0 {
				sb.WriteString(", ")
			}
			sb.WriteString("(?, ?, ?, 'ready', TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)), TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)), '')")
			args = append(args, queue, (done+i)%partitions, payload)
		}
		if _, err := s.DB().ExecContext(context.Background(), sb.String(), args...); err != nil {
			b.Fatal(err)
		}
	}
}

// claimModes are the two claim modes, in the order the drain benchmarks
// alternate them.
var claimModes = []string{spec.ClaimPartition, spec.ClaimSkipLocked}

// drainRounds and drainRound: the drain benchmarks work drainRounds rounds
// of drainRound jobs per claim mode, alternating the modes round by round
// (one queue per mode in one database), so that both see the same load on
// the shared machine; the figures of one mode are its rounds' totals.
const (
	drainRounds = 4
	drainRound  = 5000
)

// drainFigures sums one claim mode's rounds.
type drainFigures struct {
	jobs  int
	dur   time.Duration
	trips uint64
	cpu   time.Duration // the server's CPU time, when serverCPU can read it
}

func (f *drainFigures) report(b *testing.B, mode string) {
	b.ReportMetric(float64(f.jobs)/f.dur.Seconds(), mode+"-jobs/s")
	b.ReportMetric(float64(f.trips)/float64(f.jobs), mode+"-trips/job")
	if f.cpu > 0 {
		b.ReportMetric(float64(f.cpu.Microseconds())/float64(f.jobs), mode+"-dbcpu-us/job")
	}
}

// serverCPU returns the CPU time (user + system) the database server has
// used so far, when it runs on this machine and /proc shows it (Linux,
// same user or root), and 0 otherwise: where the server spends its time
// is what bounds a drain here. It counts the whole server, so other
// clients' work too.
func serverCPU() time.Duration {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := string(b)
		open, close := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || close < open {
			continue
		}
		if comm := s[open+1 : close]; comm != "mariadbd" && comm != "mysqld" {
			continue
		}
		f := strings.Fields(s[close+1:]) // f[0] is the state, field 3 of stat
		if len(f) < 13 {
			return 0
		}
		utime, err1 := strconv.ParseInt(f[11], 10, 64)
		stime, err2 := strconv.ParseInt(f[12], 10, 64)
		if err1 != nil || err2 != nil {
			return 0
		}
		const ticks = 100 // USER_HZ on Linux
		return time.Duration(utime+stime) * time.Second / ticks
	}
	return 0
}

// drainBench runs drain (one round: drainRound ready jobs of queue to
// work) for both claim modes, alternating, and reports both.
func drainBench(b *testing.B, drain func(s *mysql.Store, queue string)) {
	ctx := context.Background()
	s := migrated(b, testenv.MySQLDSN(b), "coordd_")
	for _, mode := range claimModes {
		if _, err := s.PutQueue(ctx, benchQueueConfig(mode, mode)); err != nil {
			b.Fatal(err)
		}
	}
	rt, upd := queueBenchRaw(b, s)
	commits := queueBenchCommits(b, s)
	figs := map[string]*drainFigures{}
	b.ResetTimer()
	for range b.N {
		for range drainRounds {
			for _, mode := range claimModes {
				b.StopTimer()
				fillQueue(b, s, mode, drainRound)
				b.StartTimer()
				f := figs[mode]
				if f == nil {
					f = &drainFigures{}
					figs[mode] = f
				}
				t0, cpu0 := s.RoundTrips(), serverCPU()
				start := time.Now()
				drain(s, mode)
				f.dur += time.Since(start)
				f.trips += s.RoundTrips() - t0
				if cpu0 > 0 {
					f.cpu += serverCPU() - cpu0
				}
				f.jobs += drainRound
			}
		}
	}
	b.StopTimer()
	for _, mode := range claimModes {
		figs[mode].report(b, mode)
	}
	b.ReportMetric(float64(figs[spec.ClaimPartition].dur)/float64(figs[spec.ClaimSkipLocked].dur), "skip/partition")
	b.ReportMetric(commits, "raw-8x-commits/s")
	reportRaw(b, rt, upd)
}

// BenchmarkQueueDrain works jobs with no-op handlers through queue.Client
// (Work with Drain, the Go API a daemon uses) with 8 handlers: one Work
// with concurrency 8 and batch 8 (workers=1x8), and 8 Works with
// concurrency 1 on one Store (workers=8x1); and, to show what the size of
// a claim buys, one Work with concurrency and batch 32 (workers=1x32).
// Target: >= 5,000 jobs/s. <mode>-jobs/s counts claim, handler and ack per job;
// <mode>-trips/job is the Store's round trips per job; <mode>-dbcpu-us/job
// is the CPU time the database server used per job while draining (when
// it runs on this machine, serverCPU: what bounds a drain here);
// skip/partition is how many times faster skip_locked drained.
func BenchmarkQueueDrain(b *testing.B) {
	for _, shape := range []struct {
		name        string
		works, conc int
	}{{"1x8", 1, 8}, {"8x1", 8, 1}, {"1x32", 1, 32}} {
		b.Run("workers="+shape.name, func(b *testing.B) {
			var c *queue.Client
			drainBench(b, func(s *mysql.Store, q string) {
				if c == nil {
					var err error
					if c, err = queue.New(s); err != nil {
						b.Fatal(err)
					}
				}
				ctx := context.Background()
				errs := make(chan error, shape.works)
				stats := make([]queue.Stats, shape.works)
				for w := range shape.works {
					go func() {
						errs <- c.Work(ctx, q, queue.WorkerOptions{Concurrency: shape.conc, Batch: shape.conc, Drain: true, Stats: &stats[w]},
							func(context.Context, backends.Job) error { return nil })
					}()
				}
				for range shape.works {
					if err := <-errs; err != nil {
						b.Fatal(err)
					}
				}
				var acked int64
				for w := range stats {
					acked += stats[w].Acked.Load()
				}
				if acked != drainRound {
					b.Fatalf("acked %d of %d", acked, drainRound)
				}
			})
		})
	}
}

// BenchmarkQueuePush is Push through queue.Client from 8 goroutines.
func BenchmarkQueuePush(b *testing.B) {
	s := migrated(b, testenv.MySQLDSN(b), "coordd_")
	if _, err := s.PutQueue(context.Background(), benchQueueConfig("q", spec.ClaimSkipLocked)); err != nil {
		b.Fatal(err)
	}
	rt, upd := queueBenchRaw(b, s)
	c, err := queue.New(s)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	var rate float64
	for range b.N {
		rate += benchutil.Push(b, c, "q", 4000)
	}
	b.StopTimer()
	b.ReportMetric(rate/float64(b.N), "push-jobs/s")
	reportRaw(b, rt, upd)
}

// BenchmarkQueueEnqueueToStart measures the time from the call to Push to
// the start of the handler on an idle queue, where the workers (one Work,
// concurrency 8) are parked in the backend between jobs: each push comes
// after a random 20-60 ms pause. With pusher=other the job is pushed
// through a second Store (as another host would), so only the backend's
// wake-up (KILL QUERY of the parked statement) can wake the worker; with
// pusher=same through the worker's own queue.Client, whose in-process
// wake-up ends the park at once. Target: p50 <= 50 ms. idle-q/s
// is the statements the worker's Store sends while the queue is idle
// (measured over 5 s after the samples).
func BenchmarkQueueEnqueueToStart(b *testing.B) {
	const samples = 200
	for _, pusher := range []string{"other", "same"} {
		for _, claim := range []string{spec.ClaimPartition, spec.ClaimSkipLocked} {
			b.Run(fmt.Sprintf("pusher=%s/claim=%s", pusher, claim), func(b *testing.B) {
				dsn := testenv.MySQLDSN(b)
				s := migrated(b, dsn, "coordd_")
				if _, err := s.PutQueue(context.Background(), benchQueueConfig("q", claim)); err != nil {
					b.Fatal(err)
				}
				rt, upd := queueBenchRaw(b, s)
				c, err := queue.New(s)
				if err != nil {
					b.Fatal(err)
				}
				pc := c
				if pusher == "other" {
					if pc, err = queue.New(openStore(b, dsn, "coordd_", backends.Options{Version: "0.1.0"})); err != nil {
						b.Fatal(err)
					}
				}
				var idleRate float64
				lat := benchutil.EnqueueToStart(b, c, pc, "q", queue.WorkerOptions{Concurrency: 8, Batch: 8, Logf: b.Logf}, samples,
					func() time.Duration { return time.Duration(20+rand.IntN(40)) * time.Millisecond },
					func() {
						time.Sleep(500 * time.Millisecond) // the last ack, the worker parks
						trips := s.RoundTrips()
						const idle = 5 * time.Second
						time.Sleep(idle)
						idleRate = float64(s.RoundTrips()-trips) / idle.Seconds()
					})
				b.ReportMetric(benchutil.Ms(benchutil.Pct(lat, 50)), "p50-ms")
				b.ReportMetric(benchutil.Ms(benchutil.Pct(lat, 99)), "p99-ms")
				b.ReportMetric(benchutil.Ms(benchutil.Pct(lat, 100)), "max-ms")
				b.ReportMetric(idleRate, "idle-q/s")
				reportRaw(b, rt, upd)
			})
		}
	}
}

// BenchmarkQueueDrainStore drains without queue.Client's worker loop:
// claimers loops on the Store, each claiming 8 jobs and acking them at
// once from 8 goroutines (so the acks group-commit), then claiming again
// once they are acked. Work (BenchmarkQueueDrain) frees a handler's slot
// before its ack is done, so its next claim overlaps the acks' commit; the
// loops here do not. With several loops, their concurrent claims go
// together in one script (the Store's claim batcher). Both claim modes,
// alternating as in BenchmarkQueueDrain.
func BenchmarkQueueDrainStore(b *testing.B) {
	for _, claimers := range []int{1, 4} {
		b.Run(fmt.Sprintf("claimers=%d", claimers), func(b *testing.B) {
			drainBench(b, func(s *mysql.Store, q string) {
				ctx := context.Background()
				errs := make(chan error, claimers)
				acked := make(chan int, claimers)
				for c := range claimers {
					go func() {
						n := 0
						defer func() { acked <- n }()
						for i := 0; ; i++ {
							got, err := s.Claim(ctx, q, fmt.Sprintf("c%d-%d", c, i), 8)
							if err != nil {
								errs <- err
								return
							}
							if len(got) == 0 {
								errs <- nil
								return
							}
							done := make(chan error, len(got))
							for _, j := range got {
								go func() { done <- s.Ack(ctx, j) }()
							}
							for range got {
								if err := <-done; err != nil {
									errs <- err
									return
								}
							}
							n += len(got)
						}
					}()
				}
				total := 0
				for range claimers {
					if err := <-errs; err != nil {
						b.Fatal(err)
					}
					total += <-acked
				}
				if total != drainRound {
					b.Fatalf("acked %d of %d", total, drainRound)
				}
			})
		})
	}
}

// BenchmarkQueueDrainHosts drains keyless jobs with several hosts: a Store
// each (its own connections and claim grouping, as separate coordd
// processes have), each one Work of concurrency and batch 4, no-op
// handlers. Queues of 1 and 4 partitions (claim partition) alternate round
// by round, so both see the same load. It is the measurement that kept the
// default at 4 partitions rather than 1 (docs/benchmarks.md):
// p1/p4 is how many times longer the one-partition queue took to drain.
func BenchmarkQueueDrainHosts(b *testing.B) {
	for _, hosts := range []int{2, 4} {
		b.Run(fmt.Sprintf("hosts=%d", hosts), func(b *testing.B) {
			ctx := context.Background()
			dsn := testenv.MySQLDSN(b)
			s := migrated(b, dsn, "coordd_")
			parts := []int{1, 4}
			for _, p := range parts {
				cfg := benchQueueConfig(fmt.Sprintf("p%d", p), spec.ClaimPartition)
				cfg.Partitions = p
				if _, err := s.PutQueue(ctx, cfg); err != nil {
					b.Fatal(err)
				}
			}
			clients := make([]*queue.Client, hosts)
			for h := range clients {
				var err error
				if clients[h], err = queue.New(openStore(b, dsn, "coordd_", backends.Options{Version: "0.1.0"})); err != nil {
					b.Fatal(err)
				}
			}
			rt, upd := queueBenchRaw(b, s)
			dur := map[int]time.Duration{}
			jobs := 0
			b.ResetTimer()
			for range b.N {
				for range drainRounds {
					for _, p := range parts {
						b.StopTimer()
						fillQueueP(b, s, fmt.Sprintf("p%d", p), drainRound, p)
						b.StartTimer()
						start := time.Now()
						errs := make(chan error, hosts)
						stats := make([]queue.Stats, hosts)
						for h, c := range clients {
							go func() {
								errs <- c.Work(ctx, fmt.Sprintf("p%d", p), queue.WorkerOptions{Concurrency: 4, Batch: 4, Drain: true, Stats: &stats[h]},
									func(context.Context, backends.Job) error { return nil })
							}()
						}
						for range hosts {
							if err := <-errs; err != nil {
								b.Fatal(err)
							}
						}
						dur[p] += time.Since(start)
						var acked int64
						for h := range stats {
							acked += stats[h].Acked.Load()
						}
						if acked != drainRound {
							b.Fatalf("acked %d of %d", acked, drainRound)
						}
					}
					jobs += drainRound
				}
			}
			b.StopTimer()
			for _, p := range parts {
				b.ReportMetric(float64(jobs)/dur[p].Seconds(), fmt.Sprintf("p%d-jobs/s", p))
			}
			b.ReportMetric(float64(dur[1])/float64(dur[4]), "p1/p4")
			reportRaw(b, rt, upd)
		})
	}
}
