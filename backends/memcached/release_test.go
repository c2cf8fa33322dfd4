package memcached_test

import (
	"errors"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/memcached"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/spec"
)

// TestDirectReleaseAfterRestart: a release sent as a single cas with the
// cas id kept from the grant must not free a key that a restarted
// memcached (which numbers cas ids from 1 again) gave the same cas id.
// The restart is seen either as a dead connection (the cas fails on it)
// or as a redial (the cas is not sent); both fall back to gets + cas and
// report ErrLost, and the other key stays.
func TestDirectReleaseAfterRestart(t *testing.T) {
	for _, redial := range []bool{false, true} {
		name := "dead-connection"
		if redial {
			name = "redialled"
		}
		t.Run(name, func(t *testing.T) {
			m := testenv.StartMemcached(t)
			s := openStore(t, m.Addr(), "coordd-test:", backends.Options{Version: "0.1.0"})
			ctx := t.Context()
			cfg := backends.SemaphoreConfig{Name: "s", Limit: 1, Lease: time.Minute, Mode: spec.ModeLease, MaxWaiting: -1}
			if err := s.PutSemaphore(ctx, cfg); err != nil {
				t.Fatal(err)
			}
			mustAcquire(t, s, "s", "a", time.Minute)
			slot, casID, ok := memcached.KeptGrant(s, "s", "a")
			if !ok || casID == 0 {
				t.Fatalf("no cas id kept for the grant (%d, %d, %v)", slot, casID, ok)
			}
			m.Kill()
			m.Start(t)
			// A read through the store: gomemcache's pool now holds a
			// connection to the new process (as it would in a busy
			// daemon), so a plain cas with the kept id would reach it.
			if _, err := s.Holders(ctx, backends.SemRef{Name: "s"}); err != nil {
				t.Fatal(err)
			}
			if redial {
				if _, err := s.Now(ctx); err != nil { // redials the store's own connection
					t.Fatal(err)
				}
			}
			// Someone else's key at the same slot with the same cas id.
			raw := memcache.New(m.Addr())
			defer raw.Close()
			key := memcached.SemSlotKey(s, "s", slot)
			for {
				if err := raw.Set(&memcache.Item{Key: key, Value: []byte("someone else")}); err != nil {
					t.Fatal(err)
				}
				it, err := raw.Get(key)
				if err != nil {
					t.Fatal(err)
				}
				if it.CasID == casID {
					break
				}
				if it.CasID > casID {
					t.Fatalf("cas id %d passed %d", it.CasID, casID)
				}
			}
			if err := s.Release(ctx, backends.SemRef{Name: "s"}, "a"); !errors.Is(err, backends.ErrLost) {
				t.Fatalf("release after the restart: %v, want ErrLost", err)
			}
			if it, err := raw.Get(key); err != nil || string(it.Value) != "someone else" {
				t.Fatalf("the other key after the release: %+v, %v; want it kept", it, err)
			}
		})
	}
}

// TestDirectRelease: a grant made by this store is released with one
// round trip; after an Extend (new cas id) the release reads first.
func TestDirectRelease(t *testing.T) {
	addr, prefix := testenv.MemcachedAddr(t)
	s := openStore(t, addr, prefix, backends.Options{Version: "0.1.0"})
	ctx := t.Context()
	cfg := backends.SemaphoreConfig{Name: "d", Limit: 2, Lease: time.Minute, Mode: spec.ModeLease, MaxWaiting: -1}
	if err := s.PutSemaphore(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, s, "d", "a", time.Minute)
	n := s.RoundTrips()
	if err := s.Release(ctx, backends.SemRef{Name: "d"}, "a"); err != nil {
		t.Fatal(err)
	}
	if d := s.RoundTrips() - n; d != 1 {
		t.Errorf("release of a kept grant: %d round trips, want 1", d)
	}
	if err := s.Release(ctx, backends.SemRef{Name: "d"}, "a"); !errors.Is(err, backends.ErrLost) {
		t.Fatalf("second release: %v, want ErrLost", err)
	}
	mustAcquire(t, s, "d", "b", time.Minute)
	if _, err := s.Extend(ctx, backends.SemRef{Name: "d"}, "b", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	n = s.RoundTrips()
	if err := s.Release(ctx, backends.SemRef{Name: "d"}, "b"); err != nil {
		t.Fatal(err)
	}
	if d := s.RoundTrips() - n; d != 2 {
		t.Errorf("release after an extend: %d round trips, want 2 (gets + cas)", d)
	}
	if hs, err := s.Holders(ctx, backends.SemRef{Name: "d"}); err != nil || len(hs) != 0 {
		t.Fatalf("holders after the releases: %+v, %v", hs, err)
	}
}
