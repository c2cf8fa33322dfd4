package backendtest

import (
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

func hasRateLimits(b backends.Backend) bool { return backends.RateLimitsOf(b) != nil }

// rateLimitsOf is b's rate limits, failing t when b holds none.
func rateLimitsOf(t *testing.T, b backends.Backend) backends.RateLimits {
	t.Helper()
	return area(t, b, "rate limits", backends.RateLimitsOf(b))
}

// testRateLimits checks the rate limits: reconcile's view, the GCRA's
// burst and spacing on the backend's clock, keys, and that permits taken
// at once from two handles never exceed rate × window + burst.
func testRateLimits(t *testing.T, h Harness) {
	t.Run("PutObserveDelete", func(t *testing.T) { testRateAdmin(t, h) })
	t.Run("BurstThenSpacing", func(t *testing.T) { testRateBurst(t, h) })
	t.Run("Keys", func(t *testing.T) { testRateKeys(t, h) })
	t.Run("ManyAtOnce", func(t *testing.T) { testRateMany(t, h) })
	t.Run("WitnessAcrossHandles", func(t *testing.T) { testRateWitness(t, h) })
}

func testRateAdmin(t *testing.T, h Harness) {
	t.Parallel()
	b, _ := fresh(t, h)
	rl := rateLimitsOf(t, b)
	ctx := t.Context()

	_, err := rl.TakePermit(ctx, "absent", "", 1)
	wantErr(t, err, backends.ErrNotFound, "a permit of an absent limit")
	if err := rl.PutRateLimit(ctx, backends.RateLimitConfig{Name: "bad", Count: 0, Per: time.Second, Burst: 1}); err == nil {
		t.Fatal("PutRateLimit accepted count 0")
	}
	cfg := backends.RateLimitConfig{Name: "api", Count: 10, Per: time.Hour, Burst: 4}
	ok(t, rl.PutRateLimit(ctx, cfg), "put")
	ok(t, rl.PutRateLimit(ctx, cfg), "put again (idempotent)")
	m, err := rl.ObserveRateLimits(ctx, []string{"api", "absent"})
	ok(t, err, "observe")
	if len(m) != 1 || m["api"] == nil {
		t.Fatalf("observe = %v, want api only", m)
	}
	if st := m["api"]; st.Config != cfg || st.Available != 4 || st.Keys != 0 {
		t.Fatalf("observe api = %+v, want config %+v, 4 available, no keys", st, cfg)
	}
	_, err = rl.TakePermit(ctx, "api", "k1", 1)
	wantErr(t, err, backends.ErrRateNotKeyed, "a key given to an unkeyed limit")
	p, err := rl.TakePermit(ctx, "api", "", 1)
	ok(t, err, "take")
	if !p.Allowed || p.Remaining != 3 {
		t.Fatalf("first permit = %+v, want allowed with 3 remaining", p)
	}
	m, err = rl.ObserveRateLimits(ctx, []string{"api"})
	ok(t, err, "observe")
	if m["api"].Available != 3 {
		t.Fatalf("after one permit %d available, want 3", m["api"].Available)
	}

	// Changing the rate keeps the permits granted; the new config reads back.
	cfg2 := cfg
	cfg2.Count, cfg2.Burst = 20, 2
	ok(t, rl.PutRateLimit(ctx, cfg2), "update")
	m, err = rl.ObserveRateLimits(ctx, []string{"api"})
	ok(t, err, "observe")
	if m["api"].Config != cfg2 {
		t.Fatalf("config after update %+v, want %+v", m["api"].Config, cfg2)
	}

	// Becoming keyed: the limit's own record goes, keys are required.
	cfg3 := cfg2
	cfg3.Keyed = true
	ok(t, rl.PutRateLimit(ctx, cfg3), "make keyed")
	_, err = rl.TakePermit(ctx, "api", "", 1)
	wantErr(t, err, backends.ErrRateKeyRequired, "no key for a keyed limit")
	_, err = rl.TakePermit(ctx, "api", "bad\x00key", 1)
	wantErr(t, err, spec.ErrInvalidKey, "a key with a NUL")
	p, err = rl.TakePermit(ctx, "api", "k1", 1)
	ok(t, err, "take a key's permit")
	if !p.Allowed || p.Remaining != 1 {
		t.Fatalf("first permit of a key = %+v, want allowed with 1 remaining", p)
	}

	ok(t, rl.DeleteRateLimit(ctx, "api"), "delete")
	ok(t, rl.DeleteRateLimit(ctx, "api"), "delete again (absent is fine)")
	m, err = rl.ObserveRateLimits(ctx, []string{"api"})
	ok(t, err, "observe")
	if len(m) != 0 {
		t.Fatalf("observe after delete = %v", m)
	}
	_, err = rl.TakePermit(ctx, "api", "k1", 1)
	wantErr(t, err, backends.ErrNotFound, "a permit after delete")

	// Re-created, the limit starts idle: its old keys' records are gone.
	ok(t, rl.PutRateLimit(ctx, cfg3), "re-create")
	p, err = rl.TakePermit(ctx, "api", "k1", 1)
	ok(t, err, "take after re-create")
	if !p.Allowed || p.Remaining != 1 {
		t.Fatalf("first permit after re-create = %+v, want a full burst", p)
	}
}

// testRateBurst: an idle limit grants its burst at once, then refuses
// with the time to the next permit, and grants again once that time has
// passed on the backend's clock.
func testRateBurst(t *testing.T, h Harness) {
	t.Parallel()
	b, _ := fresh(t, h)
	rl := rateLimitsOf(t, b)
	ctx := t.Context()
	cfg := backends.RateLimitConfig{Name: "burst", Count: 4, Per: time.Second, Burst: 3} // one per 250ms
	ok(t, rl.PutRateLimit(ctx, cfg), "put")
	for i := range 3 {
		p, err := rl.TakePermit(ctx, "burst", "", 1)
		ok(t, err, "take")
		if !p.Allowed || p.Remaining != 2-i {
			t.Fatalf("permit %d = %+v, want allowed with %d remaining", i+1, p, 2-i)
		}
	}
	p, err := rl.TakePermit(ctx, "burst", "", 1)
	ok(t, err, "take")
	if p.Allowed || p.RetryAfter <= 0 || p.RetryAfter > 250*time.Millisecond {
		t.Fatalf("permit beyond the burst = %+v, want refused with a retry within 250ms", p)
	}
	// A refusal changes nothing: asking again says about the same.
	sent2 := time.Now()
	p2, err := rl.TakePermit(ctx, "burst", "", 1)
	ok(t, err, "take")
	if p2.Allowed || p2.RetryAfter > p.RetryAfter {
		t.Fatalf("second refusal = %+v after %+v: a refusal moved the limit", p2, p)
	}
	time.Sleep(p2.RetryAfter + 20*time.Millisecond)
	p, err = rl.TakePermit(ctx, "burst", "", 1)
	ok(t, err, "take")
	if !p.Allowed || p.Remaining != 0 {
		t.Fatalf("permit after the retry time = %+v, want allowed with 0 remaining", p)
	}
	p, err = rl.TakePermit(ctx, "burst", "", 1)
	ok(t, err, "take")
	// The next permit is due one interval after the one just granted,
	// which was due p2.RetryAfter after p2 was asked for at the latest:
	// what has passed since then (a loaded machine's sleep and round
	// trips) is all the retry may be shorter by.
	if least := p2.RetryAfter + 250*time.Millisecond - time.Since(sent2) - 5*time.Millisecond; p.Allowed || p.RetryAfter <= 0 || p.RetryAfter < least || p.RetryAfter > 250*time.Millisecond {
		t.Fatalf("permit right after = %+v, want refused until the next interval (a retry of at least %v)", p, least)
	}
	// Idle for the whole burst: the limit grants its burst again.
	time.Sleep(3*250*time.Millisecond + 50*time.Millisecond)
	m, err := rl.ObserveRateLimits(ctx, []string{"burst"})
	ok(t, err, "observe")
	if m["burst"].Available != 3 {
		t.Fatalf("idle limit: %d available, want 3", m["burst"].Available)
	}
}

// testRateKeys: each key of a keyed limit has a limit of its own; idle
// keys are not counted, and pruning them changes no decision.
func testRateKeys(t *testing.T, h Harness) {
	t.Parallel()
	b, _ := fresh(t, h)
	rl := rateLimitsOf(t, b)
	ctx := t.Context()
	cfg := backends.RateLimitConfig{Name: "per-user", Count: 5, Per: time.Second, Burst: 1, Keyed: true} // one per 200ms
	ok(t, rl.PutRateLimit(ctx, cfg), "put")
	for _, k := range []string{"alice", "bob", "carol é/{x}:*"} {
		p, err := rl.TakePermit(ctx, "per-user", k, 1)
		ok(t, err, "take "+k)
		if !p.Allowed {
			t.Fatalf("first permit of %q refused: %+v", k, p)
		}
		p, err = rl.TakePermit(ctx, "per-user", k, 1)
		ok(t, err, "take "+k)
		if p.Allowed {
			t.Fatalf("second permit of %q at once granted (burst 1)", k)
		}
	}
	m, err := rl.ObserveRateLimits(ctx, []string{"per-user"})
	ok(t, err, "observe")
	if st := m["per-user"]; st.Keys != 3 || st.Available != 0 {
		t.Fatalf("observe = %+v, want 3 busy keys", st)
	}
	time.Sleep(300 * time.Millisecond)
	m, err = rl.ObserveRateLimits(ctx, []string{"per-user"})
	ok(t, err, "observe")
	if m["per-user"].Keys != 0 {
		t.Fatalf("after an idle interval %d busy keys, want 0", m["per-user"].Keys)
	}
	_, err = rl.PruneRateKeys(ctx)
	ok(t, err, "prune")
	p, err := rl.TakePermit(ctx, "per-user", "alice", 1)
	ok(t, err, "take after prune")
	if !p.Allowed {
		t.Fatalf("idle key refused after prune: %+v", p)
	}
}

// testRateWitness takes permits, one to three at a time, from goroutines
// on two handles (two hosts) as fast as they can and checks the witness: any run of grants (by time
// of answer) never exceeds rate × window + burst, where the window runs
// from the earliest request among them to the last answer (the backend
// decided each grant within its call); and the limit is not starved (it
// grants at least half its rate).
func testRateWitness(t *testing.T, h Harness) {
	t.Parallel()
	b, open := fresh(t, h)
	ctx := t.Context()
	cfg := backends.RateLimitConfig{Name: "witness", Count: 100, Per: time.Second, Burst: 5} // one per 10ms
	ok(t, rateLimitsOf(t, b).PutRateLimit(ctx, cfg), "put")
	handles := []backends.RateLimits{rateLimitsOf(t, b), rateLimitsOf(t, open())}
	type grant struct{ start, end time.Time }
	var mu sync.Mutex
	var grants []grant
	const run = 1500 * time.Millisecond
	deadline := time.Now().Add(run)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func(rl backends.RateLimits, n int) {
			defer wg.Done()
			for time.Now().Before(deadline) {
				start := time.Now()
				p, err := rl.TakePermit(ctx, "witness", "", n)
				end := time.Now()
				if err != nil {
					t.Errorf("take: %v", err)
					return
				}
				if p.Allowed != (p.Granted > 0) || p.Granted > n {
					t.Errorf("permit %+v asked for %d", p, n)
					return
				}
				mu.Lock()
				for range p.Granted {
					grants = append(grants, grant{start, end})
				}
				mu.Unlock()
			}
		}(handles[i%2], 1+i%3)
	}
	wg.Wait()
	sort.Slice(grants, func(i, j int) bool { return grants[i].end.Before(grants[j].end) })
	iv := cfg.Interval()
	for i := range grants {
		first := grants[i].start
		for j := i; j < len(grants); j++ {
			if grants[j].start.Before(first) {
				first = grants[j].start
			}
			n := j - i + 1
			window := grants[j].end.Sub(first)
			if allowed := int(window/iv) + cfg.Burst; n > allowed {
				t.Fatalf("%d grants within %v (from grant %d to %d): more than rate × window + burst = %d", n, window, i, j, allowed)
			}
		}
	}
	if min := int(run/iv) / 2; len(grants) < min {
		t.Fatalf("%d grants in %v, want at least %d (half the rate): the limit starves its callers", len(grants), run, min)
	}
}

