package backendtest

import (
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// contract is docs/design.md's table "The backend contract": which areas
// each backend type holds and which optional capabilities it has. Run
// skips the groups of an area a backend does not hold (and those of a
// capability it lacks), so a backend that lost one would silently skip
// them; this check makes it fail instead.
var contract = map[string]map[string]bool{
	spec.TypeSQLite: {
		"Cluster": true, "Semaphores": true, "Waiters": true, "Crons": true, "Queues": true,
		"Migrator": true,
	},
	spec.TypeMySQL: {
		"Cluster": true, "Semaphores": true, "Waiters": true, "Crons": true, "Queues": true,
		"Migrator": true, "WakeRepairer": true, "PayloadLimiter": true,
	},
	spec.TypePostgres: {
		"Cluster": true, "Semaphores": true, "Waiters": true, "Crons": true, "Queues": true,
		"Migrator": true,
	},
	spec.TypeRedis: {
		"Cluster": true, "Semaphores": true, "Waiters": true, "Crons": true, "Queues": true,
		"LossGuard": true, "PayloadLimiter": true,
	},
	spec.TypeMemcached: {
		"Semaphores": true, "LossGuard": true,
	},
}

// testContract checks the backend against contract.
func testContract(t *testing.T, h Harness) {
	b := h.New(t)()
	want, known := contract[b.Type()]
	if !known {
		t.Fatalf("backend type %q is not in the contract table", b.Type())
	}
	for name, has := range map[string]bool{
		"Cluster":        hasCluster(b),
		"Semaphores":     hasSemaphores(b),
		"Waiters":        hasWaiters(b),
		"Crons":          hasCrons(b),
		"Queues":         hasQueues(b),
		"Migrator":       is[backends.Migrator](b),
		"WakeRepairer":   is[backends.WakeRepairer](b),
		"LossGuard":      is[backends.LossGuard](b),
		"PayloadLimiter": is[backends.PayloadLimiter](b),
	} {
		if has != want[name] {
			t.Errorf("the %s backend has %s: %v, want %v (docs/design.md, The backend contract)", b.Type(), name, has, want[name])
		}
	}
}

// testLeaderTerms checks docs/design.md's rule for the leader term: "A new
// counter starts at the backend's time in microseconds (cron tasks and the
// leader term follow the same rule)", so a leader row lost behind coordd's
// back (a flush, a restore, a deleted row) restarts above every term an
// old leader can hold.
func testLeaderTerms(t *testing.T, h Harness) {
	t.Run("FirstTermIsBackendTime", func(t *testing.T) {
		t.Parallel()
		b, _ := fresh(t, h)
		l := clusterOf(t, b)
		ctx := t.Context()
		before, err := b.Now(ctx)
		ok(t, err, "now")
		first, err := l.ElectLeader(ctx, newOwner("first"), time.Minute)
		ok(t, err, "elect")
		after, err := b.Now(ctx)
		ok(t, err, "now")
		if first.Term < before.UnixMicro() || first.Term > after.UnixMicro() {
			t.Fatalf("first term %d, want the backend time in µs, within [%d, %d]", first.Term, before.UnixMicro(), after.UnixMicro())
		}
	})
}
