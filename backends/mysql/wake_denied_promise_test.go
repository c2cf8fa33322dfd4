package mysql_test

import (
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/spec"
)

// TestPromiseSemWakeKillDenied: spec.md, `wake: kill`: "Hosts must be
// able to see and kill each other's queries ... Without them waiters still
// wake, at the latest every 10 s"; design.md: "a parked waiter's sleep
// ends by itself within 10 s". The holders and the releaser connect as a
// user that sees the waiter's parked statement (PROCESS) but may not kill
// it, so the release's KILL QUERY is denied: the waiter still gets the
// slot, at the end of its SLEEP (at most 10 s), in mode session with wake
// kill and in mode lease, which parks its waiters the same way.
func TestPromiseSemWakeKillDenied(t *testing.T) {
	for _, mode := range []string{spec.ModeSession + "/" + spec.WakeKill, spec.ModeLease} {
		t.Run(mode, func(t *testing.T) {
			dsn := testenv.MySQLDSN(t)
			admin := migrated(t, dsn, "d_")
			ctx := t.Context()
			cfg := backends.SemaphoreConfig{Name: "pool", Limit: 2, Lease: time.Minute, Mode: spec.ModeLease, MaxWaiting: -1}
			if mode != spec.ModeLease {
				cfg = sessionConfig("pool", 2, spec.WakeKill)
			}
			parked := admin.ParkPatternForTest("pool")
			if err := admin.PutSemaphore(ctx, cfg); err != nil {
				t.Fatal(err)
			}
			holders := openStore(t, limitedUser(t, admin, dsn), "d_", backends.Options{Version: "0.1.0"})
			for _, o := range []string{"a", "b"} {
				if _, err := holders.TryAcquire(ctx, backends.SemRef{Name: "pool"}, backends.AcquireRequest{Owner: o, Host: "h", PID: 1, Lease: time.Minute}); err != nil {
					t.Fatal(err)
				}
			}
			waiter := acquireAsync(t, dsn, "d_", "pool")
			eventually(t, "the waiter to park", func() bool { return countProcesses(t, admin, parked) == 1 })

			start := time.Now()
			if err := holders.Release(ctx, backends.SemRef{Name: "pool"}, "a"); err != nil {
				t.Fatalf("release by a user that may not kill: %v", err)
			}
			select {
			case l, ok := <-waiter:
				if !ok || l == nil {
					t.Fatal("the waiter gave up")
				}
			case <-time.After(15 * time.Second):
				t.Fatalf("the waiter did not get the freed slot within 15 s (its SLEEP ends within 10 s) of a release whose KILL was denied")
			}
			took := time.Since(start)
			if took < time.Second {
				t.Fatalf("the waiter was woken at once (%v): the KILL was not denied, so this did not test the fallback", took)
			}
			t.Logf("%s: the waiter got the slot %v after a release that could not kill its SLEEP", mode, took)
		})
	}
}
