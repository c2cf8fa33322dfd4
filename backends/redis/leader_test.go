package redis

import (
	"errors"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/internal/testenv"
)

// leaderWait polls cond every 10 ms until it holds, failing after 20 s.
func leaderWait(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		done, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: timed out", what)
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("waiting for %s: %v", what, t.Context().Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestLeaderTermCounterLoss: the term counter lost (alone, or with the
// lease, as after a flush or a restart without persistence) is recreated
// at the server's TIME, so the next term is above every earlier one.
func TestLeaderTermCounterLoss(t *testing.T) {
	ss := openStateStores(t, 2, backends.Options{})
	a, b := ss[0], ss[1]
	ctx := t.Context()

	t1, err := a.ElectLeader(ctx, "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// A fresh store's first term is the server's clock in µs.
	now, err := a.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if t1.Term > now.UnixMicro() || t1.Term < now.Add(-time.Minute).UnixMicro() {
		t.Fatalf("first term %d, want about the server's clock in µs (%d)", t1.Term, now.UnixMicro())
	}
	if err := a.ResignLeader(ctx, t1); err != nil {
		t.Fatal(err)
	}
	t2, err := b.ElectLeader(ctx, "b", time.Minute)
	if err != nil || t2.Term != t1.Term+1 {
		t.Fatalf("elect b: %+v, %v; want term %d", t2, err, t1.Term+1)
	}
	if err := b.ResignLeader(ctx, t2); err != nil {
		t.Fatal(err)
	}

	// The counter alone is lost.
	if err := a.Client().Del(ctx, a.keys.leaderTerm()).Err(); err != nil {
		t.Fatal(err)
	}
	t3, err := a.ElectLeader(ctx, "a", time.Minute)
	if err != nil || t3.Term <= t2.Term {
		t.Fatalf("elect after losing the term counter: %+v, %v; want a term above %d", t3, err, t2.Term)
	}

	// Everything is lost while a leads (a flush): b takes over with a term
	// above a's, and a's renewal is refused even though b's lease was
	// created from nothing.
	if _, err := testenv.DeleteRedisPrefix(ctx, a.Client(), a.Prefix()); err != nil {
		t.Fatal(err)
	}
	t4, err := b.ElectLeader(ctx, "b", time.Minute)
	if err != nil || t4.Term <= t3.Term {
		t.Fatalf("elect after a flush: %+v, %v; want a term above %d", t4, err, t3.Term)
	}
	if _, err := a.RenewLeader(ctx, t3, time.Minute); !errors.Is(err, backends.ErrNotLeader) {
		t.Fatalf("renew a's term from before the flush: %v, want ErrNotLeader", err)
	}
}

// TestLeaderFrozenRenew: a leader frozen past its lease (a GC pause, a
// stopped VM) whose term was taken over cannot renew or resign it, whether
// another holder took the lease or the same holder string did under a new
// term.
func TestLeaderFrozenRenew(t *testing.T) {
	ss := openStateStores(t, 2, backends.Options{})
	a, b := ss[0], ss[1]
	ctx := t.Context()

	old, err := a.ElectLeader(ctx, "a", 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	var tb backends.Term
	leaderWait(t, "b to take over the expired lease", func() (bool, error) {
		tb, err = b.ElectLeader(ctx, "b", time.Minute)
		if errors.Is(err, backends.ErrNotLeader) {
			return false, nil
		}
		return err == nil, err
	})
	if tb.Term <= old.Term {
		t.Fatalf("b's term %d, want above a's %d", tb.Term, old.Term)
	}
	if _, err := a.RenewLeader(ctx, old, time.Minute); !errors.Is(err, backends.ErrNotLeader) {
		t.Fatalf("frozen a renews: %v, want ErrNotLeader", err)
	}
	if err := a.ResignLeader(ctx, old); err != nil {
		t.Fatal(err)
	}
	if cur, err := a.CurrentLeader(ctx); err != nil || cur.Holder != "b" || cur.Term != tb.Term {
		t.Fatalf("after a's stale resign: %+v, %v; want b in term %d", cur, err, tb.Term)
	}

	// The same holder string, a new term: the old term is still over.
	if err := b.ResignLeader(ctx, tb); err != nil {
		t.Fatal(err)
	}
	short, err := a.ElectLeader(ctx, "a", 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	leaderWait(t, "a's short lease to expire", func() (bool, error) {
		_, err := a.CurrentLeader(ctx)
		if errors.Is(err, backends.ErrNotFound) {
			return true, nil
		}
		return false, err
	})
	again, err := a.ElectLeader(ctx, "a", time.Minute)
	if err != nil || again.Term <= short.Term {
		t.Fatalf("re-elected a: %+v, %v; want a term above %d", again, err, short.Term)
	}
	if _, err := a.RenewLeader(ctx, short, time.Minute); !errors.Is(err, backends.ErrNotLeader) {
		t.Fatalf("renew of a's ended term by the same holder: %v, want ErrNotLeader", err)
	}
	if err := a.ResignLeader(ctx, short); err != nil {
		t.Fatal(err)
	}
	if cur, err := b.CurrentLeader(ctx); err != nil || cur.Term != again.Term {
		t.Fatalf("after resigning the ended term: %+v, %v; want term %d still leading", cur, err, again.Term)
	}
}

// TestLeaderExpiryIsServerTime: ExpiresAt is the server's clock plus the
// lease, in µs, whatever the host's clock says.
func TestLeaderExpiryIsServerTime(t *testing.T) {
	s := openStateStores(t, 1, backends.Options{})[0]
	ctx := t.Context()
	before, err := s.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const lease = 1500 * time.Millisecond
	term, err := s.ElectLeader(ctx, "a", lease)
	if err != nil {
		t.Fatal(err)
	}
	after, err := s.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if term.ExpiresAt.Before(before.Add(lease)) || term.ExpiresAt.After(after.Add(lease)) || term.ExpiresAt.Location() != time.UTC {
		t.Fatalf("expires at %v, want UTC within [%v, %v]", term.ExpiresAt, before.Add(lease), after.Add(lease))
	}
	cur, err := s.CurrentLeader(ctx)
	if err != nil || !cur.ExpiresAt.Equal(term.ExpiresAt) {
		t.Fatalf("current leader %+v, %v; want expiry %v", cur, err, term.ExpiresAt)
	}
}
