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
	list := "sqlite,mysql,redis,memcached"
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
