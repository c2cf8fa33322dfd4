package mysql_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/mysql"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/semaphore"
	"github.com/coordd/coordd/spec"
)

// Session-mode tests that need MySQL itself: the processlist, the wake-ups
// and the repair pass. The mode-independent rules run in the conformance
// suite (Harness.SemaphoreModes).

func sessionConfig(name string, limit int, wake string) backends.SemaphoreConfig {
	return backends.SemaphoreConfig{Name: name, Limit: limit, Lease: time.Minute, Mode: spec.ModeSession, Wake: wake, MaxWaiting: -1}
}

// countProcesses counts the statements in the processlist whose text
// matches the LIKE pattern.
func countProcesses(t *testing.T, s *mysql.Store, pattern string) int {
	t.Helper()
	var n int
	if err := s.DB().QueryRowContext(t.Context(), "SELECT count(*) FROM information_schema.processlist WHERE info LIKE ?", pattern).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// acquireAsync starts a waiting acquire on its own store handle (a host of
// its own) and returns the channel its lease arrives on.
func acquireAsync(t *testing.T, dsn, prefix, name string) <-chan *semaphore.Lease {
	t.Helper()
	st := openStore(t, dsn, prefix, backends.Options{Version: "0.1.0"})
	c, err := semaphore.New(st, "waiter")
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan *semaphore.Lease, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		l, err := c.Acquire(ctx, name, semaphore.AcquireOptions{Lease: time.Minute, Wait: time.Minute})
		if err != nil {
			if ctx.Err() == nil {
				t.Errorf("acquire %s: %v", name, err)
			}
			close(out)
			return
		}
		out <- l
		<-ctx.Done()
		rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer rcancel()
		_ = l.Release(rctx)
	}()
	return out
}

func mustGet(t *testing.T, ch <-chan *semaphore.Lease, who string) *semaphore.Lease {
	t.Helper()
	select {
	case l, ok := <-ch:
		if !ok {
			t.Fatalf("%s gave up", who)
		}
		return l
	case <-time.After(20 * time.Second):
		t.Fatalf("%s did not get a slot", who)
	}
	return nil
}

func notYet(t *testing.T, ch <-chan *semaphore.Lease, who string) {
	t.Helper()
	select {
	case <-ch:
		t.Fatalf("%s got a slot out of turn", who)
	default:
	}
}

