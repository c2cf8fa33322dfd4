// Package backendtest is the conformance suite that every coordd backend
// runs against a real store. It checks the rules of package backends: the
// backend clock, leases that change nothing once lost, the semaphore limit
// guard, strictly increasing fencing, slot retirement, the apply lock and
// atomic commits.
//
// A backend's test calls Run with a Harness. Run discovers the backend's
// capabilities by type assertion and runs one group of subtests per
// capability; each subtest gets its own fresh store. To cover a new
// capability, add an entry to capabilities.
package backendtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
)

// Harness connects the suite to one backend.
type Harness struct {
	// New creates one fresh, isolated store (temp file, random DB or key
	// prefix) and returns a function that opens a new handle to it. Calling
	// the returned func again opens another handle to the SAME store, as a
	// second host would. Handles are closed and the store removed by
	// t.Cleanup.
	New func(t *testing.T) (open func() backends.Backend)
	// DeleteSlot simulates drift: removes slot `slot` of semaphore `name`
	// behind coordd's back.
	DeleteSlot func(t *testing.T, b backends.Backend, name string, slot int)
	// InsertJobs adds n ready jobs to partition p of queue (without
	// going through Queues.Push).
	InsertJobs func(t *testing.T, b backends.Backend, queue string, p, n int)
	// SemaphoreModes lists the semaphore modes the backend holds besides
	// lease, optionally with a wake strategy ("session", "session/kill").
	// The semaphore and waiter tests run again for each.
	SemaphoreModes []string
	// KillSession ends the backend session (MySQL: KILL CONNECTION) whose
	// id a session-mode holder reports, behind coordd's back.
	KillSession func(t *testing.T, b backends.Backend, id int64)
	// HeldSlotsOnly says that slots exist only while held (memcached: a
	// slot is a key taken with add and expiring with the lease). An expired
	// lease then leaves no trace (Expired is always 0), and a free slot
	// cannot be deleted: the drift tests check instead that deleting a free
	// slot changes nothing and that deleting a held one frees it.
	HeldSlotsOnly bool
	// NoMaxWaiting says that the backend keeps no waiter line: PutSemaphore
	// refuses max_waiting >= 0 with ErrUnsupported (checked), and the
	// suite's configs use -1 (unbounded).
	NoMaxWaiting bool
	// NoKeyed says that the backend cannot hold keyed semaphores:
	// PutSemaphore refuses Keyed with ErrUnsupported (checked).
	NoKeyed bool
	// InstanceRows lists every row or key that the store holds for any
	// instance of keyed semaphore name, read behind coordd's back (one
	// string each, for messages). The keyed tests check that idle
	// instances leave none. Required unless NoKeyed.
	InstanceRows func(t *testing.T, b backends.Backend, name string) []string
	// ClockFencing says that every fencing number and term is at least the
	// backend's clock in µs when it is handed out (MySQL: so that a
	// failover to a replica that missed the last ones does not hand them
	// out again). Numbers then grow with time, not by one per use, and a
	// test cannot tell a number a refused claim used from time passing.
	ClockFencing bool

	// mode and wakeMode are the semaphore mode under test (set by Run).
	mode, wakeMode string
}

// capability is one interface a backend may implement and the subtests
// that check it.
type capability struct {
	name string
	has  func(backends.Backend) bool
	run  func(t *testing.T, h Harness)
}

// capabilities lists what the suite checks, in order.
var capabilities = []capability{
	{"Backend", func(backends.Backend) bool { return true }, testBackend},
	{"Contract", func(backends.Backend) bool { return true }, testContract},
	{"Migrator", is[backends.Migrator], testMigrator},
	{"StateStore", hasCluster, testStateStore},
	{"Semaphores", hasSemaphores, testSemaphores},
	{"Waiters", hasWaiters, testWaiters},
	{"WaiterRejoin", hasWaiters, testWaitRejoin},
	{"Keyed", hasSemaphores, testKeyed},
	{"Leader", hasCluster, testLeader},
	{"LeaderTerms", hasCluster, testLeaderTerms},
	{"CronAdmin", hasCrons, testCronAdmin},
	{"Crons", hasCrons, testCronsRuntime},
	{"CronPause", hasCrons, testCronsPause}, // every cron backend must pause
	{"QueueAdmin", hasQueues, testQueueAdmin},
	{"Queues", hasQueues, testQueues},
	{"QueueReturn", hasQueues, testQueueReturn},
	{"QueueOrder", hasQueues, testQueueOrder},
	{"QueueKeys", hasQueues, testQueueKeys},
	{"QueueComeBack", hasQueues, testQueueComeBack},
	{"QueueDeadJob", hasQueues, testQueueDeadJob},             // every queue backend must act on one dead job
	{"QueueDeadRead", hasQueues, testQueueDeadRead},           // and read one page of the dead set, bounded
	{"QueueDiedAt", hasQueues, testQueueDiedAt},               // a dead job's AvailableAt is its time of death
	{"QueueBrowse", hasQueues, testQueueBrowse},               // the queue browser: pages by state, one job, cancel, run now
	{"QueuePause", hasQueues, testQueuePause},                 // an operator's pause of a queue
	{"QueueAttemptErrors", hasQueues, testQueueAttemptErrors}, // every failed attempt's error, time and worker
	{"QueueCounts", hasQueues, testQueueCounts},               // processed and failed counts per minute
	{"QueuePushOnce", hasQueues, testQueuePushOnce},           // one push per once key, whatever came after
	{"QueuePriority", hasQueues, testQueuePriority},           // higher priority claimed first, FIFO within one, key order kept
	{"RateLimits", hasRateLimits, testRateLimits},             // GCRA permits with the backend's clock
	{"HostRegistry", hasCluster, testHostRegistry},
	{"Notices", hasCluster, testNotices},
}

