package redis_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/redis"
	"github.com/coordd/coordd/internal/benchutil"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/queue"
	"github.com/coordd/coordd/spec"
)

// Queue benchmarks with throughput and latency targets, on the shared
// Redis (a key prefix of their own). Each iteration does a fixed amount of
// work, so run them once:
//
//	go test -run '^$' -bench Queue -benchtime 1x ./backends/redis/
//
// Every one reports rt-us, the raw round trip (TIME, benchutil.RawRoundTrip)
// measured in the same run on the same server.

func benchQueueConfig(name string) backends.QueueConfig {
	return backends.QueueConfig{
		Name: name, Partitions: 4, VisibilityTimeout: 5 * time.Minute, MaxAttempts: 5,
		RetryBackoff: 10 * time.Second, Unique: spec.UniqueNone, MaxPayload: 1 << 20, Claim: spec.ClaimPartition,
	}
}

// benchQueueStore opens a store on a fresh prefix with queue "q".
func benchQueueStore(b *testing.B) (s *redis.Store, url, prefix string) {
	b.Helper()
	url, prefix = testenv.RedisURL(b)
	s = openStore(b, url, prefix, backends.Options{Version: "0.1.0"})
	if _, err := s.PutQueue(context.Background(), benchQueueConfig("q")); err != nil {
		b.Fatal(err)
	}
	return s, url, prefix
}

// drainJobs is the number of jobs each drain works.
const drainJobs = 50000

// BenchmarkQueueDrain pushes drainJobs jobs (Push through queue.Client from
// 8 goroutines: push-jobs/s), then drains them with queue.Client.Work,
// Drain set, no-op handlers: one Work with concurrency and batch 64
// (workers=1x64) or 8 (workers=1x8), or 8 Works with concurrency and batch
// 8 on one Store (workers=8x8, whose claims the Store groups). Target
// >= 25,000 jobs/s. jobs/s counts claim, handler and ack per
// job; trips/job is the Store's round trips per job while draining;
// script-us/job the time Redis spent running scripts per job (INFO
// commandstats: every client of the server counts, and the shared server
// may have others).
func BenchmarkQueueDrain(b *testing.B) {
	for _, shape := range []struct {
		name        string
		works, conc int
	}{{"1x64", 1, 64}, {"1x8", 1, 8}, {"8x8", 8, 8}} {
		b.Run("workers="+shape.name, func(b *testing.B) {
			s, _, _ := benchQueueStore(b)
			rt := benchutil.RawRoundTrip(b, s)
			c, err := queue.New(s)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			var pushRate, dur float64
			var trips uint64
			var usec int64
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				pushRate += benchutil.Push(b, c, "q", drainJobs)
				b.StartTimer()
				t0, u0 := s.RoundTrips(), serverUsec(b, s)
				start := time.Now()
				errs := make(chan error, shape.works)
				stats := make([]queue.Stats, shape.works)
				for w := range shape.works {
					go func() {
						errs <- c.Work(ctx, "q", queue.WorkerOptions{Concurrency: shape.conc, Batch: shape.conc, Drain: true, Stats: &stats[w]},
							func(context.Context, backends.Job) error { return nil })
					}()
				}
				for range shape.works {
					if err := <-errs; err != nil {
						b.Fatal(err)
					}
				}
				dur += time.Since(start).Seconds()
				trips += s.RoundTrips() - t0
				usec += serverUsec(b, s) - u0
				var acked int64
				for w := range stats {
					acked += stats[w].Acked.Load()
				}
				if acked != drainJobs {
					b.Fatalf("acked %d of %d", acked, drainJobs)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N*drainJobs)/dur, "jobs/s")
			b.ReportMetric(float64(trips)/float64(b.N*drainJobs), "trips/job")
			b.ReportMetric(float64(usec)/float64(b.N*drainJobs), "script-us/job")
			b.ReportMetric(pushRate/float64(b.N), "push-jobs/s")
			b.ReportMetric(float64(rt.Nanoseconds())/1e3, "rt-us")
		})
	}
}

// BenchmarkQueueEnqueueToStart measures the time from the call to Push to
// the start of the handler on an idle queue: one Work (concurrency 8)
// parked in WaitQueue's BLPOP between jobs, each push through a second
// Store (as another host would, so only the wake list can wake the
// worker) after a random 20-60 ms pause. Target: p50 <= 5 ms.
// Then the queue stays idle for 6 s: idle-trips/s is what the worker's
// Store sends meanwhile (Work claims and waits at most 5 s at a time:
// one claim and one BLPOP per 5 s is the floor), and idle-blocking/s the
// part of it that is BLPOP.
func BenchmarkQueueEnqueueToStart(b *testing.B) {
	const samples = 200
	s, url, prefix := benchQueueStore(b)
	rt := benchutil.RawRoundTrip(b, s)
	c, err := queue.New(s)
	if err != nil {
		b.Fatal(err)
	}
	pc, err := queue.New(openStore(b, url, prefix, backends.Options{Version: "0.1.0"}))
	if err != nil {
		b.Fatal(err)
	}
	info := func() int64 { return commandStat(b, s, "blpop").calls }
	const idle = 6 * time.Second
	var idleTrips, idleBlocking float64
	lat := benchutil.EnqueueToStart(b, c, pc, "q", queue.WorkerOptions{Concurrency: 8, Batch: 8, Logf: b.Logf}, samples,
		func() time.Duration { return time.Duration(20+rand.IntN(40)) * time.Millisecond },
		func() {
			time.Sleep(500 * time.Millisecond) // the last ack; the worker parks
			trips, blpops := s.RoundTrips(), info()
			time.Sleep(idle)
			idleTrips = float64(s.RoundTrips()-trips) / idle.Seconds()
			idleBlocking = float64(info()-blpops) / idle.Seconds()
		})
	b.ReportMetric(benchutil.Ms(benchutil.Pct(lat, 50)), "p50-ms")
	b.ReportMetric(benchutil.Ms(benchutil.Pct(lat, 99)), "p99-ms")
	b.ReportMetric(benchutil.Ms(benchutil.Pct(lat, 100)), "max-ms")
	b.ReportMetric(idleTrips, "idle-trips/s")
	b.ReportMetric(idleBlocking, "idle-blocking/s")
	b.ReportMetric(float64(rt.Nanoseconds())/1e3, "rt-us")
}

// cmdStat is one line of INFO commandstats.
type cmdStat struct{ calls, usec int64 }

// commandStats reads INFO commandstats: command name -> calls and usec.
func commandStats(b *testing.B, s *redis.Store) map[string]cmdStat {
	b.Helper()
	v, err := s.Client().Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]cmdStat{}
	for _, line := range strings.Split(v, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var st cmdStat
		for _, f := range strings.Split(rest, ",") {
			k, val, _ := strings.Cut(f, "=")
			n, _ := strconv.ParseInt(val, 10, 64)
			switch k {
			case "calls":
				st.calls = n
			case "usec":
				st.usec = n
			}
		}
		out[strings.TrimPrefix(name, "cmdstat_")] = st
	}
	return out
}

func commandStat(b *testing.B, s *redis.Store, name string) cmdStat { return commandStats(b, s)[name] }

// serverUsec is the time the server spent running scripts so far
// (EVALSHA and EVAL, whose figures include the commands they call; those
// commands are counted again on their own lines, so they are not added).
func serverUsec(b *testing.B, s *redis.Store) int64 {
	st := commandStats(b, s)
	return st["evalsha"].usec + st["eval"].usec
}
