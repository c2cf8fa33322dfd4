package redis_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/backendtest"
	"github.com/coordd/coordd/backends/redis"
	"github.com/coordd/coordd/internal/testenv"
)

// aclRules is the ACL user that docs/operations.md tells operators to
// create for coordd, limited to keys under "coordd:".
const aclRules = "on >s3cret ~coordd:* +@read +@write +@scripting +@blocking +@connection +@transaction +time +info"

// TestConformanceACLUser runs the whole conformance suite through the ACL
// user of the operator guide, on a private redis-server: the documented
// rules are enough, and coordd touches no key outside its prefix.
func TestConformanceACLUser(t *testing.T) {
	r := testenv.StartRedis(t)
	ctx := context.Background()
	admin := goredis.NewClient(&goredis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", r.Port)})
	defer admin.Close()
	if err := admin.Do(ctx, append([]any{"ACL", "SETUSER", "coordd"}, splitRules(aclRules)...)...).Err(); err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("redis://coordd:s3cret@127.0.0.1:%d/0", r.Port)
	var n atomic.Int64 // subtests run in parallel: each its own prefix
	h := harness()
	h.New = func(t *testing.T) func() backends.Backend {
		prefix := fmt.Sprintf("coordd:t%d:", n.Add(1))
		return func() backends.Backend { return openStore(t, url, prefix, backends.Options{Version: "0.1.0"}) }
	}
	backendtest.Run(t, h)
	// A key outside the prefix is refused to that user: the marker check
	// of the first connection already fails, so Open does.
	s, err := redis.Open(ctx, "cluster", url, "elsewhere:", backends.Options{Version: "0.1.0"})
	if err == nil {
		defer s.Close()
		if err := s.PutSemaphore(ctx, backends.SemaphoreConfig{Name: "s", Limit: 1, Lease: 1e9, Mode: "lease", MaxWaiting: -1}); err == nil {
			t.Error("a write outside ~coordd:* went through")
		}
	} else if !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("open outside ~coordd:*: %v, want NOPERM", err)
	}
}

// splitRules splits ACL rules on spaces.
func splitRules(s string) []any {
	var out []any
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ' ' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	return out
}
