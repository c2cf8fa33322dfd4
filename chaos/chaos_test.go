package chaos

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestChaos runs the harness on every backend: the shortened run in the
// test suite, the long one with `make chaos`.
func TestChaos(t *testing.T) {
	d := 45 * time.Second
	if s := os.Getenv("COORDD_CHAOS_DURATION"); s != "" {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			t.Fatalf("COORDD_CHAOS_DURATION: %v", err)
		}
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("COORDD_CHAOS_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("COORDD_CHAOS_SEED: %v", err)
		}
	}
	list := "sqlite,mysql,postgres,redis,redis-stale-failover,memcached"
	if s := os.Getenv("COORDD_CHAOS_BACKENDS"); s != "" {
		list = s
	}
	t.Logf("seed %d (replay with COORDD_CHAOS_SEED=%d), %s of faults per backend", seed, seed, d)
	var results []Result
	for _, b := range strings.Split(list, ",") {
		t.Run(b, func(t *testing.T) {
			r := Run(t, Config{Backend: b, Duration: d, Seed: seed, MinDaemonKills: 5, MinBackendRestarts: 1})
			results = append(results, r)
			for _, v := range r.Violations {
				t.Error(v)
			}
		})
	}
	table := Table(results)
	t.Logf("seed %d\n%s", seed, table)
	if p := os.Getenv("COORDD_CHAOS_REPORT"); p != "" {
		if err := os.WriteFile(p, []byte(table), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// TestSentinelFailoverUnderLoad runs the harness on Redis behind three
// Sentinels: a primary and a replica swapped by SENTINEL FAILOVER at
// least twice while holders, workers and the cron task run through the
// failover client, besides the daemon and client faults. No acknowledged
// job may be lost, no occurrence run twice, no holder over the limit.
func TestSentinelFailoverUnderLoad(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("COORDD_CHAOS_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("COORDD_CHAOS_SEED: %v", err)
		}
	}
	t.Logf("seed %d (replay with COORDD_CHAOS_SEED=%d)", seed, seed)
	r := Run(t, Config{Backend: "redis-sentinel", Duration: 30 * time.Second, Seed: seed, MinDaemonKills: 2, MinBackendRestarts: 2})
	for _, v := range r.Violations {
		t.Error(v)
	}
	t.Logf("\n%s", Table([]Result{r}))
}
