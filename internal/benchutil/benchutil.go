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
