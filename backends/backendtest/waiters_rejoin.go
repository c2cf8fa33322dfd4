package backendtest

import (
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
)

// testWaitRejoin checks spec.md's "Waiting": "A waiter whose process stalls
// for longer than 30 s loses its place and joins the tail when it runs
// again". Its record expired while it stalled: renewing it (EnterWait, as
// the semaphore package does every third of the waiter lease) must give
// it a ticket behind every live waiter, not its old place back.
func testWaitRejoin(t *testing.T, h Harness) {
	ctx := t.Context()
	s, w := freshWaiters(t, h)
	fw := as[firstWaiter](t, s.b)
	s.put(h.waitConfig("line", -1))
	a, b := newOwner("stalled"), newOwner("wb")
	ok(t, w.EnterWait(ctx, backends.SemRef{Name: "line"}, backends.AcquireRequest{Owner: a, Lease: time.Second}), "enter a with a 1s lease")
	ok(t, w.EnterWait(ctx, backends.SemRef{Name: "line"}, backends.AcquireRequest{Owner: b, Lease: time.Minute}), "enter b")
	waitFor(t, "a's record to expire", func() (bool, error) {
		first, err := fw.FirstWaiter(ctx, backends.SemRef{Name: "line"})
		return first == b, err
	})
	// a runs again and renews: it is behind b now.
	ok(t, w.EnterWait(ctx, backends.SemRef{Name: "line"}, backends.AcquireRequest{Owner: a, Lease: time.Minute}), "a renews after its record expired")
	first, err := fw.FirstWaiter(ctx, backends.SemRef{Name: "line"})
	ok(t, err, "first waiter")
	if first != b {
		t.Fatalf("first waiter %q after the stalled waiter came back, want %q: it got its old place back", first, b)
	}
	ok(t, w.LeaveWait(ctx, backends.SemRef{Name: "line"}, b), "b leaves")
	if first, err := fw.FirstWaiter(ctx, backends.SemRef{Name: "line"}); err != nil || first != a {
		t.Fatalf("first waiter %q (%v) after b left, want the stalled waiter %q", first, err, a)
	}
}
