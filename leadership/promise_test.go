package leadership

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/mysql"
	"github.com/coordd/coordd/backends/postgres"
	"github.com/coordd/coordd/backends/redis"
	"github.com/coordd/coordd/internal/testenv"
)

// The election promises of docs/design.md ("Leader election") and
// docs/spec.md (cluster.leader_lease) on every cluster backend: the tests
// beside this file run on the embedded store only.

// leaderStore is a cluster backend: its leader lease and its clock.
type leaderStore interface {
	backends.Backend
	backends.Leader
}

// clusterStores returns, per cluster backend type, a function that opens
// a new handle on one fresh store (as another host would).
func clusterStores(t *testing.T) map[string]func(t *testing.T) func() leaderStore {
	return map[string]func(t *testing.T) func() leaderStore{
		"sqlite": func(t *testing.T) func() leaderStore {
			path := filepath.Join(t.TempDir(), "c.db")
			return func() leaderStore { return openStore(t, path) }
		},
		"mysql": func(t *testing.T) func() leaderStore {
			dsn := testenv.MySQLDSN(t)
			return func() leaderStore {
				s, err := mysql.Open(context.Background(), "db", dsn, "coordd_", backends.Options{Version: "test"})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = s.Close() })
				if err := s.Migrate(context.Background()); err != nil {
					t.Fatal(err)
				}
				return s
			}
		},
		"postgres": func(t *testing.T) func() leaderStore {
			dsn := testenv.PostgresDSN(t)
			return func() leaderStore {
				s, err := postgres.Open(context.Background(), "pg", dsn, "coordd", "coordd_", backends.Options{Version: "test"})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = s.Close() })
				if err := s.Migrate(context.Background()); err != nil {
					t.Fatal(err)
				}
				return s
			}
		},
		"redis": func(t *testing.T) func() leaderStore {
			url, prefix := testenv.RedisURL(t)
			return func() leaderStore {
				s, err := redis.Open(context.Background(), "cache", url, prefix, backends.Options{Version: "test"})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = s.Close() })
				return s
			}
		},
	}
}

// cut is a cluster backend whose leader calls fail while cut is set, as
// for a host that lost its network: its clock still reads, so the
// elector follows with the backend's clock as in production.
type cut struct {
	leaderStore
	cut atomic.Bool
}

var errCut = errors.New("backend unreachable")

func (c *cut) ElectLeader(ctx context.Context, holder string, lease time.Duration) (backends.Term, error) {
	if c.cut.Load() {
		return backends.Term{}, errCut
	}
	return c.leaderStore.ElectLeader(ctx, holder, lease)
}

func (c *cut) RenewLeader(ctx context.Context, t backends.Term, lease time.Duration) (backends.Term, error) {
	if c.cut.Load() {
		return backends.Term{}, errCut
	}
	return c.leaderStore.RenewLeader(ctx, t, lease)
}

func (c *cut) ResignLeader(ctx context.Context, t backends.Term) error {
	if c.cut.Load() {
		return errCut
	}
	return c.leaderStore.ResignLeader(ctx, t)
}

// neverBoth fails if a and b both lead at any moment of d.
func neverBoth(t *testing.T, a, b *Elector, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		_, okA := a.Leading()
		_, okB := b.Leading()
		if okA && okB {
			t.Fatal("both lead")
		}
	}
}

// TestPromiseElectionEveryClusterBackend: one leader at a time; "on
// shutdown the leader resigns so another host takes over within lease/2"
// (bounded here by the lease); a leader that cannot renew "steps down
// without waiting to learn whether the lease really expired", and "a dead
// leader is replaced within about" the lease, in a higher term, while the
// old one, reachable again, does not lead beside it.
func TestPromiseElectionEveryClusterBackend(t *testing.T) {
	for typ, stores := range clusterStores(t) {
		t.Run(typ, func(t *testing.T) {
			t.Parallel()
			const lease = 2 * time.Second
			open := stores(t)
			ca, cb := &cut{leaderStore: open()}, &cut{leaderStore: open()}
			a := mustNew(t, Config{Leader: ca, Host: "a", Lease: lease})
			b := mustNew(t, Config{Leader: cb, Host: "b", Lease: lease})
			stopA := start(t, a)
			t1 := waitLeading(t, a, 5*time.Second)
			stopB := start(t, b)
			neverBoth(t, a, b, lease)

			// A clean stop resigns: b takes over within the lease.
			stopA()
			t2 := waitLeading(t, b, lease)
			if t2.Term <= t1.Term {
				t.Fatalf("term after the resign %d, not above %d", t2.Term, t1.Term)
			}

			// b is cut off: it steps down before its lease can have run out,
			// and a new a takes over once it has, in a higher term.
			a = mustNew(t, Config{Leader: ca, Host: "a", Lease: lease})
			start(t, a)
			sub := b.Subscribe()
			cutAt := time.Now()
			cb.cut.Store(true)
			select {
			case v := <-sub:
				if v {
					t.Fatal("b: got true, want a step down")
				}
			case <-time.After(2 * lease):
				t.Fatalf("b still leads %v after its renewals stopped", time.Since(cutAt))
			}
			if took := time.Since(cutAt); took > lease {
				t.Fatalf("b stepped down %v after the cut, beyond its lease %v", took, lease)
			}
			t3 := waitLeading(t, a, 3*lease)
			if t3.Term <= t2.Term {
				t.Fatalf("term after the takeover %d, not above %d", t3.Term, t2.Term)
			}
			cb.cut.Store(false)
			neverBoth(t, a, b, lease)
			stopB()
		})
	}
}
