package peers

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/hibiken/asynq"
	goredis "github.com/redis/go-redis/v9"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/queue"
	"github.com/coordd/coordd/semaphore"
)

// privateRedis starts a redis-server of the benchmark's own (asynq's keys
// carry no prefix of ours, so it must not share a server) and a go-redis
// client with the library's default options.
func privateRedis(b *testing.B) (url string, rdb *goredis.Client) {
	b.Helper()
	srv := testenv.StartRedis(b)
	opt, err := goredis.ParseURL(srv.URL())
	if err != nil {
		b.Fatal(err)
	}
	rdb = goredis.NewClient(opt)
	b.Cleanup(func() { rdb.Close() })
	return srv.URL(), rdb
}

// BenchmarkPeersRedisLock: one client, acquire+release pairs of a lock
// (limit 1) with bsm/redislock, go-redsync and coordd's semaphore API, and
// two PINGs (the floor of any two-call pair), alternating in chunks of 500.
func BenchmarkPeersRedisLock(b *testing.B) {
	url, rdb := privateRedis(b)
	ctx := context.Background()
	e := coorddEngine(b, fmt.Sprintf("backends:\n  r: {type: redis, url: %q}\nsemaphores:\n  lock: {limit: 1, lease: 30s}\n", url))
	sems, err := semaphore.New(backendOf(b, e), "bench")
	if err != nil {
		b.Fatal(err)
	}
	locker := redislock.New(rdb)
	rs := redsync.New(redsyncgoredis.NewPool(rdb))
	mutex := rs.NewMutex("peers:redsync", redsync.WithExpiry(30*time.Second))
	pairs := scale(500)
	ops := []func() error{
		func() error {
			l, err := locker.Obtain(ctx, "peers:redislock", 30*time.Second, nil)
			if err != nil {
				return err
			}
			return l.Release(ctx)
		},
		func() error {
			if err := mutex.LockContext(ctx); err != nil {
				return err
			}
			_, err := mutex.UnlockContext(ctx)
			return err
		},
		func() error {
			if err := rdb.Ping(ctx).Err(); err != nil {
				return err
			}
			return rdb.Ping(ctx).Err()
		},
		func() error {
			l, err := sems.Acquire(ctx, "lock", semaphore.AcquireOptions{Lease: 30 * time.Second, NoWait: true})
			if err != nil {
				return err
			}
			return l.Release(ctx)
		},
	}
	for range 200 { // warm connections and script caches
		for _, op := range ops {
			if err := op(); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ResetTimer()
	for range b.N {
		// Ten times the rounds of the other rows: a pair is two round
		// trips, so a chunk is short and one stall of a shared host would
		// otherwise decide the ratio.
		var s []side
		for range 10 {
			got := alternate(b, []string{"bsm/redislock", "go-redsync", "two PINGs", "semaphore API, limit 1"}, func(i, _ int) (int, time.Duration) {
				start := time.Now()
				for range pairs {
					if err := ops[i](); err != nil {
						b.Fatal(err)
					}
				}
				return pairs, time.Since(start)
			})
			if s == nil {
				s = got
				continue
			}
			for i := range s {
				s[i].ops += got[i].ops
				s[i].took += got[i].took
			}
		}
		record(row{measure: "Redis lock acquire+release, 1 client, pairs/s", unit: "pairs/s",
			peers: s[:3], coordd: s[3], target: 1.0})
	}
}

// BenchmarkPeersRedisQueue: drain (20,000 jobs, concurrency 32, no-op
// handlers) and enqueue (16 producers) with asynq and coordd's queue API,
// both with their defaults, on one private Redis.
func BenchmarkPeersRedisQueue(b *testing.B) {
	url, rdb := privateRedis(b)
	ctx := context.Background()
	e := coorddEngine(b, fmt.Sprintf("backends:\n  r: {type: redis, url: %q}\nqueues:\n  drain: {}\n  enq: {}\n", url))
	qc, err := queue.New(backendOf(b, e))
	if err != nil {
		b.Fatal(err)
	}
	aopt, err := asynq.ParseRedisURI(url)
	if err != nil {
		b.Fatal(err)
	}
	ac := asynq.NewClientFromRedisClient(rdb)
	payload := []byte(`{"image":42}`)
	drainJobs := scale(20000) / rounds()
	enqJobs := scale(20000) / rounds()
	const producers = 16

	// push runs n pushes from producers goroutines and returns their time.
	push := func(n int, one func() error) time.Duration { return concurrently(b, producers, n, one) }
	asynqPush := func(q string) func() error {
		return func() error {
			_, err := ac.Enqueue(asynq.NewTask("noop", payload), asynq.Queue(q))
			return err
		}
	}
	coorddPush := func(q string) func() error {
		return func() error {
			_, err := qc.Push(ctx, q, payload, queue.PushOptions{})
			return err
		}
	}

	b.ResetTimer()
	for range b.N {
		drain := alternate(b, []string{"asynq", "default Work"}, func(i, _ int) (int, time.Duration) {
			if i == 0 {
				push(drainJobs, asynqPush("drain"))
				var done atomic.Int64
				all := make(chan struct{})
				srv := asynq.NewServer(aopt, asynq.Config{Concurrency: 32, Queues: map[string]int{"drain": 1}, LogLevel: asynq.ErrorLevel})
				start := time.Now()
				if err := srv.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
					if done.Add(1) == int64(drainJobs) {
						close(all)
					}
					return nil
				})); err != nil {
					b.Fatal(err)
				}
				<-all
				took := time.Since(start)
				srv.Shutdown()
				return drainJobs, took
			}
			push(drainJobs, coorddPush("drain"))
			start := time.Now()
			if err := qc.Work(ctx, "drain", queue.WorkerOptions{Concurrency: 32, Drain: true}, func(context.Context, backends.Job) error { return nil }); err != nil {
				b.Fatal(err)
			}
			return drainJobs, time.Since(start)
		})
		record(row{measure: fmt.Sprintf("Redis queue drain, %d jobs, concurrency 32, jobs/s", scale(20000)), unit: "jobs/s",
			peers: drain[:1], coordd: drain[1], target: 2.0})

		enq := alternate(b, []string{"asynq", "Push"}, func(i, _ int) (int, time.Duration) {
			if i == 0 {
				return enqJobs, push(enqJobs, asynqPush("enq"))
			}
			return enqJobs, push(enqJobs, coorddPush("enq"))
		})
		record(row{measure: fmt.Sprintf("Redis enqueue, %d producers, jobs/s", producers), unit: "jobs/s",
			peers: enq[:1], coordd: enq[1], target: 1.0})
	}
}
