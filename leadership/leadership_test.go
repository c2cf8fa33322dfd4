package leadership

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/sqlite"
	"github.com/coordd/coordd/spec"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// mustNew is New for a config the test knows is valid.
func mustNew(t *testing.T, cfg Config) *Elector {
	t.Helper()
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestInvalidHostRefused: the host id is stored, listed and printed in the
// holder id, so New refuses one outside spec.CheckHostID instead of
// campaigning with it (before, it campaigned as "a\n\x1b[2J/pid/nonce").
func TestInvalidHostRefused(t *testing.T) {
	for _, host := range []string{"", "a\n\x1b[2J", strings.Repeat("h", spec.MaxHostIDLen+1)} {
		if _, err := New(Config{Leader: openStore(t, filepath.Join(t.TempDir(), "c.db")), Host: host}); !errors.Is(err, spec.ErrInvalidHostID) {
			t.Errorf("New(Host %q): err %v, want spec.ErrInvalidHostID", host, err)
		}
	}
}

// openStore opens (and migrates) a handle on path.
func openStore(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), "embedded", path, backends.Options{Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

// start runs e until the returned stop is called (stop waits for Run).
func start(t *testing.T, e *Elector) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); e.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}

func waitLeading(t *testing.T, e *Elector, d time.Duration) backends.Term {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if term, ok := e.Leading(); ok {
			return term
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not lead within %v", e.Holder(), d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestOneElectorLeads(t *testing.T) {
	s := openStore(t, filepath.Join(t.TempDir(), "c.db"))
	e := mustNew(t, Config{Leader: s, Host: "a", Lease: 2 * time.Second})
	sub := e.Subscribe()
	if _, ok := e.Leading(); ok {
		t.Fatal("leading before Run")
	}
	stop := start(t, e)
	term := waitLeading(t, e, 5*time.Second)
	if got := <-sub; !got {
		t.Fatal("subscriber got false, want true")
	}
	cur, err := s.CurrentLeader(t.Context())
	if err != nil || cur.Holder != e.Holder() || cur.Term != term.Term {
		t.Fatalf("current leader %+v, %v; want %s term %d", cur, err, e.Holder(), term.Term)
	}
	// Renewals keep it leading in the same term past several leases.
	time.Sleep(3 * time.Second)
	if t2, ok := e.Leading(); !ok || t2.Term != term.Term {
		t.Fatalf("after 1.5 leases: leading %v term %d, want term %d", ok, t2.Term, term.Term)
	}
	stop()
	if _, ok := e.Leading(); ok {
		t.Fatal("leading after Run returned")
	}
	if got := <-sub; got {
		t.Fatal("subscriber got true after stop, want false")
	}
	if _, err := s.CurrentLeader(t.Context()); !errors.Is(err, backends.ErrNotFound) {
		t.Fatalf("after resign: %v, want no leader", err)
	}
}

func TestTwoElectorsOneLeaderAndResign(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.db")
	a := mustNew(t, Config{Leader: openStore(t, path), Host: "a", Lease: 2 * time.Second})
	b := mustNew(t, Config{Leader: openStore(t, path), Host: "b", Lease: 2 * time.Second})
	stopA, stopB := start(t, a), start(t, b)
	var first, second *Elector
	var stopFirst func()
	deadline := time.Now().Add(5 * time.Second)
	for first == nil {
		if _, ok := a.Leading(); ok {
			first, second, stopFirst = a, b, stopA
		} else if _, ok := b.Leading(); ok {
			first, second, stopFirst = b, a, stopB
		}
		if time.Now().After(deadline) {
			t.Fatal("nobody leads")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// For a while exactly one leads.
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		_, okA := a.Leading()
		_, okB := b.Leading()
		if okA && okB {
			t.Fatal("both lead")
		}
	}
	t1, _ := first.Leading()
	began := time.Now()
	stopFirst() // resigns
	t2 := waitLeading(t, second, 2*time.Second)
	if t2.Term <= t1.Term {
		t.Fatalf("new term %d, not above %d", t2.Term, t1.Term)
	}
	t.Logf("takeover after resign in %v", time.Since(began))
}

// flaky wraps a Leader; while block is set the backend is unreachable.
type flaky struct {
	backends.Leader
	block  atomic.Bool
	renews atomic.Int64
}

func (f *flaky) RenewLeader(ctx context.Context, t backends.Term, lease time.Duration) (backends.Term, error) {
	f.renews.Add(1)
	if f.block.Load() {
		return backends.Term{}, errors.New("backend unreachable")
	}
	return f.Leader.RenewLeader(ctx, t, lease)
}

func (f *flaky) ElectLeader(ctx context.Context, holder string, lease time.Duration) (backends.Term, error) {
	if f.block.Load() {
		return backends.Term{}, errors.New("backend unreachable")
	}
	return f.Leader.ElectLeader(ctx, holder, lease)
}

func TestStepDownWhenRenewalsFail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.db")
	f := &flaky{Leader: openStore(t, path)}
	lease := 2 * time.Second
	e := mustNew(t, Config{Leader: f, Host: "a", Lease: lease})
	sub := e.Subscribe()
	start(t, e)
	waitLeading(t, e, 5*time.Second)
	<-sub
	blocked := time.Now()
	f.block.Store(true)
	before := f.renews.Load()
	select {
	case v := <-sub:
		if v {
			t.Fatal("got true, want false")
		}
	case <-time.After(lease + time.Second):
		t.Fatalf("still leading %v after renewals stopped", time.Since(blocked))
	}
	took := time.Since(blocked)
	if took > lease {
		t.Fatalf("stepped down after %v, beyond the lease %v", took, lease)
	}
	if _, ok := e.Leading(); ok {
		t.Fatal("Leading after stepping down")
	}
	if f.renews.Load()-before < 2 {
		t.Fatalf("only %d renewals tried in the trust window", f.renews.Load()-before)
	}
	// Another elector takes over once the lease expires (not resigned).
	other := mustNew(t, Config{Leader: openStore(t, path), Host: "b", Lease: lease})
	start(t, other)
	waitLeading(t, other, 2*lease)
	// The first one, renewals back, does not lead while the other does.
	f.block.Store(false)
	time.Sleep(lease)
	if _, ok := e.Leading(); ok {
		t.Fatal("both lead")
	}
}

func TestStepDownOnNotLeader(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.db")
	s := openStore(t, path)
	e := mustNew(t, Config{Leader: s, Host: "a", Lease: 3 * time.Second})
	sub := e.Subscribe()
	start(t, e)
	term := waitLeading(t, e, 5*time.Second)
	<-sub
	// Someone resigns the term behind its back and takes the lease.
	if err := s.ResignLeader(t.Context(), term); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ElectLeader(t.Context(), "intruder", time.Hour); err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-sub:
		if v {
			t.Fatal("got true, want false")
		}
	case <-time.After(3 * time.Second):
		t.Fatal("did not step down on ErrNotLeader")
	}
}
