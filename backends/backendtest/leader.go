package backendtest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
)

// freshLeader creates a fresh store and returns its leader view and a
// function that opens another handle's leader view.
func freshLeader(t *testing.T, h Harness) (backends.Leader, func() backends.Leader) {
	t.Helper()
	b, open := fresh(t, h)
	return clusterOf(t, b), func() backends.Leader { return clusterOf(t, open()) }
}

func testLeader(t *testing.T, h Harness) {
	for _, c := range []struct {
		name string
		run  func(t *testing.T, h Harness)
	}{
		{"ElectRenewResign", testLeaderBasic},
		{"LeaseExpiry", testLeaderExpiry},
		{"Concurrent", testLeaderConcurrent},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, h)
		})
	}
}

func testLeaderBasic(t *testing.T, h Harness) {
	ctx := t.Context()
	a, open := freshLeader(t, h)
	b := open()
	ha, hb := newOwner("leader-a"), newOwner("leader-b")

	_, err := a.CurrentLeader(ctx)
	wantErr(t, err, backends.ErrNotFound, "current leader of a fresh store")

	ta, err := a.ElectLeader(ctx, ha, 30*time.Second)
	ok(t, err, "elect a")
	if ta.Holder != ha || ta.Term <= 0 || ta.ExpiresAt.IsZero() {
		t.Fatalf("elect a: got %+v, want holder %s, term > 0, an expiry", ta, ha)
	}

	_, err = b.ElectLeader(ctx, hb, 30*time.Second)
	wantErr(t, err, backends.ErrNotLeader, "elect b while a leads")

	cur, err := b.CurrentLeader(ctx)
	ok(t, err, "current leader")
	if cur.Holder != ha || cur.Term != ta.Term {
		t.Fatalf("current leader: got %+v, want %s in term %d", cur, ha, ta.Term)
	}

	again, err := a.ElectLeader(ctx, ha, 30*time.Second)
	ok(t, err, "re-elect a")
	if again.Holder != ha || again.Term != ta.Term {
		t.Fatalf("re-elect a: got %+v, want the same term %d", again, ta.Term)
	}

	// A longer lease must move the expiry strictly later, whatever the
	// clock's resolution.
	renewed, err := a.RenewLeader(ctx, ta, time.Minute)
	ok(t, err, "renew a")
	if renewed.Holder != ha || renewed.Term != ta.Term || !renewed.ExpiresAt.After(again.ExpiresAt) {
		t.Fatalf("renew a: got %+v, want term %d expiring after %v", renewed, ta.Term, again.ExpiresAt)
	}

	_, err = a.RenewLeader(ctx, backends.Term{Holder: ha, Term: ta.Term + 1}, time.Minute)
	wantErr(t, err, backends.ErrNotLeader, "renew with the wrong term")
	_, err = b.RenewLeader(ctx, backends.Term{Holder: hb, Term: ta.Term}, time.Minute)
	wantErr(t, err, backends.ErrNotLeader, "renew with the wrong holder")

	// Resigning somebody else's term changes nothing and is not an error.
	ok(t, b.ResignLeader(ctx, backends.Term{Holder: hb, Term: ta.Term}), "resign the wrong holder")
	ok(t, a.ResignLeader(ctx, backends.Term{Holder: ha, Term: ta.Term + 1}), "resign the wrong term")
	cur, err = b.CurrentLeader(ctx)
	ok(t, err, "current leader after wrong resigns")
	if cur.Holder != ha || cur.Term != ta.Term {
		t.Fatalf("current leader after wrong resigns: got %+v, want %s in term %d", cur, ha, ta.Term)
	}

	ok(t, a.ResignLeader(ctx, ta), "resign a")
	_, err = b.CurrentLeader(ctx)
	wantErr(t, err, backends.ErrNotFound, "current leader after resign")
	ok(t, a.ResignLeader(ctx, ta), "resign a twice")

	tb, err := b.ElectLeader(ctx, hb, 30*time.Second)
	ok(t, err, "elect b after a resigned")
	if tb.Holder != hb || tb.Term <= ta.Term {
		t.Fatalf("elect b: got %+v, want holder %s with a term above %d", tb, hb, ta.Term)
	}
	_, err = a.RenewLeader(ctx, ta, time.Minute)
	wantErr(t, err, backends.ErrNotLeader, "renew a's resigned term")
	_, err = a.ElectLeader(ctx, ha, 30*time.Second)
	wantErr(t, err, backends.ErrNotLeader, "elect a while b leads")

	// The same holder re-elected after resigning starts a new term.
	ok(t, b.ResignLeader(ctx, tb), "resign b")
	tb2, err := b.ElectLeader(ctx, hb, 30*time.Second)
	ok(t, err, "elect b again")
	if tb2.Term <= tb.Term {
		t.Fatalf("elect b again: term %d, want above %d", tb2.Term, tb.Term)
	}
}

func testLeaderExpiry(t *testing.T, h Harness) {
	ctx := t.Context()
	a, open := freshLeader(t, h)
	b := open()
	ha, hb := newOwner("leader-a"), newOwner("leader-b")

	ta, err := a.ElectLeader(ctx, ha, time.Second)
	ok(t, err, "elect a with a 1s lease")
	var tb backends.Term
	waitFor(t, "b to take over a's expired lease", func() (bool, error) {
		var err error
		tb, err = b.ElectLeader(ctx, hb, 30*time.Second)
		if errors.Is(err, backends.ErrNotLeader) {
			return false, nil
		}
		return err == nil, err
	})
	if tb.Holder != hb || tb.Term <= ta.Term {
		t.Fatalf("take over: got %+v, want holder %s with a term above %d", tb, hb, ta.Term)
	}
	_, err = a.RenewLeader(ctx, ta, 30*time.Second)
	wantErr(t, err, backends.ErrNotLeader, "renew a's expired term")
	cur, err := a.CurrentLeader(ctx)
	ok(t, err, "current leader after take-over")
	if cur.Holder != hb || cur.Term != tb.Term {
		t.Fatalf("current leader: got %+v, want %s in term %d", cur, hb, tb.Term)
	}
}

// testLeaderConcurrent elects from several handles at once: exactly one wins.
func testLeaderConcurrent(t *testing.T, h Harness) {
	_, open := freshLeader(t, h)
	const n = 8
	handles := make([]backends.Leader, n)
	for i := range handles {
		handles[i] = open()
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	terms := make([]backends.Term, n)
	start := make(chan struct{})
	for i, l := range handles {
		wg.Go(func() {
			<-start
			terms[i], errs[i] = l.ElectLeader(t.Context(), newOwner("racer"), 30*time.Second)
		})
	}
	close(start)
	wg.Wait()
	won := -1
	for i, err := range errs {
		switch {
		case err == nil:
			if won >= 0 {
				t.Fatalf("both %s and %s won the election", terms[won].Holder, terms[i].Holder)
			}
			won = i
		case !errors.Is(err, backends.ErrNotLeader):
			t.Fatalf("racer %d: %v", i, err)
		}
	}
	if won < 0 {
		t.Fatal("nobody won the election")
	}
	cur, err := handles[0].CurrentLeader(t.Context())
	ok(t, err, "current leader")
	if cur.Holder != terms[won].Holder || cur.Term != terms[won].Term {
		t.Fatalf("current leader %+v, want the winner %+v", cur, terms[won])
	}
}
