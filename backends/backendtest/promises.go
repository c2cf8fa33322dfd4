package backendtest

import (
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// contract is docs/design.md's table "The backend contract": which
// interfaces each backend type implements. Run discovers groups by type
// assertion, so a backend that lost a method would silently skip a group;
// this check makes it fail instead.
var contract = map[string]map[string]bool{
	spec.TypeSQLite: {
		"Migrator": true, "StateStore": true, "SemaphoreAdmin": true, "Semaphores": true, "Waiters": true,
		"Leader": true, "CronAdmin": true, "Crons": true, "QueueAdmin": true, "Queues": true, "HostRegistry": true,
	},
	spec.TypeMySQL: {
		"Migrator": true, "StateStore": true, "SemaphoreAdmin": true, "Semaphores": true, "Waiters": true,
		"Leader": true, "CronAdmin": true, "Crons": true, "QueueAdmin": true, "Queues": true, "HostRegistry": true,
		"WakeRepairer": true, "PayloadLimiter": true,
	},
	spec.TypePostgres: {
		"Migrator": true, "StateStore": true, "SemaphoreAdmin": true, "Semaphores": true, "Waiters": true,
		"Leader": true, "CronAdmin": true, "Crons": true, "QueueAdmin": true, "Queues": true, "HostRegistry": true,
	},
	spec.TypeRedis: {
		"StateStore": true, "SemaphoreAdmin": true, "Semaphores": true, "Waiters": true,
		"Leader": true, "CronAdmin": true, "Crons": true, "QueueAdmin": true, "Queues": true, "HostRegistry": true,
		"LossGuard": true, "PayloadLimiter": true,
	},
	spec.TypeMemcached: {
		"SemaphoreAdmin": true, "Semaphores": true, "LossGuard": true,
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
		"Migrator":       is[backends.Migrator](b),
		"StateStore":     is[backends.StateStore](b),
		"SemaphoreAdmin": is[backends.SemaphoreAdmin](b),
		"Semaphores":     is[backends.Semaphores](b),
		"Waiters":        is[backends.Waiters](b),
		"Leader":         is[backends.Leader](b),
		"CronAdmin":      is[backends.CronAdmin](b),
		"Crons":          is[backends.Crons](b),
		"QueueAdmin":     is[backends.QueueAdmin](b),
		"Queues":         is[backends.Queues](b),
		"HostRegistry":   is[backends.HostRegistry](b),
		"WakeRepairer":   is[backends.WakeRepairer](b),
		"LossGuard":      is[backends.LossGuard](b),
		"PayloadLimiter": is[backends.PayloadLimiter](b),
	} {
		if has != want[name] {
			t.Errorf("the %s backend implements %s: %v, want %v (docs/design.md, The backend contract)", b.Type(), name, has, want[name])
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
		l := as[backends.Leader](t, b)
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
