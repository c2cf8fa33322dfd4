package backendtest

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
)

// testWaiterList checks backends.Waiters, which every backend with a
// line of waiters implements (the dashboard's and coordd status's view of
// the line): waiters are listed in arrival order with their host and pid,
// since and expiry by the backend clock; a renewal keeps a waiter's place
// and since; a waiter that is granted a slot, or whose record expired, is
// no longer listed; and no owner token is shown.
func testWaiterList(t *testing.T, h Harness) {
	ctx := t.Context()
	s, _ := freshWaiters(t, h)
	l := waitersOf(t, s.b)
	s.put(h.waitConfig("line", -1))
	if ws, err := l.ListWaiters(ctx, backends.SemRef{Name: "line"}); err != nil || len(ws) != 0 {
		t.Fatalf("waiters of an idle semaphore: %+v (%v), want none", ws, err)
	}
	if ws, err := l.ListWaiters(ctx, backends.SemRef{Name: "absent"}); err != nil || len(ws) != 0 {
		t.Fatalf("waiters of an absent semaphore: %+v (%v), want none", ws, err)
	}
	holder := newOwner("holder")
	s.acquire(backends.SemRef{Name: "line"}, holder, time.Minute)

	before, err := s.b.Now(ctx)
	ok(t, err, "now")
	a, b := newOwner("wa"), newOwner("wb")
	ok(t, l.EnterWait(ctx, backends.SemRef{Name: "line"}, backends.AcquireRequest{Owner: a, Host: "host-a", PID: 101, Lease: time.Minute}), "a enters")
	ok(t, l.EnterWait(ctx, backends.SemRef{Name: "line"}, backends.AcquireRequest{Owner: b, Host: "host-b", PID: 102, Lease: 2 * time.Second}), "b enters with a 2s lease")
	after, err := s.b.Now(ctx)
	ok(t, err, "now")

	ws := listWaiters(t, l, backends.SemRef{Name: "line"})
	wantLine(t, ws, "host-a/101", "host-b/102")
	for i, lease := range []time.Duration{time.Minute, 2 * time.Second} {
		w := ws[i]
		if w.Since.Before(before.Truncate(time.Millisecond)) || w.Since.After(after) {
			t.Errorf("waiter %d since %v, want between %v and %v by the backend clock", i+1, w.Since, before, after)
		}
		if d := w.ExpiresAt.Sub(w.Since); d <= 0 || d > lease+time.Second {
			t.Errorf("waiter %d expires %v after it entered, want about its lease %v", i+1, d, lease)
		}
	}
	if ws[1].Since.Before(ws[0].Since) {
		t.Errorf("the second waiter entered at %v, before the first (%v)", ws[1].Since, ws[0].Since)
	}
	raw, err := json.Marshal(ws)
	ok(t, err, "marshal waiters")
	if strings.Contains(string(raw), a) || strings.Contains(string(raw), b) {
		t.Errorf("listed waiters show an owner token: %s", raw)
	}

	// a renews: same place, same since.
	ok(t, l.EnterWait(ctx, backends.SemRef{Name: "line"}, backends.AcquireRequest{Owner: a, Host: "host-a", PID: 101, Lease: time.Minute}), "a renews")
	again := listWaiters(t, l, backends.SemRef{Name: "line"})
	wantLine(t, again, "host-a/101", "host-b/102")
	if !again[0].Since.Equal(ws[0].Since) {
		t.Errorf("a renewal moved since from %v to %v", ws[0].Since, again[0].Since)
	}

	// The holder leaves and a, first in line, is granted the slot: a is
	// no longer a waiter.
	s.release(backends.SemRef{Name: "line"}, holder)
	_, err = s.TryAcquire(ctx, backends.SemRef{Name: "line"}, backends.AcquireRequest{Owner: a, Host: "host-a", PID: 101, Lease: time.Minute})
	ok(t, err, "a, first in line, acquires the freed slot")
	wantLine(t, listWaiters(t, l, backends.SemRef{Name: "line"}), "host-b/102")

	// b stops renewing: its record expires and it is no longer listed.
	waitFor(t, "b's waiter record to expire", func() (bool, error) {
		ws, err := l.ListWaiters(ctx, backends.SemRef{Name: "line"})
		return len(ws) == 0, err
	})
	s.release(backends.SemRef{Name: "line"}, a)

	if h.NoKeyed || !h.leased() {
		return // no keyed semaphores here (MySQL's mode session refuses them)
	}
	// A keyed semaphore: each instance's line, and all of them by the
	// semaphore's name, by key.
	s.put(h.keyedConfig("per-user", 1, -1))
	x, y := backends.SemRef{Name: "per-user", Key: "x"}, backends.SemRef{Name: "per-user", Key: "y"}
	for _, ref := range []backends.SemRef{y, x} {
		s.acquire(ref, newOwner("holder"), time.Minute)
		ok(t, l.EnterWait(ctx, ref, backends.AcquireRequest{Owner: newOwner("w"), Host: "host-" + ref.Key, PID: 7, Lease: time.Minute}), "enter "+ref.String())
	}
	ok(t, l.EnterWait(ctx, x, backends.AcquireRequest{Owner: newOwner("w"), Host: "host-x2", PID: 8, Lease: time.Minute}), "enter x again")
	wantLine(t, listWaiters(t, l, x), "x:host-x/7", "x:host-x2/8")
	wantLine(t, listWaiters(t, l, backends.SemRef{Name: "per-user"}), "x:host-x/7", "x:host-x2/8", "y:host-y/7")
}

// listWaiters lists ref's waiters and checks that their places count
// from 1 in each line.
func listWaiters(t *testing.T, l backends.Waiters, ref backends.SemRef) []backends.Waiter {
	t.Helper()
	ws, err := l.ListWaiters(t.Context(), ref)
	ok(t, err, "list waiters "+ref.String())
	place := map[string]int{}
	for _, w := range ws {
		place[w.Key]++
		if w.Place != place[w.Key] {
			t.Fatalf("waiters of %s: %+v: place %d where %d was due", ref, ws, w.Place, place[w.Key])
		}
	}
	return ws
}

// wantLine checks a line as "host/pid", or "key:host/pid" for an instance.
func wantLine(t *testing.T, ws []backends.Waiter, want ...string) {
	t.Helper()
	got := make([]string, len(ws))
	for i, w := range ws {
		got[i] = w.Host + "/" + strconv.Itoa(w.PID)
		if w.Key != "" {
			got[i] = w.Key + ":" + got[i]
		}
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("line %q, want %q", got, want)
	}
}
