package redis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/spec"
)

// DeleteSemSlot removes slot `slot` of semaphore name behind coordd's back
// (drift, for the conformance harness): its free token, or every record of
// its holder when it is held. Plain commands, not a script: it plays an
// operator or a partial loss.
func DeleteSemSlot(ctx context.Context, s *Store, name string, slot int) error {
	k := s.keys.semaphore(name)
	n := fmt.Sprint(slot)
	if one, _ := s.rdb.HGet(ctx, k[0], "one").Result(); one != "" && slot == 0 {
		// A one-slot semaphore's slot is its lock: "!" stands for a slot
		// gone, held or not.
		return s.rdb.Set(ctx, k[semKeyLock], "!", 0).Err()
	}
	if err := s.rdb.LRem(ctx, k[semKeyFree], 0, n).Err(); err != nil {
		return err
	}
	rec, err := s.rdb.HGet(ctx, k[semKeyHold], n).Result()
	if err == nil {
		if h, err := parseHolder(rec); err == nil {
			if err := s.rdb.HDel(ctx, k[semKeyHold], "o:"+h.Owner).Err(); err != nil {
				return err
			}
		}
	}
	if err := s.rdb.HDel(ctx, k[semKeyHold], n).Err(); err != nil {
		return err
	}
	return s.rdb.ZRem(ctx, k[semKeyExp], n).Err()
}

// openSemStores opens n handles on one fresh key prefix. Cleanup closes
// each (blocking client included) before testenv deletes the keys.
func openSemStores(t *testing.T, n int) []*Store {
	t.Helper()
	url, prefix := testenv.RedisURL(t)
	var out []*Store
	for range n {
		s, err := Open(context.Background(), "cluster", url, prefix, backends.Options{Version: "0.1.0"})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		t.Cleanup(func() {
			if err := s.sems.close(); err != nil {
				t.Errorf("close blocking client: %v", err)
			}
			if err := s.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		})
		out = append(out, s)
	}
	return out
}

func semCfg(name string, limit, maxWaiting int) backends.SemaphoreConfig {
	return backends.SemaphoreConfig{Name: name, Limit: limit, Lease: time.Minute, Mode: spec.ModeLease, MaxWaiting: maxWaiting}
}

func mustPut(t *testing.T, s *Store, cfg backends.SemaphoreConfig) {
	t.Helper()
	if err := s.PutSemaphore(t.Context(), cfg); err != nil {
		t.Fatalf("put %s: %v", cfg.Name, err)
	}
}

func mustAcquire(t *testing.T, s *Store, name, owner string, lease time.Duration) backends.Grant {
	t.Helper()
	g, err := s.TryAcquire(t.Context(), backends.SemRef{Name: name}, backends.AcquireRequest{Owner: owner, Host: "h", PID: 7, Lease: lease})
	if err != nil {
		t.Fatalf("acquire %s as %s: %v", name, owner, err)
	}
	return g
}

func wantNoSlot(t *testing.T, s *Store, name string) {
	t.Helper()
	_, err := s.TryAcquire(t.Context(), backends.SemRef{Name: name}, backends.AcquireRequest{Owner: fmt.Sprintf("intruder-%d", time.Now().UnixNano()), Lease: time.Minute})
	if !errors.Is(err, backends.ErrNoSlot) {
		t.Fatalf("acquire on full %s: %v, want ErrNoSlot", name, err)
	}
}

