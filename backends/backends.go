// Package backends is the contract between coordd and the stores that hold
// its state: the embedded SQLite store, MySQL/MariaDB, Redis and memcached.
//
// A backend is opened from a spec.Backend by the factory in backends/open
// (kept outside this package so that the contract never imports its
// implementations). Every backend is a Backend, which hands out the areas
// it holds, one interface each, and nil for an area it does not hold:
//
//	Cluster     the cluster backend: inventory, apply records and lock,
//	            host registry, leader lease (Leader)
//	Semaphores  observe, put, delete; acquire, extend, release; its line
//	            of waiters (Waiters, nil on a backend without one)
//	Crons       observe, put, delete, pause; claim, extend, finish, reap
//	Queues      observe, put, delete; push, claim, ack, retry; dead jobs
//
// sqlite, mysql, postgres and redis hold all four; memcached holds
// semaphores only, without a line. A few capabilities only some backends
// have are small interfaces that callers discover with a type assertion on
// the Backend:
//
//	Migrator        SQL backends: numbered, embedded migrations
//	WakeRepairer    backends whose waiters sleep in the server (MySQL)
//	LossGuard       backends that can lose their data silently (Redis, memcached)
//	PayloadLimiter  backends whose server bounds a payload (MySQL, Redis)
//
// The contract is split into files by area: backends.go (Backend, Migrator,
// the sentinel errors), state.go and cluster.go (Cluster), semaphores.go,
// cron.go and queues.go, and beside them the rules every store shares.
//
// Rules every implementation follows, and that backends/backendtest checks:
//
//   - Time is the backend's. Every lease expiry and due-time comparison is made
//     against the backend's clock (Now), never the host's.
//   - Extend and release name the owner token; a call whose token no longer
//     holds the lease changes nothing and returns ErrLost.
//   - A semaphore never admits more holders than its stored limit. Slots are
//     identified by small integers. The number of slots is max(limit, held):
//     lowering the limit deletes free slots at once and retires held ones when
//     they are released, so nobody is evicted and nobody above the new limit is
//     admitted.
//   - Fencing numbers are strictly increasing per semaphore across all holders.
//   - Names are data. They are bound as query parameters or hashed into keys,
//     never spliced into SQL text or key syntax.
package backends

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Sentinel errors that callers test with errors.Is.
var (
	// ErrNotFound: the object does not exist in the backend.
	ErrNotFound = errors.New("not found")
	// ErrNoSchema: a SQL store holds no coordd schema yet (nothing was
	// applied to it); a write refuses rather than create tables behind
	// apply's back.
	ErrNoSchema = errors.New("schema not migrated")
	// ErrSchemaOld: a SQL store's schema was migrated by an older binary
	// only; this one reads columns it lacks until apply or a daemon
	// migrates it.
	ErrSchemaOld = errors.New("schema older than this binary")
	// ErrNoSlot: a semaphore had no free slot (or its limit is 0).
	ErrNoSlot = errors.New("no free slot")
	// ErrTooManyWaiters: max_waiting waiters are already queued.
	ErrTooManyWaiters = errors.New("max_waiting reached")
	// ErrLost: the owner token no longer holds the lease (expired, taken
	// over, retired or deleted).
	ErrLost = errors.New("lease lost")
	// ErrHeld: the object still has holders or running occurrences, so it
	// cannot be removed yet (or, for an Exclusive claim, a run of the task
	// is still live).
	ErrHeld = errors.New("still held")
	// ErrHasJobs: a queue still holds jobs.
	ErrHasJobs = errors.New("queue still holds jobs")
	// ErrLocked: another owner holds the apply lock.
	ErrLocked = errors.New("locked by another owner")
	// ErrNotLeader: another host holds an unexpired leader lease, or the
	// caller's term is over.
	ErrNotLeader = errors.New("not the leader")
	// ErrConflict: a compare-and-swap lost (for example another host claimed
	// the same occurrence first).
	ErrConflict = errors.New("conflict")
	// ErrDuplicate: a job with the same unique key is already pending.
	ErrDuplicate = errors.New("duplicate job")
	// ErrPayloadTooLarge: a job payload exceeds the queue's max_payload.
	ErrPayloadTooLarge = errors.New("payload too large")
	// ErrUnsupported: the backend cannot hold this kind or mode.
	ErrUnsupported = errors.New("not supported by this backend")
	// ErrSchemaTooNew: the schema was migrated by a newer binary that
	// declared this binary too old to use it.
	ErrSchemaTooNew = errors.New("schema is newer than this binary supports")
	// ErrPaused: the cron task is paused (an operator's pause, or paused:
	// true in its applied definition), so a scheduled occurrence or a retry
	// of it is not claimed.
	ErrPaused = errors.New("cron task is paused")
)

// Options are given to the factory when a backend is opened.
type Options struct {
	// ReadOnly opens without creating anything: plan and validate use it.
	// A missing store then looks empty rather than failing.
	ReadOnly bool
	// Version is the binary's version, recorded by migrations.
	Version string
	// Durable: the operator states that the backend loses no write it
	// acknowledged, across a restart or a failover (Redis with appendfsync
	// always and no replicas to fail over to). A restart then holds no
	// semaphore (LossGuard).
	Durable bool
	// PollWake: idle queue workers poll instead of waiting for the
	// server's notifications (PostgreSQL behind PgBouncer in transaction
	// mode, where LISTEN does not work): spec wake: poll.
	PollWake bool
}

// Backend is implemented by every backend.
type Backend interface {
	// Name is the name the spec gave the backend.
	Name() string
	// Type is one of the spec.Type* constants.
	Type() string
	// Now returns the backend's clock in UTC. It costs one round trip on
	// networked backends.
	Now(ctx context.Context) (time.Time, error)
	// RoundTrips counts requests sent to the backend since it was opened.
	RoundTrips() uint64
	Close() error

	// Cluster is the cluster's state, hosts and leader lease; nil when the
	// backend cannot be the cluster backend (memcached).
	Cluster() Cluster
	// Semaphores is nil when the backend holds no semaphores.
	Semaphores() Semaphores
	// Crons is nil when the backend holds no cron tasks (memcached).
	Crons() Crons
	// Queues is nil when the backend holds no queues (memcached).
	Queues() Queues
}

// SchemaInfo describes a SQL backend's migration state.
type SchemaInfo struct {
	// Version is the highest applied migration, 0 when none is.
	Version int
	// Latest is the highest migration this binary embeds.
	Latest int
	// MinBinary is the oldest coordd version that may use the schema.
	MinBinary string
}

// SchemaCurrent returns nil when a store at schema version v can be read by
// a binary that embeds latest migrations, and an error wrapping
// ErrSchemaOld that says what to do when it cannot.
func SchemaCurrent(v, latest int) error {
	if v >= latest {
		return nil
	}
	return fmt.Errorf("%w: store at version %d, this coordd reads version %d; run coordd apply (a starting daemon also migrates it)", ErrSchemaOld, v, latest)
}

// Migrator is implemented by backends with a schema.
type Migrator interface {
	// Schema reports the migration state without changing anything.
	Schema(ctx context.Context) (SchemaInfo, error)
	// Migrate applies pending migrations. It returns ErrSchemaTooNew when a
	// newer binary has declared this one too old.
	Migrate(ctx context.Context) error
}