// TestSessionWakeKillFIFO: waiters of a full wake-kill semaphore park in
// SELECT RELEASE_LOCK(check), SLEEP(…), visible in the processlist; each
// release KILL QUERYs the longest-waiting one, so they are served in the
// order they came.
func TestSessionWakeKillFIFO(t *testing.T) {
	dsn := testenv.MySQLDSN(t)
	s := migrated(t, dsn, "k_")
	ctx := t.Context()
	if err := s.PutSemaphore(ctx, sessionConfig("pool", 2, spec.WakeKill)); err != nil {
		t.Fatal(err)
	}
	req := func(o string) backends.AcquireRequest {
		return backends.AcquireRequest{Owner: o, Host: "h", PID: 1, Lease: time.Minute}
	}
	for _, o := range []string{"a", "b"} {
		if _, err := s.TryAcquire(ctx, backends.SemRef{Name: "pool"}, req(o)); err != nil {
			t.Fatal(err)
		}
	}
	parked := s.ParkPatternForTest("pool")
	var waiters []<-chan *semaphore.Lease
	for i := range 3 {
		waiters = append(waiters, acquireAsync(t, dsn, "k_", "pool"))
		eventually(t, "waiter to park", func() bool { return countProcesses(t, s, parked) == i+1 })
	}

	if err := s.Release(ctx, backends.SemRef{Name: "pool"}, "a"); err != nil {
		t.Fatal(err)
	}
	first := mustGet(t, waiters[0], "the first waiter")
	eventually(t, "two waiters parked", func() bool { return countProcesses(t, s, parked) == 2 })
	notYet(t, waiters[1], "the second waiter")
	notYet(t, waiters[2], "the third waiter")

	if err := s.Release(ctx, backends.SemRef{Name: "pool"}, "b"); err != nil {
		t.Fatal(err)
	}
	mustGet(t, waiters[1], "the second waiter")
	notYet(t, waiters[2], "the third waiter")

	// The holder's session id is the processlist id of its connection.
	hs, err := s.Holders(ctx, backends.SemRef{Name: "pool"})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hs {
		var info string
		if err := s.DB().QueryRowContext(ctx, "SELECT command FROM information_schema.processlist WHERE id = ?", h.Session).Scan(&info); err != nil {
			t.Errorf("holder %+v: no processlist entry for its session: %v", h, err)
		}
	}
	if len(hs) != 2 || hs[0].Fencing == 0 || !strings.HasPrefix(hs[0].Host, "waiter") {
		t.Errorf("holders %+v, want the two waiters", hs)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	mustGet(t, waiters[2], "the third waiter")
}

// TestSessionWakePollOnePoller: with wake poll only the waiter holding the
// wait lock polls; the others block inside GET_LOCK in the server.
func TestSessionWakePollOnePoller(t *testing.T) {
	dsn := testenv.MySQLDSN(t)
	s := migrated(t, dsn, "p_")
	ctx := t.Context()
	if err := s.PutSemaphore(ctx, sessionConfig("pool", 2, spec.WakePoll)); err != nil {
		t.Fatal(err)
	}
	for _, o := range []string{"a", "b"} {
		if _, err := s.TryAcquire(ctx, backends.SemRef{Name: "pool"}, backends.AcquireRequest{Owner: o, Host: "h", PID: 1, Lease: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	var waiters []<-chan *semaphore.Lease
	for range 3 {
		waiters = append(waiters, acquireAsync(t, dsn, "p_", "pool"))
	}
	blocked := "SELECT GET_LOCK('" + s.WaitLockForTest("pool") + "'%"
	eventually(t, "one poller and two waiters blocked on the wait lock", func() bool {
		var holder *int64
		if err := s.DB().QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", s.WaitLockForTest("pool")).Scan(&holder); err != nil {
			t.Fatal(err)
		}
		return holder != nil && countProcesses(t, s, blocked) == 2
	})
	if err := s.Release(ctx, backends.SemRef{Name: "pool"}, "a"); err != nil {
		t.Fatal(err)
	}
	got := 0
	deadline := time.After(20 * time.Second)
	for got == 0 {
		for _, w := range waiters {
			select {
			case l := <-w:
				if l != nil {
					got++
				}
			default:
			}
		}
		select {
		case <-deadline:
			t.Fatal("no waiter got the freed slot")
		case <-time.After(10 * time.Millisecond):
		}
	}
	eventually(t, "the next poller to take the wait lock", func() bool { return countProcesses(t, s, blocked) == 1 })
	if hs, err := s.Holders(ctx, backends.SemRef{Name: "pool"}); err != nil || len(hs) != 2 {
		t.Fatalf("holders %+v (%v), want 2", hs, err)
	}
}

// TestSessionRepairPass: a holder whose connection dies frees its slot in
// the server, but nobody sends a KILL; the repair pass wakes the parked
// waiter.
func TestSessionRepairPass(t *testing.T) {
	dsn := testenv.MySQLDSN(t)
	s := migrated(t, dsn, "r_")
	holder := openStore(t, dsn, "r_", backends.Options{Version: "0.1.0"})
	ctx := t.Context()
	if err := s.PutSemaphore(ctx, sessionConfig("pool", 2, spec.WakeKill)); err != nil {
		t.Fatal(err)
	}
	for _, o := range []string{"a", "b"} {
		if _, err := holder.TryAcquire(ctx, backends.SemRef{Name: "pool"}, backends.AcquireRequest{Owner: o, Host: "h", PID: 1, Lease: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	w := acquireAsync(t, dsn, "r_", "pool")
	parked := s.ParkPatternForTest("pool")
	eventually(t, "the waiter to park", func() bool { return countProcesses(t, s, parked) == 1 })
	if n, err := s.RepairWakeups(ctx, []backends.SemRef{{Name: "pool"}}); err != nil || n != 0 {
		t.Fatalf("repair pass on a full semaphore woke %d (%v), want 0", n, err)
	}
	hs, err := s.Holders(ctx, backends.SemRef{Name: "pool"})
	if err != nil || len(hs) != 2 {
		t.Fatalf("holders %+v (%v)", hs, err)
	}
	if _, err := s.DB().ExecContext(ctx, "KILL CONNECTION ?", hs[0].Session); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the killed holder's slot to be free", func() bool {
		hs, err := s.Holders(ctx, backends.SemRef{Name: "pool"})
		return err == nil && len(hs) == 1
	})
	notYet(t, w, "the waiter (nobody woke it yet)")
	n, err := s.RepairWakeups(ctx, []backends.SemRef{{Name: "pool"}, {Name: "absent"}})
	if err != nil || n != 1 {
		t.Fatalf("repair pass woke %d (%v), want 1", n, err)
	}
	mustGet(t, w, "the waiter woken by the repair pass")
}

// TestSessionNoLeak: giving up (no wait, an elapsed wait) and releasing
// leave no connection or lock behind.
func TestSessionNoLeak(t *testing.T) {
	dsn := testenv.MySQLDSN(t)
	s := migrated(t, dsn, "l_")
	ctx := t.Context()
	for _, wake := range []string{spec.WakePoll, spec.WakeKill} {
		name := "gate-" + wake
		if err := s.PutSemaphore(ctx, sessionConfig(name, 2, wake)); err != nil {
			t.Fatal(err)
		}
		c, err := semaphore.New(s, "host")
		if err != nil {
			t.Fatal(err)
		}
		a, err := c.Acquire(ctx, name, semaphore.AcquireOptions{Lease: time.Minute, NoWait: true})
		if err != nil {
			t.Fatal(err)
		}
		b, err := c.Acquire(ctx, name, semaphore.AcquireOptions{Lease: time.Minute, NoWait: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Acquire(ctx, name, semaphore.AcquireOptions{Lease: time.Minute, NoWait: true}); !errors.Is(err, semaphore.ErrNotAcquired) {
			t.Fatalf("third acquire: %v, want ErrNotAcquired", err)
		}
		if _, err := c.Acquire(ctx, name, semaphore.AcquireOptions{Lease: time.Minute, Wait: 300 * time.Millisecond}); !errors.Is(err, semaphore.ErrNotAcquired) {
			t.Fatalf("waiting acquire: %v, want ErrNotAcquired", err)
		}
		if held, waiting := s.SessionsForTest(); held != 2 || waiting != 0 {
			t.Fatalf("%s: %d holds, %d waits kept, want 2 and 0", wake, held, waiting)
		}
		for _, l := range []*semaphore.Lease{a, b} {
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if held, waiting := s.SessionsForTest(); held != 0 || waiting != 0 {
			t.Fatalf("%s: %d holds, %d waits kept after release", wake, held, waiting)
		}
		var used *int64
		for i := range 2 {
			if err := s.DB().QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", s.SlotLockForTest(name, i)).Scan(&used); err != nil || used != nil {
				t.Fatalf("slot %d still locked by %v (%v)", i, used, err)
			}
		}
	}
}

// TestSessionLockNames: lock names are server-wide, so they hash the
// database, the prefix and the name into at most 64 characters; two
// prefixes in one database never share a slot.
func TestSessionLockNames(t *testing.T) {
	dsn := testenv.MySQLDSN(t)
	a := migrated(t, dsn, "a_")
	b := migrated(t, dsn, "b_")
	ctx := t.Context()
	long := strings.Repeat("x", 255)
	for _, s := range []*mysql.Store{a, b} {
		if err := s.PutSemaphore(ctx, sessionConfig(long, 1, "")); err != nil {
			t.Fatal(err)
		}
		if n := len(s.SlotLockForTest(long, 9999)); n > 64 {
			t.Fatalf("lock name of %d characters", n)
		}
		if _, err := s.TryAcquire(ctx, backends.SemRef{Name: long}, backends.AcquireRequest{Owner: "o", Host: "h", PID: 1, Lease: time.Minute}); err != nil {
			t.Fatalf("acquire under its own prefix: %v", err)
		}
	}
	if a.SlotLockForTest(long, 0) == b.SlotLockForTest(long, 0) {
		t.Fatal("two prefixes share a lock name")
	}
}

// TestSessionStaleFreeConnection: a dedicated connection that the server
// closed while it sat free (a restart, wait_timeout) is not handed out
// again: the next acquire works.
func TestSessionStaleFreeConnection(t *testing.T) {
	dsn := testenv.MySQLDSN(t)
	s := migrated(t, dsn, "f_")
	ctx := t.Context()
	if err := s.PutSemaphore(ctx, sessionConfig("gate", 1, "")); err != nil {
		t.Fatal(err)
	}
	req := backends.AcquireRequest{Owner: "a", Host: "h", PID: 1, Lease: time.Minute}
	if _, err := s.TryAcquire(ctx, backends.SemRef{Name: "gate"}, req); err != nil {
		t.Fatal(err)
	}
	hs, err := s.Holders(ctx, backends.SemRef{Name: "gate"})
	if err != nil || len(hs) != 1 {
		t.Fatalf("holders %+v (%v)", hs, err)
	}
	if err := s.Release(ctx, backends.SemRef{Name: "gate"}, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().ExecContext(ctx, "KILL CONNECTION ?", hs[0].Session); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the killed connection to leave the processlist", func() bool {
		return countProcesses(t, s, "%") > 0 && func() bool {
			var n int
			_ = s.DB().QueryRowContext(ctx, "SELECT count(*) FROM information_schema.processlist WHERE id = ?", hs[0].Session).Scan(&n)
			return n == 0
		}()
	})
	req.Owner = "b"
	if _, err := s.TryAcquire(ctx, backends.SemRef{Name: "gate"}, req); err != nil {
		t.Fatalf("acquire after the free connection was killed: %v", err)
	}
}