// semTokens counts the free tokens and the holder records as stored: a
// one-slot semaphore's slot is free without a lock, held with one.
func semTokens(t *testing.T, s *Store, name string) (free, held int) {
	t.Helper()
	k := s.keys.semaphore(name)
	if one, _ := s.rdb.HGet(t.Context(), k[0], "one").Result(); one != "" {
		switch lock, err := s.rdb.Get(t.Context(), k[semKeyLock]).Result(); {
		case errors.Is(err, goredis.Nil):
			return 1, 0
		case err != nil:
			t.Fatal(err)
		case lock == "!":
			return 0, 0
		}
		return 0, 1
	}
	list, err := s.rdb.LRange(t.Context(), k[semKeyFree], 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range list {
		if tok != "#" {
			free++
		}
	}
	n, err := s.rdb.ZCard(t.Context(), k[semKeyExp]).Result()
	if err != nil {
		t.Fatal(err)
	}
	return free, int(n)
}

// waitPastExpiry waits (polling the backend clock, a test helper) until
// backend time is after at.
func waitPastExpiry(t *testing.T, s *Store, at time.Time) {
	t.Helper()
	for {
		now, err := s.Now(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if now.After(at) {
			return
		}
		time.Sleep(min(at.Sub(now)+time.Millisecond, 100*time.Millisecond))
	}
}

// TestSemCrashNeverLeaks: a holder that never releases (it crashed right
// after its acquire) loses its token when the lease expires, and the next
// acquirer takes it back, with a higher fencing number.
func TestSemCrashNeverLeaks(t *testing.T) {
	t.Parallel()
	s := openSemStores(t, 1)[0]
	mustPut(t, s, semCfg("s", 1, -1))
	g := mustAcquire(t, s, "s", "crashed", time.Second)
	wantNoSlot(t, s, "s")
	waitPastExpiry(t, s, g.ExpiresAt)
	g2 := mustAcquire(t, s, "s", "next", time.Minute)
	if g2.Slot != g.Slot || g2.Fencing <= g.Fencing {
		t.Fatalf("reclaim grant %+v after %+v: want the same slot and a higher fencing", g2, g)
	}
	if free, held := semTokens(t, s, "s"); free+held != 1 {
		t.Fatalf("%d free + %d held tokens, want 1", free, held)
	}
	if _, err := s.Extend(t.Context(), backends.SemRef{Name: "s"}, "crashed", time.Minute); !errors.Is(err, backends.ErrLost) {
		t.Fatalf("extend by the crashed holder: %v, want ErrLost", err)
	}
}

// TestSemStaleRelease: an owner whose expired token was reclaimed and given
// to someone else releases late. Nothing changes (ErrLost) and the token
// is not duplicated; an owner whose expired record was not reclaimed yet
// clears it and gives the token back once.
func TestSemStaleRelease(t *testing.T) {
	t.Parallel()
	s := openSemStores(t, 1)[0]
	ctx := t.Context()
	mustPut(t, s, semCfg("s", 2, -1))
	ga := mustAcquire(t, s, "s", "a", time.Second)
	gx := mustAcquire(t, s, "s", "x", time.Second)
	waitPastExpiry(t, s, ga.ExpiresAt)
	waitPastExpiry(t, s, gx.ExpiresAt)

	// x's expired record stays until reclaimed: its late release clears it.
	if err := s.Release(ctx, backends.SemRef{Name: "s"}, "x"); !errors.Is(err, backends.ErrLost) {
		t.Fatalf("late release of an unreclaimed lease: %v, want ErrLost", err)
	}
	if free, held := semTokens(t, s, "s"); free+held != 2 {
		t.Fatalf("after a late release: %d free + %d held, want 2", free, held)
	}
	// b takes x's token, c reclaims a's.
	mustAcquire(t, s, "s", "b", time.Minute)
	gc := mustAcquire(t, s, "s", "c", time.Minute)
	if gc.Slot != ga.Slot {
		t.Fatalf("c took slot %d, want a's slot %d", gc.Slot, ga.Slot)
	}
	for range 3 {
		if err := s.Release(ctx, backends.SemRef{Name: "s"}, "a"); !errors.Is(err, backends.ErrLost) {
			t.Fatalf("stale release: %v, want ErrLost", err)
		}
	}
	if free, held := semTokens(t, s, "s"); free != 0 || held != 2 {
		t.Fatalf("after stale releases: %d free + %d held, want 0 + 2", free, held)
	}
	wantNoSlot(t, s, "s")
	for _, o := range []string{"b", "c"} {
		if err := s.Release(ctx, backends.SemRef{Name: "s"}, o); err != nil {
			t.Fatal(err)
		}
	}
	if free, held := semTokens(t, s, "s"); free != 2 || held != 0 {
		t.Fatalf("after the releases: %d free + %d held, want 2 + 0", free, held)
	}
	mustAcquire(t, s, "s", "d", time.Minute)
	mustAcquire(t, s, "s", "e", time.Minute)
	wantNoSlot(t, s, "s")
}

// TestSemLostKeys: the free list deleted, or every key but the config
// (a partial flush), never wedges acquirers and never admits more than the
// limit; the fencing counter is recreated above its old value.
func TestSemLostKeys(t *testing.T) {
	t.Parallel()
	s := openSemStores(t, 1)[0]
	ctx := t.Context()
	k := s.keys.semaphore("s")
	mustPut(t, s, semCfg("s", 3, -1))
	mustAcquire(t, s, "s", "a", time.Minute)
	mustAcquire(t, s, "s", "b", time.Minute)

	if err := s.rdb.Del(ctx, k[semKeyFree]).Err(); err != nil {
		t.Fatal(err)
	}
	st, err := s.ObserveSemaphores(ctx, []string{"s"})
	if err != nil {
		t.Fatal(err)
	}
	if st["s"].Slots != 2 || st["s"].WantSlots() != 3 {
		t.Fatalf("with the free list lost: %+v, want 2 slots of 3 (drift)", st["s"])
	}
	g := mustAcquire(t, s, "s", "c", time.Minute)
	if g.Slot != 2 {
		t.Fatalf("grant after the list was lost took slot %d, want 2", g.Slot)
	}
	wantNoSlot(t, s, "s")

	// Everything but the config: holders, owners, tokens, fencing.
	for _, i := range []int{semKeyFree, semKeyExp, semKeyHold, semKeyFencing} {
		if err := s.rdb.Del(ctx, k[i]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	var grants []backends.Grant
	for i := range 3 {
		grants = append(grants, mustAcquire(t, s, "s", fmt.Sprint("n", i), time.Minute))
	}
	wantNoSlot(t, s, "s")
	if grants[0].Fencing <= g.Fencing {
		t.Fatalf("fencing after the counter was lost: %d, want above %d", grants[0].Fencing, g.Fencing)
	}
	if free, held := semTokens(t, s, "s"); free != 0 || held != 3 {
		t.Fatalf("after the partial loss: %d free + %d held, want 0 + 3", free, held)
	}

	// A token deleted from a list that still exists is drift: the
	// acquirer is refused until PutSemaphore repairs it.
	for i := range 3 {
		if err := s.Release(ctx, backends.SemRef{Name: "s"}, fmt.Sprint("n", i)); err != nil {
			t.Fatal(err)
		}
	}
	for slot := range 3 {
		if err := DeleteSemSlot(ctx, s, "s", slot); err != nil {
			t.Fatal(err)
		}
	}
	_, err = s.TryAcquire(ctx, backends.SemRef{Name: "s"}, backends.AcquireRequest{Owner: "z", Lease: time.Minute})
	if !errors.Is(err, backends.ErrNoSlot) {
		t.Fatalf("acquire with every token deleted: %v, want ErrNoSlot", err)
	}
	mustPut(t, s, semCfg("s", 3, -1))
	mustAcquire(t, s, "s", "z", time.Minute)
}

// TestSemFencingRecreated: a deleted fencing counter restarts at Redis
// TIME in µs, above every number handed out before.
func TestSemFencingRecreated(t *testing.T) {
	t.Parallel()
	s := openSemStores(t, 1)[0]
	ctx := t.Context()
	mustPut(t, s, semCfg("s", 1, -1))
	g := mustAcquire(t, s, "s", "a", time.Minute)
	if err := s.Release(ctx, backends.SemRef{Name: "s"}, "a"); err != nil {
		t.Fatal(err)
	}
	k := s.keys.semaphore("s")
	if err := s.rdb.Del(ctx, k[semKeyFencing]).Err(); err != nil {
		t.Fatal(err)
	}
	now, err := s.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g2 := mustAcquire(t, s, "s", "b", time.Minute)
	if g2.Fencing <= g.Fencing || g2.Fencing <= now.UnixMicro() {
		t.Fatalf("fencing after the counter was deleted: %d, want above %d and above TIME %d µs", g2.Fencing, g.Fencing, now.UnixMicro())
	}
}

// blockedWaiter runs WaitSemaphore in a goroutine on w and returns once its
// BLPOP was sent (w's round trips show the check and the BLPOP).
func blockedWaiter(t *testing.T, ctx context.Context, w *Store, name string, max time.Duration) (trips0 uint64, done <-chan error) {
	t.Helper()
	// A first short BLPOP dials the blocking client's connection, whose
	// handshake counts as round trips too.
	if err := w.semBlock(ctx, name, w.semKeys(name), w.semKeys(name)[semKeyWake], time.Millisecond); err != nil {
		t.Fatalf("warm-up wait: %v", err)
	}
	trips0 = w.RoundTrips()
	ch := make(chan error, 1)
	go func() { ch <- w.WaitSemaphore(ctx, backends.SemRef{Name: name}, "waiter", max) }()
	deadline := time.Now().Add(10 * time.Second)
	for w.RoundTrips() < trips0+2 {
		select {
		case err := <-ch:
			t.Fatalf("wait returned before blocking: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the waiter never sent its BLPOP")
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // let the BLPOP reach the server; not an assertion
	return trips0, ch
}

// TestSemWakeOnRelease: a release wakes a blocked waiter, which sent
// nothing but its check and its BLPOP meanwhile (no polling), and whose
// TryAcquire then succeeds.
func TestSemWakeOnRelease(t *testing.T) {
	t.Parallel()
	ss := openSemStores(t, 2)
	s, w := ss[0], ss[1]
	mustPut(t, s, semCfg("s", 1, -1))
	mustAcquire(t, s, "s", "holder", time.Minute)
	trips0, done := blockedWaiter(t, t.Context(), w, "s", time.Minute)
	time.Sleep(200 * time.Millisecond) // a polling waiter would send more; not a timing assertion
	if err := s.Release(t.Context(), backends.SemRef{Name: "s"}, "holder"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("wait: %v", err)
	}
	if n := w.RoundTrips() - trips0; n != 2 {
		t.Fatalf("the waiter sent %d requests, want 2 (check and BLPOP)", n)
	}
	mustAcquire(t, w, "s", "waiter", time.Minute)
}

// TestSemWaitBoundedByLease: a holder that never releases; the waiter's
// BLPOP times out when the lease expires (not at its max), and TryAcquire
// then reclaims the token.
func TestSemWaitBoundedByLease(t *testing.T) {
	t.Parallel()
	ss := openSemStores(t, 2)
	s, w := ss[0], ss[1]
	mustPut(t, s, semCfg("s", 1, -1))
	g := mustAcquire(t, s, "s", "stuck", 1500*time.Millisecond)
	const maxWait = 5 * time.Minute
	trips0, done := blockedWaiter(t, t.Context(), w, "s", maxWait)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("wait: %v", err)
		}
	case <-time.After(maxWait / 2):
		t.Fatal("the waiter was not woken by the lease's expiry")
	}
	if n := w.RoundTrips() - trips0; n != 2 {
		t.Fatalf("the waiter sent %d requests, want 2 (check and BLPOP)", n)
	}
	g2 := mustAcquire(t, w, "s", "waiter", time.Minute)
	if g2.Fencing <= g.Fencing {
		t.Fatalf("fencing %d, want above %d", g2.Fencing, g.Fencing)
	}
}

// TestSemMaxWaiting is one runs, one waits, the rest are refused, at the
// store level: on limit 1, max_waiting 1, three arrivals while the first
// holds give one holder, one waiter, and one refused at once; the waiter
// then gets the slot.
func TestSemMaxWaiting(t *testing.T) {
	t.Parallel()
	s := openSemStores(t, 1)[0]
	ctx := t.Context()
	mustPut(t, s, semCfg("job", 1, 1))
	arrive := func(owner string) error {
		_, err := s.TryAcquire(ctx, backends.SemRef{Name: "job"}, backends.AcquireRequest{Owner: owner, Lease: time.Minute})
		if !errors.Is(err, backends.ErrNoSlot) {
			return err
		}
		return s.EnterWait(ctx, backends.SemRef{Name: "job"}, backends.AcquireRequest{Owner: owner, Lease: time.Minute})
	}
	if err := arrive("first"); err != nil {
		t.Fatalf("first: %v", err)
	}
	if err := arrive("second"); err != nil {
		t.Fatalf("second: %v, want to wait", err)
	}
	if err := arrive("third"); !errors.Is(err, backends.ErrTooManyWaiters) {
		t.Fatalf("third: %v, want ErrTooManyWaiters", err)
	}
	trips0, done := blockedWaiter(t, ctx, s, "job", time.Minute)
	_ = trips0
	if err := s.Release(ctx, backends.SemRef{Name: "job"}, "first"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, s, "job", "second", time.Minute)
	if err := s.LeaveWait(ctx, backends.SemRef{Name: "job"}, "second"); err != nil {
		t.Fatal(err)
	}
	if err := arrive("fourth"); err != nil {
		t.Fatalf("fourth after the waiter left: %v, want to wait", err)
	}
}

// TestSemWaitCancel: cancelling a blocked WaitSemaphore ends its BLPOP at
// once (ctx.Err), leaves no goroutine behind, and gives back a wake element
// it may have taken.
func TestSemWaitCancel(t *testing.T) {
	ss := openSemStores(t, 2)
	s, w := ss[0], ss[1]
	mustPut(t, s, semCfg("s", 1, -1))
	mustAcquire(t, s, "s", "holder", time.Minute)
	// Warm the blocking client, so its pool's goroutines exist before the
	// leak check's baseline.
	wctx, cancel := context.WithCancel(t.Context())
	_, done := blockedWaiter(t, wctx, w, "s", time.Minute)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v", err)
	}

	opts := goleak.IgnoreCurrent()
	for range 5 {
		wctx, cancel := context.WithCancel(t.Context())
		_, done := blockedWaiter(t, wctx, w, "s", time.Minute)
		t0 := time.Now()
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled wait: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a cancelled wait kept blocking")
		}
		t.Logf("cancelled wait returned after %v", time.Since(t0))
	}
	goleak.VerifyNone(t, opts)
	k := s.keys.semaphore("s")
	if n, err := s.rdb.LLen(t.Context(), k[semKeyWake]).Result(); err != nil || n != 0 {
		t.Fatalf("wake list holds %d (%v), want 0", n, err)
	}
	// The interrupt lists are gone.
	keys, err := s.rdb.Keys(t.Context(), s.keys.semInterrupt("s", "*")).Result()
	if err != nil || len(keys) != 0 {
		t.Fatalf("interrupt lists left: %v (%v)", keys, err)
	}
}

// TestSemManyWaiters: more blocked waiters than the main pool has
// connections neither starve the store's other commands nor break the
// limit, and all end when cancelled.
func TestSemManyWaiters(t *testing.T) {
	s := openSemStores(t, 1)[0]
	mustPut(t, s, semCfg("s", 1, -1))
	mustAcquire(t, s, "s", "holder", time.Minute)
	n := s.rdb.Options().PoolSize + 10
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.WaitSemaphore(ctx, backends.SemRef{Name: "s"}, "w", time.Minute)
		}()
	}
	// Every waiter has sent its check and BLPOP.
	deadline := time.Now().Add(20 * time.Second)
	for s.sems.blocked() < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d waiters blocked", s.sems.blocked(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The main pool still serves commands at once.
	qctx, qcancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer qcancel()
	if _, err := s.Holders(qctx, backends.SemRef{Name: "s"}); err != nil {
		t.Fatalf("holders while %d waiters block: %v", n, err)
	}
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("wait: %v, want context.Canceled", err)
		}
	}
}