// testRateMany: a request for n permits gets as many as are due, at most
// n: a new record min(n, burst), then what the burst has left; n < 1 is
// refused before anything is written.
func testRateMany(t *testing.T, h Harness) {
	t.Parallel()
	b, _ := fresh(t, h)
	rl := rateLimitsOf(t, b)
	ctx := t.Context()
	ok(t, rl.PutRateLimit(ctx, backends.RateLimitConfig{Name: "many", Count: 10, Per: time.Hour, Burst: 5}), "put")
	ok(t, rl.PutRateLimit(ctx, backends.RateLimitConfig{Name: "keys", Count: 10, Per: time.Hour, Burst: 5, Keyed: true}), "put")
	if _, err := rl.TakePermit(ctx, "many", "", 0); err == nil {
		t.Fatal("TakePermit accepted n = 0")
	}
	for _, c := range []struct{ n, granted, remaining int }{{3, 3, 2}, {4, 2, 0}, {1, 0, 0}} {
		p, err := rl.TakePermit(ctx, "many", "", c.n)
		ok(t, err, "take")
		if p.Granted != c.granted || p.Allowed != (c.granted > 0) || (p.Allowed && p.Remaining != c.remaining) {
			t.Fatalf("asked for %d: %+v, want %d granted, %d remaining", c.n, p, c.granted, c.remaining)
		}
		if !p.Allowed && p.RetryAfter <= 0 {
			t.Fatalf("a refusal without a retry time: %+v", p)
		}
	}
	p, err := rl.TakePermit(ctx, "keys", "new", 10)
	ok(t, err, "take")
	if p.Granted != 5 || p.Remaining != 0 {
		t.Fatalf("a new key asked for 10: %+v, want its burst of 5", p)
	}
}
