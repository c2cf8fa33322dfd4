// Package benchutil holds what every coordd benchmark shares: the backend's
// raw round trip, measured in the same run so that each figure can be
// compared with it, and percentiles.
package benchutil

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/queue"
)

// RawRoundTrip is the backend's clock query (its cheapest request)
// averaged over 2,000 calls.
func RawRoundTrip(tb testing.TB, b backends.Backend) time.Duration {
	tb.Helper()
	ctx := context.Background()
	const n = 2000
	start := time.Now()
	for range n {
		if _, err := b.Now(ctx); err != nil {
			tb.Fatal(err)
		}
	}
	return time.Since(start) / n
}

// Pct returns the p-th percentile (0 < p <= 100, nearest rank) of ds, which
// it sorts.
func Pct(ds []time.Duration, p float64) time.Duration {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	k := int(float64(len(ds))*p/100+0.999999) - 1
	return ds[min(max(k, 0), len(ds)-1)]
}

// Ms is d in milliseconds, for b.ReportMetric.
func Ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// alternateChunk is how many calls Alternate runs back to back before it
// switches between the measured operation and the reference, so that both
// see the same load on a shared machine.
const alternateChunk = 100

// Alternate runs op and ref b.N times each, in alternating chunks, after
// warming both up, and reports the p50 of each (p50-us and refName-p50-us),
// their ratio (x-refName) and op's rate (pairs/s: each op is one pair of
// calls, as acquire+release is).
func Alternate(b *testing.B, refName string, op, ref func()) {
	b.Helper()
	for range 200 { // warm the connections and the script cache
		op()
		ref()
	}
	opT := make([]time.Duration, 0, b.N)
	refT := make([]time.Duration, 0, b.N)
	var total time.Duration
	b.ResetTimer()
	for done := 0; done < b.N; {
		k := min(alternateChunk, b.N-done)
		for range k {
			t0 := time.Now()
			op()
			d := time.Since(t0)
			opT = append(opT, d)
			total += d
		}
		for range k {
			t0 := time.Now()
			ref()
			refT = append(refT, time.Since(t0))
		}
		done += k
	}
	b.StopTimer()
	p50, ref50 := Pct(opT, 50), Pct(refT, 50)
	b.ReportMetric(float64(p50.Microseconds()), "p50-us")
	b.ReportMetric(float64(ref50.Microseconds()), refName+"-p50-us")
	b.ReportMetric(float64(p50)/float64(ref50), "x-"+refName)
	b.ReportMetric(float64(len(opT))/total.Seconds(), "pairs/s")
}

// EnqueueToStart runs a worker (Work on queue q of worker, with opts) and
// pushes one job at a time through pusher, gap() apart, samples times per
// b.N, and returns each push-to-handler-start latency. Push through a
// second client on another store handle to measure the backend's wake-up
// rather than the in-process one. idle, when set, runs after the samples
// while the worker still runs (to measure what an idle worker sends); the
// worker is stopped before EnqueueToStart returns.
func EnqueueToStart(b *testing.B, worker, pusher *queue.Client, q string, opts queue.WorkerOptions, samples int, gap func() time.Duration, idle func()) []time.Duration {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan time.Time, 1)
	done := make(chan error, 1)
	go func() {
		done <- worker.Work(ctx, q, opts, func(context.Context, backends.Job) error {
			started <- time.Now()
			return nil
		})
	}()
	defer func() {
		cancel()
		<-done
	}()
	b.ResetTimer()
	var lat []time.Duration
	for range b.N {
		for range samples {
			time.Sleep(gap())
			pushed := time.Now()
			if _, err := pusher.Push(ctx, q, []byte("x"), queue.PushOptions{}); err != nil {
				b.Fatal(err)
			}
			select {
			case at := <-started:
				lat = append(lat, at.Sub(pushed))
			case <-time.After(30 * time.Second):
				b.Fatal("the handler did not start within 30s")
			}
		}
	}
	b.StopTimer()
	if idle != nil {
		idle()
	}
	return lat
}

// Push pushes n keyless jobs to queue q through c from 8 goroutines and
// returns jobs/s.
func Push(b *testing.B, c *queue.Client, q string, n int) float64 {
	b.Helper()
	ctx := context.Background()
	const pushers = 8
	errs := make(chan error, pushers)
	start := time.Now()
	for p := range pushers {
		go func() {
			for i := p; i < n; i += pushers {
				if _, err := c.Push(ctx, q, []byte(`{"image":"a.png"}`), queue.PushOptions{}); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range pushers {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	return float64(n) / time.Since(start).Seconds()
}
