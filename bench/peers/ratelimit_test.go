package peers

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/ratelimit"
)

// BenchmarkPeersRedisRate: one permit of a rate limit on Redis, granted,
// with go-redis/redis_rate (NewLimiter on the go-redis client, Allow) and
// coordd's ratelimit API, and a PING (the floor of any one-call permit),
// from 1 client and from 16 goroutines, alternating in chunks. The rate
// (1,000,000 a second, burst 1,000,000, the same on both sides) is far
// above what either reaches, so every request is granted and both take
// their full write path (the server's TIME, the record read and written).
// The keyed row spreads the permits over 1,000 keys, a record each.
func BenchmarkPeersRedisRate(b *testing.B) {
	url, rdb := privateRedis(b)
	ctx := context.Background()
	e := coorddEngine(b, fmt.Sprintf("backends:\n  r: {type: redis, url: %q}\n", url))
	be := backendOf(b, e)
	// The limits are put directly, as reconcile's apply of a rate_limits
	// entry does (the same PutRateLimit), so the row does not depend on
	// the spec kind being applied.
	rl := backends.RateLimitsOf(be)
	if rl == nil {
		b.Fatal("the redis backend holds no rate limits")
	}
	const count, burst = 1_000_000, 1_000_000
	for _, c := range []backends.RateLimitConfig{
		{Name: "api", Count: count, Per: time.Second, Burst: burst},
		{Name: "users", Count: count, Per: time.Second, Burst: burst, Keyed: true},
	} {
		if err := rl.PutRateLimit(ctx, c); err != nil {
			b.Fatal(err)
		}
	}
	rc, err := ratelimit.New(be)
	if err != nil {
		b.Fatal(err)
	}
	limiter := redis_rate.NewLimiter(rdb)
	limit := redis_rate.Limit{Rate: count, Burst: burst, Period: time.Second}
	const nkeys = 1000
	userKeys := make([]string, nkeys)
	for i := range userKeys {
		userKeys[i] = fmt.Sprintf("user-%d", i)
	}

	redisRate := func(key func() string) func() error {
		return func() error {
			res, err := limiter.Allow(ctx, key(), limit)
			if err != nil {
				return err
			}
			if res.Allowed != 1 {
				return fmt.Errorf("redis_rate refused a permit (retry after %s)", res.RetryAfter)
			}
			return nil
		}
	}
	coordd := func(name string, key func() string) func() error {
		return func() error {
			_, err := rc.Allow(ctx, name, key())
			return err
		}
	}
	ping := func() error { return rdb.Ping(ctx).Err() }
	one := func() string { return "peers:api" }
	none := func() string { return "" }

	type variant struct {
		measure string
		workers int
		chunk   int
		ops     []func() error // the peer, PING, coordd
	}
	variants := []variant{
		{"Redis rate-limit permit, 1 client, permits/s", 1, scale(1000),
			[]func() error{redisRate(one), ping, coordd("api", none)}},
		{"Redis rate-limit permit, 16 clients, permits/s", 16, scale(4000),
			[]func() error{redisRate(one), ping, coordd("api", none)}},
		{"Redis rate-limit permit, 1,000 keys, 16 clients, permits/s", 16, scale(4000),
			[]func() error{redisRate(keyed(userKeys, "peers:")), ping, coordd("users", keyed(userKeys, ""))}},
	}
	for _, v := range variants {
		for range 200 { // warm connections and script caches
			for _, op := range v.ops {
				if err := op(); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	b.ResetTimer()
	for range b.N {
		for _, v := range variants {
			// Ten times the rounds of the other rows, as the lock row
			// does: a permit is one round trip, so a chunk is short.
			var s []side
			for range 10 {
				got := alternate(b, []string{"go-redis/redis_rate", "PING", "ratelimit API"}, func(i, _ int) (int, time.Duration) {
					return v.chunk, concurrently(b, v.workers, v.chunk, v.ops[i])
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
			// Mean latency of a permit as one caller sees it: the
			// wall time of the chunks times the callers, per op.
			lat := func(x side) string {
				return fmt.Sprintf("%.0f µs", float64(x.took.Microseconds())*float64(v.workers)/float64(x.ops))
			}
			record(row{measure: v.measure, unit: "permits/s", peers: s[:2], coordd: s[2], target: 1.0,
				note: fmt.Sprintf("%s a permit (redis_rate %s, PING %s)", lat(s[2]), lat(s[0]), lat(s[1]))})
		}
	}
}

// keyed hands out keys round robin, each with prefix. The counter is
// shared by the goroutines of a chunk and moved with an atomic add.
func keyed(keys []string, prefix string) func() string {
	ks := make([]string, len(keys))
	for i, k := range keys {
		ks[i] = prefix + k
	}
	var next atomic.Uint64
	return func() string { return ks[next.Add(1)%uint64(len(ks))] }
}
