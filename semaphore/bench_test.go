package semaphore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/internal/benchutil"
	"github.com/coordd/coordd/semaphore"
)

// Benchmarks of semaphores on the embedded store. Each iteration does a fixed
// amount of work, so run them with -benchtime 1x (or Nx to repeat):
//
//	go test -run '^$' -bench . -benchtime 1x ./semaphore/
//
// Every benchmark reports rt-us, the store's raw round trip (one Now()
// query, averaged over 2,000 calls) measured on the same file in the same
// run.

// BenchmarkSemaphorePairs measures acquire+release pairs per second through
// semaphore.Client on one SQLite file in one process: limit 1 with one
// goroutine (no contention), limit 8 with 8 goroutines (one slot each, on
// average), and limit 1 with 8 goroutines (7 of them waiting at any time).
func BenchmarkSemaphorePairs(b *testing.B) {
	const pairs = 4000
	for _, tc := range []struct{ limit, goroutines int }{{1, 1}, {8, 8}, {1, 8}} {
		b.Run(fmt.Sprintf("limit=%d/goroutines=%d", tc.limit, tc.goroutines), func(b *testing.B) {
			st := newStore(b, b.TempDir(), "s", tc.limit)
			c := newClient(b, st)
			ctx := context.Background()
			rt := benchutil.RawRoundTrip(b, st)
			b.ResetTimer()
			var elapsed time.Duration
			for range b.N {
				start := time.Now()
				var wg sync.WaitGroup
				errs := make(chan error, tc.goroutines)
				for g := range tc.goroutines {
					n := pairs / tc.goroutines
					if g < pairs%tc.goroutines {
						n++
					}
					wg.Go(func() {
						for range n {
							l, err := c.Acquire(ctx, "s", semaphore.AcquireOptions{Lease: time.Minute, Wait: time.Minute})
							if err != nil {
								errs <- err
								return
							}
							if err := l.Release(ctx); err != nil {
								errs <- err
								return
							}
						}
					})
				}
				wg.Wait()
				elapsed += time.Since(start)
				close(errs)
				for err := range errs {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(pairs*b.N)/elapsed.Seconds(), "pairs/s")
			b.ReportMetric(float64(rt.Nanoseconds())/1e3, "rt-us")
		})
	}
}

// BenchmarkSemaphoreWakeInProcess measures the wake-up of a waiter blocked
// in Acquire of the same Client: from the moment the holder calls Release
// to the moment the waiter's Acquire returns with the slot. That span holds
// the release write, the waiter's TryAcquire write and the removal of its
// waiter record (Acquire leaves the line before it returns). Target:
// p99 <= 5 ms.
func BenchmarkSemaphoreWakeInProcess(b *testing.B) {
	const samples = 300
	st := newStore(b, b.TempDir(), "s", 1)
	c := newClient(b, st)
	ctx := context.Background()
	rt := benchutil.RawRoundTrip(b, st)
	opts := semaphore.AcquireOptions{Lease: time.Minute, Wait: time.Minute}
	b.ResetTimer()
	var lat, rel []time.Duration
	for range b.N {
		for range samples {
			holder, err := c.Acquire(ctx, "s", semaphore.AcquireOptions{Lease: time.Minute, NoWait: true})
			if err != nil {
				b.Fatal(err)
			}
			type got struct {
				l   *semaphore.Lease
				at  time.Time
				err error
			}
			done := make(chan got, 1)
			go func() {
				l, err := c.Acquire(ctx, "s", opts)
				done <- got{l, time.Now(), err}
			}()
			// The waiter is blocked once its waiter record exists; then let
			// it sit in its wait for a random while.
			for {
				w, err := st.FirstWaiter(ctx, backends.SemRef{Name: "s"})
				if err != nil {
					b.Fatal(err)
				}
				if w != "" {
					break
				}
				time.Sleep(200 * time.Microsecond)
			}
			time.Sleep(time.Duration(2+rand.IntN(18)) * time.Millisecond)
			released := time.Now()
			if err := holder.Release(ctx); err != nil {
				b.Fatal(err)
			}
			rel = append(rel, time.Since(released))
			g := <-done
			if g.err != nil {
				b.Fatal(g.err)
			}
			lat = append(lat, g.at.Sub(released))
			if err := g.l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(benchutil.Ms(benchutil.Pct(lat, 50)), "p50-ms")
	b.ReportMetric(benchutil.Ms(benchutil.Pct(lat, 99)), "p99-ms")
	b.ReportMetric(benchutil.Ms(benchutil.Pct(lat, 100)), "max-ms")
	// How much of it is the holder's own Release call.
	b.ReportMetric(benchutil.Ms(benchutil.Pct(rel, 99)), "release-p99-ms")
	b.ReportMetric(float64(rt.Nanoseconds())/1e3, "rt-us")
}
