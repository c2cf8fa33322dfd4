package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/reconcile"
)

// keyedSpec is a keyed semaphore s beside a queue (so that removing s
// does not empty the spec).
const keyedSpec = `
backends:
  db: {type: sqlite, path: ../data/db.db}
semaphores:
%s
queues:
  q: {partitions: 1}
`

func keyedAcquire(t *testing.T, ref backends.SemRef, st interface {
	TryAcquire(context.Context, backends.SemRef, backends.AcquireRequest) (backends.Grant, error)
}, n int) []string {
	t.Helper()
	var owners []string
	for i := range n {
		o := fmt.Sprintf("owner-%d-%d", time.Now().UnixNano(), i)
		if _, err := st.TryAcquire(context.Background(), ref, backends.AcquireRequest{Owner: o, Host: "h", PID: 1, Lease: time.Minute}); err != nil {
			t.Fatalf("acquire %d of %s: %v", i, ref, err)
		}
		owners = append(owners, o)
	}
	return owners
}

// TestKeyedSemaphoreLifecycle: a keyed semaphore's live instances are
// neither drift nor touched by an apply that does not change it; a new
// limit reaches them (a lower one evicting nobody); removing the semaphore
// drains every instance (nobody admitted on any key) and completes once
// their holders released, leaving no instance behind.
func TestKeyedSemaphoreLifecycle(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.write(fmt.Sprintf(keyedSpec, "  s: {keyed: true, limit: 2, max_waiting: 1, max_hold: 1h}"))
	f.apply(reconcile.Options{})
	st := f.store("db")
	k1 := keyedAcquire(t, backends.SemRef{Name: "s", Key: "k1"}, st, 2)
	k2 := keyedAcquire(t, backends.SemRef{Name: "s", Key: "k2"}, st, 1)
	if err := st.EnterWait(ctx, backends.SemRef{Name: "s", Key: "k1"}, backends.AcquireRequest{Owner: "waiter", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if p := f.plan(reconcile.Options{}); p.HasChanges() || len(p.Waiting) != 0 {
		t.Fatalf("plan with live instances, spec unchanged:\n%s", text(p))
	}
	f.apply(reconcile.Options{})
	if s := f.semState(st, "s"); s == nil || len(s.Instances) != 2 || len(s.Holders) != 3 || s.Waiters != 1 {
		t.Fatalf("instances after a no-op apply: %+v", s)
	}

	// A lower limit: k1's two holders stay, nobody more is admitted there;
	// a fresh key gets one slot.
	f.write(fmt.Sprintf(keyedSpec, "  s: {keyed: true, limit: 1, max_waiting: 1, max_hold: 1h}"))
	if out := text(f.plan(reconcile.Options{})); !strings.Contains(out, "~ limit: 2 -> 1") || !strings.Contains(out, "2 holder(s) of 1 key(s) above the new limit") {
		t.Fatalf("limit change plan:\n%s", out)
	}
	f.apply(reconcile.Options{})
	if hs, _ := st.Holders(ctx, backends.SemRef{Name: "s", Key: "k1"}); len(hs) != 2 {
		t.Fatalf("k1 holders after lowering the limit: %d, want 2 kept", len(hs))
	}
	wantNoSlot(t, st, backends.SemRef{Name: "s", Key: "k1"})
	k3 := keyedAcquire(t, backends.SemRef{Name: "s", Key: "k3"}, st, 1)
	wantNoSlot(t, st, backends.SemRef{Name: "s", Key: "k3"})

	// Removed from the spec: every instance drains.
	f.write(fmt.Sprintf(keyedSpec, ""))
	p := f.plan(reconcile.Options{})
	if !strings.Contains(text(p), "semaphore.s") {
		t.Fatalf("remove plan:\n%s", text(p))
	}
	f.apply(reconcile.Options{})
	wantNoSlot(t, st, backends.SemRef{Name: "s", Key: "k4"})
	if p := f.plan(reconcile.Options{}); len(p.Waiting) != 1 || !strings.Contains(text(p), "4 holder(s)") {
		t.Fatalf("plan while the instances drain:\n%s", text(p))
	}
	for _, o := range k1 {
		if err := st.Release(ctx, backends.SemRef{Name: "s", Key: "k1"}, o); err != nil {
			t.Fatal(err)
		}
	}
	for ref, os := range map[backends.SemRef][]string{{Name: "s", Key: "k2"}: k2, {Name: "s", Key: "k3"}: k3} {
		for _, o := range os {
			if err := st.Release(ctx, ref, o); err != nil {
				t.Fatal(err)
			}
		}
	}
	if out := text(f.plan(reconcile.Options{})); !strings.Contains(out, "holders have drained") {
		t.Fatalf("plan after the drain:\n%s", out)
	}
	f.apply(reconcile.Options{})
	if s := f.semState(st, "s"); s != nil {
		t.Fatalf("semaphore after the delete completed: %+v", s)
	}
	var rows int
	if err := st.DB().QueryRow(`SELECT (SELECT count(*) FROM semaphore_instance_slots) + (SELECT count(*) FROM semaphore_instance_waiters)`).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("instance rows left after the delete: %d (%v)", rows, err)
	}
	_, err := st.TryAcquire(ctx, backends.SemRef{Name: "s", Key: "k1"}, backends.AcquireRequest{Owner: "late", Lease: time.Minute})
	if !errors.Is(err, backends.ErrNotFound) {
		t.Fatalf("acquire after the delete: %v, want ErrNotFound", err)
	}
}

// TestKeyedFlipReplaces: declaring an applied semaphore keyed (or no longer
// keyed) is a replacement: the new kind admits nobody until the holders of
// the old one release, so the semaphore's own slots and its instances
// never hold more than the limit between them.
func TestKeyedFlipReplaces(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.write(fmt.Sprintf(keyedSpec, "  s: {limit: 1, max_hold: 1h}"))
	f.apply(reconcile.Options{})
	st := f.store("db")
	named := keyedAcquire(t, backends.SemRef{Name: "s"}, st, 1)

	f.write(fmt.Sprintf(keyedSpec, "  s: {keyed: true, limit: 1, max_hold: 1h}"))
	p := f.plan(reconcile.Options{})
	if out := text(p); !strings.Contains(out, "-/+ semaphore.s") || !strings.Contains(out, "~ keyed: false -> true   # forces replacement") {
		t.Fatalf("keyed flip plan:\n%s", out)
	}
	f.apply(reconcile.Options{})
	wantNoSlot(t, st, backends.SemRef{Name: "s", Key: "k"})
	if err := st.Release(ctx, backends.SemRef{Name: "s"}, named[0]); err != nil {
		t.Fatalf("release of the holder from before the flip: %v", err)
	}
	if out := text(f.plan(reconcile.Options{})); !strings.Contains(out, "finishes its replacement") {
		t.Fatalf("plan after the drain:\n%s", out)
	}
	f.apply(reconcile.Options{})
	inst := keyedAcquire(t, backends.SemRef{Name: "s", Key: "k"}, st, 1)
	keyedAcquire(t, backends.SemRef{Name: "s", Key: "other"}, st, 1)
	_, err := st.TryAcquire(ctx, backends.SemRef{Name: "s"}, backends.AcquireRequest{Owner: "plain", Lease: time.Minute})
	if !errors.Is(err, backends.ErrKeyRequired) {
		t.Fatalf("plain acquire of the keyed semaphore: %v, want ErrKeyRequired", err)
	}

	// And back: the instance holders hold off the plain semaphore.
	f.write(fmt.Sprintf(keyedSpec, "  s: {limit: 1, max_hold: 1h}"))
	f.apply(reconcile.Options{})
	wantNoSlot(t, st, backends.SemRef{Name: "s"})
	if err := st.Release(ctx, backends.SemRef{Name: "s", Key: "k"}, inst[0]); err != nil {
		t.Fatal(err)
	}
	if p := f.plan(reconcile.Options{}); len(p.Waiting) != 1 {
		t.Fatalf("plan with one instance holder left:\n%s", text(p))
	}
}
