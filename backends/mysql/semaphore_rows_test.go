package mysql_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/spec"
)

// TestSlotRowStateFollowsOwner: a slot row's state (FREE or LOCK) changes
// with its owner in every statement that writes slot rows: MySQL's own
// acquire and release scripts and the shared SQL store's repair, release
// and drain, which tell a free row by its owner on the other stores. The
// scripts, and binaries from before the shared store during a rolling
// upgrade, decide by state alone: a row with an owner and state FREE
// would be taken from its live holder.
func TestSlotRowStateFollowsOwner(t *testing.T) {
	s := migrated(t, testenv.MySQLDSN(t), "st_")
	ctx := t.Context()
	check := func(step string) {
		t.Helper()
		var bad, rows int
		err := s.DB().QueryRowContext(ctx, "SELECT COALESCE(SUM(state NOT IN ('FREE', 'LOCK') OR (state = 'LOCK') <> (owner IS NOT NULL)), 0), count(*)\n"+
			"FROM st_semaphore_slots WHERE name = 'pool'").Scan(&bad, &rows)
		if err != nil {
			t.Fatal(err)
		}
		if bad > 0 {
			t.Fatalf("%s: %d of %d slot rows have a state that disagrees with their owner", step, bad, rows)
		}
	}
	put := func(limit int) {
		t.Helper()
		err := s.PutSemaphore(ctx, backends.SemaphoreConfig{Name: "pool", Limit: limit, Lease: time.Minute, Mode: spec.ModeLease, MaxWaiting: -1})
		if err != nil {
			t.Fatal(err)
		}
	}
	acquire := func(owner string) {
		t.Helper()
		if _, err := s.TryAcquire(ctx, backends.SemRef{Name: "pool"}, backends.AcquireRequest{Owner: owner, Host: "h", PID: 1, Lease: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}

	put(3)
	check("rows added by a put")
	acquire("a")
	acquire("b")
	acquire("c")
	check("rows taken by the acquire script")
	if err := s.Release(ctx, backends.SemRef{Name: "pool"}, "c"); err != nil {
		t.Fatal(err)
	}
	check("row freed by the release script")
	put(1)
	check("free rows dropped by a lower limit")
	if err := s.Release(ctx, backends.SemRef{Name: "pool"}, "a"); err != nil { // above the limit: the release that retires slots
		t.Fatal(err)
	}
	check("row retired by a release")
	put(2)
	acquire("d")
	execSQL(t, s, "UPDATE `{p}semaphore_slots` SET expires_at = 0 WHERE name = 'pool' AND owner = 'd'") // d's lease ran out
	if err := s.Release(ctx, backends.SemRef{Name: "pool"}, "d"); !errors.Is(err, backends.ErrLost) {
		t.Fatalf("release of an expired lease: %v, want ErrLost", err)
	}
	check("expired row cleared by a release")
	if err := s.DeleteSemaphore(ctx, "pool"); !errors.Is(err, backends.ErrHeld) {
		t.Fatalf("delete of a held semaphore: %v, want ErrHeld", err)
	}
	check("rows of a drained semaphore")
	if err := s.Release(ctx, backends.SemRef{Name: "pool"}, "b"); err != nil {
		t.Fatal(err)
	}
	check("last holder of a drained semaphore gone")
}

// TestInstanceHolderTouchesOnlyItsRow: the extend and the release of one
// holder of an instance lock that holder's row and no other. Were they to
// read the instance's primary key range (the optimizer's choice on a small
// table when the statement names the owner), a holder would wait for its
// neighbour's row lock, and two releases of one instance would deadlock:
// each locks its own row through the owner index, then waits for the
// other's.
func TestInstanceHolderTouchesOnlyItsRow(t *testing.T) {
	s := migrated(t, testenv.MySQLDSN(t), "il_")
	ctx := t.Context()
	err := s.PutSemaphore(ctx, backends.SemaphoreConfig{Name: "k", Limit: 3, Lease: time.Minute, Mode: spec.ModeLease, MaxWaiting: -1, Keyed: true})
	if err != nil {
		t.Fatal(err)
	}
	ref := backends.SemRef{Name: "k", Key: "x"}
	for _, owner := range []string{"a", "b", "c"} {
		if _, err := s.TryAcquire(ctx, ref, backends.AcquireRequest{Owner: owner, Host: "h", PID: 1, Lease: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	// Hold b's row locked, as b's own release does before it deletes it.
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var slot int
	err = tx.QueryRowContext(ctx, "SELECT slot FROM il_semaphore_instance_slots FORCE INDEX (semaphore_instance_slots_owner)\n"+
		"WHERE name = 'k' AND ikey = 'x' AND owner = 'b' FOR UPDATE").Scan(&slot)
	if err != nil {
		t.Fatal(err)
	}
	for _, owner := range []string{"a", "c"} {
		short, cancel := context.WithTimeout(ctx, 3*time.Second)
		if _, err := s.Extend(short, ref, owner, time.Minute); err != nil {
			t.Errorf("extend %s while another holder's row is locked: %v", owner, err)
		}
		if err := s.Release(short, ref, owner); err != nil {
			t.Errorf("release %s while another holder's row is locked: %v", owner, err)
		}
		cancel()
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, ref, "b"); err != nil {
		t.Fatal(err)
	}
	if rows := instanceRows(t, s, "k"); len(rows) != 0 {
		t.Errorf("rows left after every holder released: %v", rows)
	}
}