// TestSemRejectsSessionMode: Redis holds lease mode only.
func TestSemRejectsSessionMode(t *testing.T) {
	t.Parallel()
	s := openSemStores(t, 1)[0]
	cfg := semCfg("s", 1, -1)
	cfg.Mode = spec.ModeSession
	if err := s.PutSemaphore(t.Context(), cfg); !errors.Is(err, backends.ErrUnsupported) {
		t.Fatalf("put mode session: %v, want ErrUnsupported", err)
	}
}

// TestSemLimitOneThreeOne: a limit moved 1 -> 3 -> 1 with holders present
// keeps every guarantee on the one token path (there is no separate N = 1
// path): the limit guard, retirement on release (the release script's
// rare path), strictly increasing fencing, no duplicate token on a stale
// release, and slots = max(limit, live) as stored.
func TestSemLimitOneThreeOne(t *testing.T) {
	s := openSemStores(t, 1)[0]
	ctx := t.Context()
	mustPut(t, s, semCfg("s", 1, -1))
	var last int64
	grant := func(owner string) {
		t.Helper()
		g := mustAcquire(t, s, "s", owner, time.Minute)
		if g.Fencing <= last {
			t.Fatalf("fencing %d after %d", g.Fencing, last)
		}
		last = g.Fencing
	}
	release := func(owner string, want error) {
		t.Helper()
		if err := s.Release(ctx, backends.SemRef{Name: "s"}, owner); !errors.Is(err, want) {
			t.Fatalf("release %s: %v, want %v", owner, err, want)
		}
	}
	slots := func(wantFree, wantHeld int) {
		t.Helper()
		if free, held := semTokens(t, s, "s"); free != wantFree || held != wantHeld {
			t.Fatalf("free %d held %d, want %d and %d", free, held, wantFree, wantHeld)
		}
	}
	grant("a")
	wantNoSlot(t, s, "s")
	mustPut(t, s, semCfg("s", 3, -1))
	grant("b")
	grant("c")
	wantNoSlot(t, s, "s")
	mustPut(t, s, semCfg("s", 1, -1))
	slots(0, 3)
	wantNoSlot(t, s, "s")
	release("b", nil) // retired: 2 live > limit 1
	slots(0, 2)
	release("b", backends.ErrLost) // stale: no duplicate token
	wantNoSlot(t, s, "s")
	release("a", nil) // retired
	slots(0, 1)
	wantNoSlot(t, s, "s")
	release("c", nil) // back to the free list: slots = limit
	slots(1, 0)
	grant("d")
	wantNoSlot(t, s, "s")
	st, err := s.ObserveSemaphores(ctx, []string{"s"})
	if err != nil {
		t.Fatal(err)
	}
	if o := st["s"]; o == nil || o.Slots != 1 || len(o.Holders) != 1 || o.Holders[0].Owner != "d" || o.Holders[0].Fencing != last {
		t.Fatalf("observe: %+v", o)
	}
	mustPut(t, s, semCfg("s", 3, -1))
	grant("e")
	grant("f")
	wantNoSlot(t, s, "s")
	release("d", nil)
	release("e", nil)
	release("f", nil)
	slots(3, 0)
}
