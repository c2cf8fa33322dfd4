package memcached_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/internal/benchutil"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/spec"
)

// BenchmarkAcquireRelease is one client taking and giving back a slot
// (TryAcquire then Release) against a raw add + delete of one key measured
// in the same run, for mode lease (limit 1 and 4) and mode counter.
func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		mode  string
		limit int
	}{{"lease/limit=1", spec.ModeLease, 1}, {"lease/limit=4", spec.ModeLease, 4}, {"counter", spec.ModeCounter, 1}} {
		b.Run("mode="+c.name, func(b *testing.B) {
			addr, prefix := testenv.MemcachedAddr(b)
			s := openStore(b, addr, prefix, backends.Options{Version: "0.1.0"})
			cfg := backends.SemaphoreConfig{Name: "s", Limit: c.limit, Lease: time.Minute, Mode: c.mode, MaxWaiting: -1}
			if err := s.PutSemaphore(ctx, cfg); err != nil {
				b.Fatal(err)
			}
			raw := memcache.New(addr)
			defer raw.Close()
			rawKey := prefix + "raw"
			n := 0
			benchutil.Alternate(b, "add-delete", func() {
				n++
				o := "owner-" + strconv.Itoa(n)
				if _, err := s.TryAcquire(ctx, backends.SemRef{Name: "s"}, backends.AcquireRequest{Owner: o, Host: "bench", PID: 1, Lease: time.Minute}); err != nil {
					b.Fatal(err)
				}
				if err := s.Release(ctx, backends.SemRef{Name: "s"}, o); err != nil {
					b.Fatal(err)
				}
			}, func() {
				if err := raw.Add(&memcache.Item{Key: rawKey, Value: []byte("owner"), Expiration: 60}); err != nil {
					b.Fatal(err)
				}
				if err := raw.Delete(rawKey); err != nil {
					b.Fatal(err)
				}
			})
			b.ReportMetric(float64(s.RoundTrips())/float64(b.N+200), "trips/pair")
		})
	}
}
