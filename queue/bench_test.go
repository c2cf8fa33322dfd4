package queue_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/internal/benchutil"
	"github.com/coordd/coordd/queue"
	"github.com/coordd/coordd/spec"
)

// Benchmarks of the queue runtime on the embedded store
// (docs/benchmarks.md). Each iteration does a fixed amount of work, so run
// them with -benchtime 1x (or Nx to repeat):
//
//	go test -run '^$' -bench . -benchtime 1x ./queue/
//
// Every benchmark reports rt-us, the store's raw round trip (one Now()
// query, averaged over 2,000 calls) measured on the same file in the same
// run.

// benchQueue is a queue with the spec's defaults (4 partitions, claim by
// partition, no backoff in the way: handlers never fail here).
func benchQueue(name string) backends.QueueConfig {
	return backends.QueueConfig{
		Name: name, Partitions: 4, VisibilityTimeout: 5 * time.Minute, MaxAttempts: 5,
		RetryBackoff: 10 * time.Second, Unique: spec.UniqueNone, MaxPayload: 1 << 20, Claim: spec.ClaimPartition,
	}
}

// BenchmarkQueueThroughput pushes 3,000 jobs through queue.Client.Push
// (push-jobs/s), then works them with no-op handlers through Work with
// Drain, at concurrency 1 and 4 (jobs/s: claim, handler, ack per job;
// allocs/job: the heap objects the work allocated, client and store). With
// backlog=3000 all jobs are pushed first; with backlog=100 they are pushed
// and drained 100 at a time, since a claim's cost grows with the number of
// ready jobs (see docs/benchmarks.md).
func BenchmarkQueueThroughput(b *testing.B) {
	const jobs = 3000
	for _, backlog := range []int{100, jobs} {
		for _, conc := range []int{1, 4} {
			b.Run(fmt.Sprintf("backlog=%d/concurrency=%d", backlog, conc), func(b *testing.B) {
				st := newStore(b, benchQueue("q"))
				c := newClient(b, st)
				ctx := context.Background()
				rt := benchutil.RawRoundTrip(b, st)
				payload := []byte(`{"image":"a.png"}`)
				b.ResetTimer()
				var pushDur, workDur time.Duration
				var workTrips, workAllocs uint64
				var ms runtime.MemStats
				for range b.N {
					for pushed := 0; pushed < jobs; pushed += backlog {
						start := time.Now()
						for i := range backlog {
							if _, err := c.Push(ctx, "q", payload, queue.PushOptions{Key: fmt.Sprint((pushed + i) % 64)}); err != nil {
								b.Fatal(err)
							}
						}
						pushDur += time.Since(start)
						var stats queue.Stats
						trips := st.RoundTrips()
						runtime.ReadMemStats(&ms)
						allocs := ms.Mallocs
						start = time.Now()
						err := c.Work(ctx, "q", queue.WorkerOptions{Concurrency: conc, Batch: conc, Drain: true, Stats: &stats},
							func(context.Context, backends.Job) error { return nil })
						workDur += time.Since(start)
						runtime.ReadMemStats(&ms)
						workAllocs += ms.Mallocs - allocs
						workTrips += st.RoundTrips() - trips
						if err != nil {
							b.Fatal(err)
						}
						if n := stats.Acked.Load(); n != int64(backlog) {
							b.Fatalf("acked %d of %d", n, backlog)
						}
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(jobs*b.N)/pushDur.Seconds(), "push-jobs/s")
				b.ReportMetric(float64(jobs*b.N)/workDur.Seconds(), "jobs/s")
				b.ReportMetric(float64(workTrips)/float64(jobs*b.N), "trips/job")
				b.ReportMetric(float64(workAllocs)/float64(jobs*b.N), "allocs/job")
				b.ReportMetric(float64(rt.Nanoseconds())/1e3, "rt-us")
			})
		}
	}
}

// BenchmarkQueueEnqueueToStart measures, on an idle queue with one worker
// (Work, concurrency 1) in the same process, the time from the call to Push
// to the start of the handler. Between jobs the worker idles for a random
// 5-25 ms, so every push finds it in its idle wait. Target: p50
// <= 5 ms.
func BenchmarkQueueEnqueueToStart(b *testing.B) {
	const samples = 300
	st := newStore(b, benchQueue("q"))
	c := newClient(b, st)
	rt := benchutil.RawRoundTrip(b, st)
	lat := benchutil.EnqueueToStart(b, c, c, "q", queue.WorkerOptions{Concurrency: 1}, samples,
		func() time.Duration { return time.Duration(5+rand.IntN(20)) * time.Millisecond }, nil)
	b.ReportMetric(benchutil.Ms(benchutil.Pct(lat, 50)), "p50-ms")
	b.ReportMetric(benchutil.Ms(benchutil.Pct(lat, 99)), "p99-ms")
	b.ReportMetric(benchutil.Ms(benchutil.Pct(lat, 100)), "max-ms")
	b.ReportMetric(float64(rt.Nanoseconds())/1e3, "rt-us")
}