func is[T any](b backends.Backend) bool {
	_, ok := b.(T)
	return ok
}

// The areas a backend holds (backends.Backend's accessors).
func hasCluster(b backends.Backend) bool    { return b.Cluster() != nil }
func hasSemaphores(b backends.Backend) bool { return b.Semaphores() != nil }
func hasCrons(b backends.Backend) bool      { return b.Crons() != nil }
func hasQueues(b backends.Backend) bool     { return b.Queues() != nil }
func hasWaiters(b backends.Backend) bool    { return hasSemaphores(b) && b.Semaphores().Waiters() != nil }

// clusterOf and the others below are b's area, failing t when b holds none.
func clusterOf(t *testing.T, b backends.Backend) backends.Cluster {
	t.Helper()
	return area(t, b, "a cluster", b.Cluster())
}

func semsOf(t *testing.T, b backends.Backend) backends.Semaphores {
	t.Helper()
	return area(t, b, "semaphores", b.Semaphores())
}

func waitersOf(t *testing.T, b backends.Backend) backends.Waiters {
	t.Helper()
	return area(t, b, "a line of waiters", semsOf(t, b).Waiters())
}

func cronsOf(t *testing.T, b backends.Backend) backends.Crons {
	t.Helper()
	return area(t, b, "cron tasks", b.Crons())
}

func queuesOf(t *testing.T, b backends.Backend) backends.Queues {
	t.Helper()
	return area(t, b, "queues", b.Queues())
}

func area[T comparable](t *testing.T, b backends.Backend, what string, a T) T {
	t.Helper()
	var zero T
	if a == zero {
		t.Fatalf("%s backend holds no %s", b.Type(), what)
	}
	return a
}

// Run runs the conformance suite.
func Run(t *testing.T, h Harness) {
	if h.New == nil {
		t.Fatal("backendtest: Harness.New is nil")
	}
	probe := h.New(t)()
	for _, c := range capabilities {
		if !c.has(probe) {
			t.Logf("%s %s: does not implement %s", probe.Type(), probe.Name(), c.name)
			continue
		}
		t.Run(c.name, func(t *testing.T) { c.run(t, h) })
	}
	for _, m := range h.SemaphoreModes {
		hm := h
		hm.mode, hm.wakeMode, _ = strings.Cut(m, "/")
		t.Run("Semaphores/mode="+m, func(t *testing.T) { testSemaphores(t, hm) })
		if hasWaiters(probe) {
			t.Run("Waiters/mode="+m, func(t *testing.T) { testWaiters(t, hm) })
		}
	}
}

// fresh creates a fresh, migrated store and returns a handle on it and the
// function that opens more handles.
func fresh(t *testing.T, h Harness) (backends.Backend, func() backends.Backend) {
	t.Helper()
	open := h.New(t)
	b := open()
	if b == nil {
		t.Fatal("backendtest: Harness.New's open returned nil")
	}
	if m, ok := b.(backends.Migrator); ok {
		if err := m.Migrate(t.Context()); err != nil {
			t.Fatalf("migrate: %v", err)
		}
	}
	return b, open
}

// as asserts that b implements T.
func as[T any](t *testing.T, b backends.Backend) T {
	t.Helper()
	v, ok := b.(T)
	if !ok {
		var zero *T
		t.Fatalf("%s backend does not implement %s", b.Type(), reflect.TypeOf(zero).Elem())
	}
	return v
}

// wantErr fails unless err matches target.
func wantErr(t *testing.T, err, target error, what string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got error %v, want %v", what, err, target)
	}
}

// ok fails on err.
func ok(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// pollInterval and waitTimeout bound every wait: poll until the condition
// holds or fail at the deadline, never assert after a fixed sleep.
const (
	pollInterval = 20 * time.Millisecond
	waitTimeout  = 20 * time.Second
)

// waitFor polls cond until it reports true or the deadline passes.
func waitFor(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		done, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: still not true after %v", what, waitTimeout)
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("waiting for %s: %v", what, t.Context().Err())
		case <-time.After(pollInterval):
		}
	}
}

// waitPast waits until the backend clock is strictly after at.
func waitPast(t *testing.T, b backends.Backend, at time.Time) {
	t.Helper()
	waitFor(t, "backend clock to pass "+at.Format(time.RFC3339Nano), func() (bool, error) {
		now, err := b.Now(t.Context())
		return now.After(at), err
	})
}

var ownerSeq atomic.Uint64

// newOwner returns a unique owner token.
func newOwner(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, time.Now().UnixNano(), ownerSeq.Add(1))
}

// jsonEqual compares JSON documents by value, so a backend may reformat.
func jsonEqual(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}
