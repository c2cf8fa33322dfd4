package redis

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
)

// TestRateIdleKeysSwept: the fields of keys idle for a minute do not pile
// up in a keyed limit's hash: a new key sweeps them, and the keys used
// since keep theirs. The test ages the fields itself.
func TestRateIdleKeysSwept(t *testing.T) {
	s := openQueueStores(t, 1)[0]
	ctx := t.Context()
	if err := s.PutRateLimit(ctx, backends.RateLimitConfig{Name: "sw", Count: 100, Per: time.Second, Burst: 1, Keyed: true}); err != nil {
		t.Fatal(err)
	}
	keyFields := func() (n int) {
		fs, err := s.rdb.HKeys(ctx, s.keys.rateKey("sw")).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fs {
			if strings.HasPrefix(f, "k:") {
				n++
			}
		}
		return n
	}
	for i := range 50 {
		if p, err := s.TakePermit(ctx, "sw", fmt.Sprintf("old-%d", i), 1); err != nil || !p.Allowed {
			t.Fatalf("take: %+v, %v", p, err)
		}
	}
	if n := keyFields(); n != 50 {
		t.Fatalf("%d key fields, want 50", n)
	}
	// Age the old keys by a minute and a second, behind coordd's back.
	for i := range 50 {
		f := fmt.Sprintf("k:old-%d", i)
		v, err := s.rdb.HGet(ctx, s.keys.rateKey("sw"), f).Int64()
		if err != nil {
			t.Fatal(err)
		}
		if err := s.rdb.HSet(ctx, s.keys.rateKey("sw"), f, v-61_000_000).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		if p, err := s.TakePermit(ctx, "sw", fmt.Sprintf("new-%d", i), 1); err != nil || !p.Allowed {
			t.Fatalf("take: %+v, %v", p, err)
		}
	}
	if n := keyFields(); n > 5+40 {
		t.Fatalf("%d key fields after 5 new keys: the idle ones were not swept", n)
	}
	m, err := s.ObserveRateLimits(ctx, []string{"sw"})
	if err != nil {
		t.Fatal(err)
	}
	if busy := m["sw"].Keys; busy > 5 {
		t.Fatalf("%d busy keys, want at most the 5 new ones", busy)
	}
}
