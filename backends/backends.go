// Package backends is the contract between coordd and the stores that hold
// its state: the embedded SQLite store, MySQL/MariaDB, Redis and memcached.
//
// A backend is opened from a spec.Backend by the factory in backends/open
// (kept outside this package so that the contract never imports its
// implementations). What a backend can do is expressed as small interfaces
// that callers discover with a type assertion:
//
//	Backend         every backend: name, type, clock, round-trip counter
//	Migrator        SQL backends: numbered, embedded migrations
//	StateStore      the cluster backend: inventory, apply records, apply lock
//	SemaphoreAdmin  reconcile's view of semaphores: observe, put, delete
//	Semaphores      runtime: acquire, extend, release, wait
//	Leader          runtime: the leader lease, scoped to a term
//	CronAdmin       reconcile's view of cron tasks
//	CronPauser      operators: pause and resume a cron task
//	Crons           runtime: claim a due occurrence, extend, finish
//	QueueAdmin      reconcile's view of queues
//	Queues          runtime: push, claim, ack, retry
//	LossGuard       backends that can lose their data silently (Redis)
//	HostRegistry    the cluster backend: each daemon's heartbeat record
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
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/coordd/coordd/spec"
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

// Entry statuses in the inventory.
const (
	// StatusActive: the object is applied as its Spec says.
	StatusActive = "active"
	// StatusDraining: the object was removed from the spec, but holders or
	// running occurrences remain; it admits nobody and is deleted once drained.
	StatusDraining = "draining"
	// StatusReplacing: the object moved to another backend or mode; the new
	// object admits nobody until Previous drains.
	StatusReplacing = "replacing"
)

// Placement is where an applied object lives.
type Placement struct {
	Backend     string          `json:"backend"`
	BackendType string          `json:"backend_type"`
	Spec        json.RawMessage `json:"spec"`
}

// InventoryEntry is one managed object as last applied.
type InventoryEntry struct {
	Address spec.Address `json:"address"`
	Placement
	Status string `json:"status"`
	// Previous is the placement being drained while Status is
	// StatusReplacing.
	Previous *Placement `json:"previous,omitempty"`
	// Generation is the apply generation that last wrote the entry.
	Generation int64 `json:"generation"`
}

// ApplyRecord records one apply.
type ApplyRecord struct {
	Generation int64     `json:"generation"`
	SpecHash   string    `json:"spec_hash"`
	Host       string    `json:"host"`
	At         time.Time `json:"at"`
	Summary    string    `json:"summary"`
}

// State is the applied state kept in the cluster backend.
type State struct {
	Entries []InventoryEntry
	// Last is nil before the first apply.
	Last *ApplyRecord
}

// StateStore holds the inventory and the apply records. The cluster backend
// implements it (memcached cannot).
type StateStore interface {
	// LoadState reads the inventory and the last apply record. A store that
	// was never migrated reads as empty.
	LoadState(ctx context.Context) (State, error)
	// TryLockApply takes the apply lock for owner with a lease of ttl in
	// backend time. It returns ErrLocked while another owner's lease is
	// unexpired. unlock releases only owner's lock.
	TryLockApply(ctx context.Context, owner string, ttl time.Duration) (unlock func(context.Context) error, err error)
	// CommitApply writes the inventory changes and a new apply record
	// atomically, but only while owner still holds the apply lock (ErrLost
	// otherwise). It assigns and returns the new generation.
	CommitApply(ctx context.Context, owner string, rec ApplyRecord, put []InventoryEntry, remove []spec.Address) (int64, error)
	// FindApply returns the latest apply record of specHash, ErrNotFound
	// when that hash was never applied. The daemon uses it to tell a new
	// spec (apply it) from a stale checkout (warn, never apply).
	FindApply(ctx context.Context, specHash string) (ApplyRecord, error)
}

// SemaphoreConfig is a semaphore as the runtime enforces it.
type SemaphoreConfig struct {
	Name string `json:"name"`
	// Limit is the effective limit. It is 0 while the semaphore drains
	// (deleted, or replaced by a new one that must wait).
	Limit int           `json:"limit"`
	Lease time.Duration `json:"lease"`
	Mode  string        `json:"mode"`
	Wake  string        `json:"wake,omitempty"`
	// MaxWaiting < 0 means unbounded.
	MaxWaiting int           `json:"max_waiting"`
	MaxHold    time.Duration `json:"max_hold,omitempty"`
	// Keyed: the semaphore holds no slot of its own; each key given at run
	// time is an instance with this config (instance.go).
	Keyed bool `json:"keyed,omitempty"`
}

// Holder is one held slot.
type Holder struct {
	Slot       int       `json:"slot"`
	Owner      string    `json:"owner"`
	Host       string    `json:"host"`
	PID        int       `json:"pid"`
	Fencing    int64     `json:"fencing"`
	AcquiredAt time.Time `json:"acquired_at"`
	// ExpiresAt is zero for a slot without a lease (MySQL mode session).
	ExpiresAt time.Time `json:"expires_at"`
	// Session is the id of the MySQL connection (processlist id) whose
	// named lock holds the slot, in mode session; 0 otherwise.
	Session int64 `json:"session,omitempty"`
	// Key is the instance's key, for a holder of a keyed semaphore.
	Key string `json:"key,omitempty"`
}

// SemaphoreState is what a backend observes of one semaphore.
type SemaphoreState struct {
	Config SemaphoreConfig `json:"config"`
	// Slots is the number of slots present, free or held.
	Slots int `json:"slots"`
	// Holders lists held slots whose lease has not expired.
	Holders []Holder `json:"holders"`
	// Expired counts held slots whose lease expired; they are free to take.
	Expired int `json:"expired"`
	// Waiters counts live waiter records (backends with Waiters).
	Waiters int `json:"waiters"`
	// Instances lists the live instances of a keyed semaphore by key.
	// Holders and Waiters above count those of every instance too, so that
	// a drain or a replacement waits for them; Slots is then WantSlots().
	Instances []InstanceState `json:"instances,omitempty"`
}

// WantSlots is the number of slots a consistent semaphore has.
func (s *SemaphoreState) WantSlots() int {
	return max(s.Config.Limit, len(s.Holders))
}

// SemaphoreAdmin is reconcile's view of semaphores.
type SemaphoreAdmin interface {
	// ObserveSemaphores observes many semaphores in as few round trips as the
	// backend allows. Absent semaphores are missing from the map.
	ObserveSemaphores(ctx context.Context, names []string) (map[string]*SemaphoreState, error)
	// PutSemaphore creates the semaphore or updates its config, and repairs
	// its slots so that there are max(limit, holders) of them. Idempotent.
	PutSemaphore(ctx context.Context, cfg SemaphoreConfig) error
	// DeleteSemaphore removes a semaphore that has no live holder. With live
	// holders it sets the limit to 0, removes free slots and returns ErrHeld;
	// the holders' slots retire on release. Absent is not an error.
	DeleteSemaphore(ctx context.Context, name string) error
}

// AcquireRequest asks for one slot.
type AcquireRequest struct {
	Owner string // a random owner token, unique per attempt
	Host  string
	PID   int
	Lease time.Duration
}

// Grant is a held slot.
type Grant struct {
	Slot      int
	Fencing   int64
	ExpiresAt time.Time // backend time
}

// Semaphores is the runtime side of semaphores. Every name below may also
// be the reference of an instance of a keyed semaphore (Instance, in
// instance.go): TryAcquire then refuses a plain name of a keyed semaphore
// (ErrKeyRequired) and a reference to one that is not keyed (ErrNotKeyed),
// and checks the key (CheckInstanceKey) before anything is read or written.
type Semaphores interface {
	// TryAcquire takes a free or expired slot without waiting. It returns
	// ErrNoSlot when none is free, ErrNotFound when the semaphore is absent,
	// spec.ErrInvalidHostID when req.Host is neither empty nor a host id
	// (CheckAcquire, before anything is read or written).
	//
	// A backend with Waiters serves its line first come, first served: it
	// grants a slot only while fewer live waiters are ahead of req.Owner in
	// line than slots are free (limit minus live holders), an owner not in
	// line having every live waiter ahead of it, and otherwise returns
	// ErrNoSlot; the check and the grant are one transaction or script, and
	// the grant removes req.Owner's waiter record.
	TryAcquire(ctx context.Context, name string, req AcquireRequest) (Grant, error)
	// Extend renews owner's lease to now+lease in backend time.
	Extend(ctx context.Context, name, owner string, lease time.Duration) (time.Time, error)
	// Release frees owner's slot (or deletes it when the semaphore has more
	// slots than its limit). It returns ErrLost when owner holds nothing.
	Release(ctx context.Context, name, owner string) error
	// Holders lists live holders.
	Holders(ctx context.Context, name string) ([]Holder, error)
}

// Waiters bounds and orders the waiters of a semaphore (max_waiting, FIFO):
// the line that TryAcquire follows. An instance of a keyed semaphore has a
// line of its own, bounded by the semaphore's max_waiting.
type Waiters interface {
	// EnterWait registers owner as a waiter with a lease, at the tail of
	// the line; an owner already in line renews its lease and keeps its
	// place. A record whose lease expired (its waiter crashed) no longer
	// counts, so it holds the line for at most its lease. It returns
	// ErrTooManyWaiters when max_waiting live waiters exist.
	EnterWait(ctx context.Context, name, owner string, lease time.Duration) error
	// LeaveWait removes owner's waiter record, waking whoever that makes
	// it the turn of.
	LeaveWait(ctx context.Context, name, owner string) error
	// WaitSemaphore blocks owner, a waiter in line, until it may be its
	// turn (a slot was freed, a waiter ahead left or its record expired),
	// max elapsed or ctx ended; an owner not in line waits as a newcomer.
	// Backends with a push mechanism (BLPOP, KILL QUERY) wake the waiter
	// whose turn it is; others poll with a bounded backoff. A backend whose
	// slots belong to a connection (MySQL mode session) waits on the
	// connection that will hold the slot and may take the slot already:
	// owner's next TryAcquire then completes that grant, and LeaveWait frees
	// what the wait still holds.
	WaitSemaphore(ctx context.Context, name, owner string, max time.Duration) error
}

// WakeRepairer is implemented by backends whose semaphore waiters sleep in
// the backend until a release wakes them (MySQL: mode lease, and mode
// session with wake kill). A release that never came (its releaser died) or
// a slot the backend freed by itself (a holder's connection died) leaves
// them asleep until their sleep ends; the repair pass wakes them sooner. The
// semaphore package runs it when a caller starts waiting, so a waiter never
// depends on a daemon; the daemon's leader runs it periodically too.
type WakeRepairer interface {
	// RepairWakeups wakes parked waiters of the named semaphores that have
	// a free slot, one per free slot, and returns how many it woke.
	RepairWakeups(ctx context.Context, semaphores []string) (int, error)
}

// HostRetention is how long a host's record outlives its last heartbeat.
// Daemons prune older records (PruneHosts), so a decommissioned server
// vanishes from `coordd status` a day after it last ran.
const HostRetention = 24 * time.Hour

// Host states, derived from a record and the backend's clock (HostRecord.State).
const (
	// HostLive: heartbeats arrive on time.
	HostLive = "live"
	// HostStale: no heartbeat for StaleAfter(HeartbeatEvery): the daemon
	// died, hangs, or cannot reach the backend.
	HostStale = "stale"
	// HostStopped: the daemon shut down cleanly (its last heartbeat said so).
	HostStopped = "stopped"
)

// HostRecord is one daemon's heartbeat in the cluster backend. It is
// informational only: status and metrics read it, nothing decides
// correctness from it (leases, claims and the apply lock do).
type HostRecord struct {
	// Host is the daemon's --host-id: one record per host id.
	Host string `json:"host"`
	// RunID identifies one daemon process (its leader holder id,
	// host/pid/nonce). A heartbeat with a new RunID restarts StartedAt.
	RunID    string `json:"run_id"`
	PID      int    `json:"pid"`
	Version  string `json:"version"`
	SpecHash string `json:"spec_hash"`
	// HeartbeatEvery is the daemon's heartbeat period; readers derive
	// staleness from it, so no reader needs the daemon's configuration.
	HeartbeatEvery time.Duration `json:"heartbeat_every"`
	// Stopped: the daemon's last heartbeat was sent at a clean shutdown.
	Stopped bool `json:"stopped,omitempty"`
	// StartedAt is the backend time of RunID's first heartbeat, LastSeen
	// of its latest; the backend sets both from its own clock and ignores
	// what the caller passes.
	StartedAt time.Time `json:"started_at"`
	LastSeen  time.Time `json:"last_seen"`
}

// StaleAfter is how long a host may go without a heartbeat before it is
// stale: three periods, so that one slow or lost heartbeat is not enough.
func StaleAfter(every time.Duration) time.Duration {
	return 3 * max(every, time.Second)
}

// State is HostLive, HostStale or HostStopped at backend time now.
func (h HostRecord) State(now time.Time) string {
	switch {
	case h.Stopped:
		return HostStopped
	case now.Sub(h.LastSeen) > StaleAfter(h.HeartbeatEvery):
		return HostStale
	}
	return HostLive
}

// Hosts is the host registry as read at one instant.
type Hosts struct {
	// Hosts are sorted by host id.
	Hosts []HostRecord `json:"hosts"`
	// Now is the backend's clock at the read: ages are Now - LastSeen, never
	// computed with the reader's clock.
	Now time.Time `json:"now"`
}

// LiveSpecHashes maps each spec hash that live hosts run to their host
// ids, sorted. More than one key means the hosts disagree: a rollout in
// flight, or a server with a stale checkout.
func (h Hosts) LiveSpecHashes() map[string][]string {
	out := map[string][]string{}
	for _, r := range h.Hosts { // sorted by host, so each list is too
		if r.State(h.Now) == HostLive {
			out[r.SpecHash] = append(out[r.SpecHash], r.Host)
		}
	}
	return out
}

// HostRegistry is implemented by the cluster backends (sqlite, mysql,
// redis). Every daemon heartbeats its record (rarely: one write every 30 s
// by default), and `coordd status` and /metrics read them.
type HostRegistry interface {
	// Heartbeat upserts rec under rec.Host, with LastSeen (and, for a new
	// record or a new RunID, StartedAt) set to backend now. A rec.Host
	// outside spec.CheckHostID is spec.ErrInvalidHostID, with nothing
	// written (CheckHeartbeat).
	Heartbeat(ctx context.Context, rec HostRecord) error
	// ListHosts reads every record and the backend's clock in one read. A
	// store without records (or never migrated) gives none and no error.
	ListHosts(ctx context.Context) (Hosts, error)
	// PruneHosts deletes the records not seen for olderThan of backend
	// time and returns how many it deleted.
	PruneHosts(ctx context.Context, olderThan time.Duration) (int, error)
	// LastApply reads the latest apply record (nil before the first
	// apply): a cheap read for a daemon that compares its spec hash with
	// the applied one, where StateStore.LoadState reads the inventory too.
	LastApply(ctx context.Context) (*ApplyRecord, error)
}

// Term is one holder's tenure of the leader lease.
type Term struct {
	Holder    string    `json:"holder"`
	Term      int64     `json:"term"`
	ExpiresAt time.Time `json:"expires_at"`
}

// Leader is the leader lease.
type Leader interface {
	// ElectLeader takes the lease when it is free or expired, starting a new
	// term with a higher number. It returns ErrNotLeader while another
	// holder's lease is unexpired.
	ElectLeader(ctx context.Context, holder string, lease time.Duration) (Term, error)
	// RenewLeader extends the lease only for exactly t's holder and term.
	RenewLeader(ctx context.Context, t Term, lease time.Duration) (Term, error)
	// ResignLeader ends t early so another host can take over at once.
	ResignLeader(ctx context.Context, t Term) error
	// CurrentLeader returns ErrNotFound when nobody holds an unexpired lease.
	CurrentLeader(ctx context.Context) (Term, error)
}

// CronState is what a backend observes of one cron task.
type CronState struct {
	Name string `json:"name"`
	// Def is the task definition as applied (canonical JSON).
	Def      json.RawMessage `json:"def"`
	NextExec time.Time       `json:"next_exec"`
	// Running counts occurrences whose lease has not expired.
	Running int `json:"running"`
	// Paused is the operator's pause (coordd cron pause), nil when none.
	// A task is paused while it has one or while Def says paused: true
	// (IsPaused).
	Paused *CronPause `json:"paused,omitempty"`
}

// IsPaused reports whether the task is paused, by an operator or by its
// applied definition.
func (c *CronState) IsPaused() bool { return c.Paused != nil || DefPaused(c.Def) }

// CronPause is an operator's pause of one cron task. It is stored beside
// the task's definition, not in it: an apply rewrites the definition and
// keeps the pause; deleting the task drops it.
type CronPause struct {
	// Host is the host id of whoever paused the task.
	Host string `json:"host"`
	// At is the backend's time of the pause.
	At     time.Time `json:"at"`
	Reason string    `json:"reason"`
}

// MaxPauseReason bounds a pause's reason, in bytes.
const MaxPauseReason = 1024

// DefPaused reports whether an applied definition (spec.CronTask as JSON)
// says paused: true. The backends make the same test in their claims.
func DefPaused(def json.RawMessage) bool {
	var d struct {
		Paused bool `json:"paused"`
	}
	return json.Unmarshal(def, &d) == nil && d.Paused
}

// CronPauser is implemented by every backend that holds cron tasks. A
// paused task keeps its definition and its next_exec, which stays at the
// first time missed while paused: once resumed, the missed times follow
// the task's catch_up rule, as after a downtime. ClaimOccurrence refuses a
// paused task's scheduled claims and retries in the claim itself.
type CronPauser interface {
	// PauseCron records an operator's pause of task name by host (a host
	// id) for reason, at backend now. A task already paused by an operator
	// keeps that first pause, which is returned with changed false. An
	// absent task is ErrNotFound.
	PauseCron(ctx context.Context, name, host, reason string) (p CronPause, changed bool, err error)
	// ResumeCron removes the operator's pause of task name and returns it
	// (nil: there was none). paused: true in the definition is the spec's
	// and stays. An absent task is ErrNotFound.
	ResumeCron(ctx context.Context, name string) (*CronPause, error)
}

// CheckPause checks a pause before anything is written: a host id
// (spec.CheckHostID) and a reason of at most MaxPauseReason bytes.
func CheckPause(name, host, reason string) error {
	if name == "" {
		return errors.New("empty task name")
	}
	if err := spec.CheckHostID(host); err != nil {
		return err
	}
	if len(reason) > MaxPauseReason {
		return fmt.Errorf("reason is %d bytes, at most %d", len(reason), MaxPauseReason)
	}
	if !utf8.ValidString(reason) {
		return errors.New("reason is not valid UTF-8")
	}
	return nil
}

// CronAdmin is reconcile's view of cron tasks.
type CronAdmin interface {
	// ObserveCrons observes many tasks; absent ones are missing from the map.
	ObserveCrons(ctx context.Context, names []string) (map[string]*CronState, error)
	// PutCron stores the definition. When resetNext is true (a new task, a
	// schedule or timezone change, a repair) it also sets next_exec. An
	// operator's pause of the task is kept.
	PutCron(ctx context.Context, name string, def json.RawMessage, next time.Time, resetNext bool) error
	// DeleteCron removes the task, and an operator's pause of it with it.
	// Running occurrences keep their rows and finish; absent is not an
	// error.
	DeleteCron(ctx context.Context, name string) error
}

// DueTask is a task whose next_exec is at or before backend now.
type DueTask struct {
	Name     string
	Def      json.RawMessage
	NextExec time.Time
}

// Occurrence is one attempt of one scheduled time of one task. The triple
// (Task, ScheduledAt, Attempt) is unique in the backend: that row, not the
// leader, is what keeps two hosts from starting the same attempt.
type Occurrence struct {
	Task        string    `json:"task"`
	ScheduledAt time.Time `json:"scheduled_at"`
	// Attempt counts from 1; a retry is a new attempt of the same time.
	Attempt int    `json:"attempt"`
	RunID   string `json:"run_id"`
	// Fencing is strictly increasing per task across all runs.
	Fencing   int64     `json:"fencing"`
	Owner     string    `json:"owner"`
	Host      string    `json:"host"`
	Manual    bool      `json:"manual,omitempty"`
	StartedAt time.Time `json:"started_at"`
	ExpiresAt time.Time `json:"expires_at"` // the run lease, backend time
}

// Run statuses.
const (
	RunRunning   = "running"
	RunSucceeded = "succeeded"
	RunFailed    = "failed"
	RunTimedOut  = "timeout"
	RunLost      = "lost"    // its host died mid-run
	RunSkipped   = "skipped" // overlap forbid, catch_up none, semaphore busy
)

// RunResult is how an occurrence ended.
type RunResult struct {
	Status   string `json:"status"`
	ExitCode int    `json:"exit_code"`
	Error    string `json:"error,omitempty"`
	// Output is the tail of the run's stdout and stderr (at most 64 KiB).
	Output []byte `json:"-"`
}

// Run is one row of a task's history.
type Run struct {
	Occurrence
	RunResult
	FinishedAt time.Time `json:"finished_at"`
}

// ClaimRequest asks to start (or skip) one attempt.
type ClaimRequest struct {
	Task string
	// ScheduledAt is the due next_exec being claimed. For attempt 1 of a
	// scheduled run the claim is a compare-and-swap on it.
	ScheduledAt time.Time
	// Next is next_exec after this claim (attempt 1, not manual).
	Next    time.Time
	Attempt int
	Owner   string
	Host    string
	Lease   time.Duration
	// Manual: `coordd cron run`. No compare-and-swap; ScheduledAt is
	// ignored and the backend's now is used.
	Manual bool
	// Skip, when not empty, records the occurrence as skipped with this
	// reason (and still advances next_exec) instead of starting it.
	Skip string
	// Exclusive (overlap forbid): the claim is made only while no
	// occurrence of the task holds a live run lease, checked in the same
	// transaction or script as the claim; otherwise it is ErrHeld and
	// nothing is written. Ignored with Skip.
	Exclusive bool
}

// ClaimResult is the outcome of one request of ClaimOccurrences: the
// occurrence, or the error ClaimOccurrence would have returned.
type ClaimResult struct {
	Occurrence Occurrence
	Err        error
}

// Extension asks to renew one run lease (ExtendOccurrences).
type Extension struct {
	Occurrence Occurrence
	Lease      time.Duration
}

// ExtendResult is the outcome of one Extension: the new expiry, or the
// error ExtendOccurrence would have returned.
type ExtendResult struct {
	ExpiresAt time.Time
	Err       error
}

// Finish is one result to record (FinishOccurrences).
type Finish struct {
	Occurrence Occurrence
	Result     RunResult
}

// Crons is the runtime side of the scheduler.
type Crons interface {
	// DueTasks lists tasks whose next_exec is at or before backend now,
	// earliest first, and the earliest next_exec of the others (zero when
	// none) so that the scheduler can sleep until then. Paused tasks are
	// not listed (their next_exec may still count as the earliest: a
	// scheduler then wakes once for nothing).
	DueTasks(ctx context.Context, limit int) (due []DueTask, nextAt time.Time, err error)
	// ClaimOccurrence records the occurrence leased to Owner and bumps the
	// task's fencing counter, atomically:
	//
	//   - attempt 1 of a scheduled run moves next_exec from ScheduledAt to
	//     Next (a compare-and-swap: ErrConflict when it moved);
	//   - attempt > 1 (of a scheduled or, with Manual, a manual run)
	//     requires attempt-1 of the same ScheduledAt to have ended failed,
	//     timeout or lost (ErrConflict otherwise) and leaves next_exec alone;
	//   - attempt 1 of a manual run is scheduled at backend now, moved
	//     forward by a microsecond at a time past any existing attempt 1 or
	//     the pending next_exec it would collide with, and leaves next_exec
	//     alone.
	//
	// While the task is paused (CronPauser, or paused: true in its stored
	// definition), every claim but attempt 1 of a manual run (a scheduled
	// run, a skip, a retry) is ErrPaused and writes nothing, next_exec
	// included: the pause is read in the same transaction or script as the
	// claim. A manual run is an operator's own decision and is not refused.
	//
	// With Skip the occurrence is recorded as skipped and finished, without
	// a lease, and the task's history is trimmed. An existing occurrence
	// with the same key is ErrConflict (another host claimed it first); an
	// absent task is ErrNotFound; with Exclusive, a live run of the task
	// is ErrHeld.
	ClaimOccurrence(ctx context.Context, req ClaimRequest) (Occurrence, error)
	// ClaimOccurrences makes many claims in one round trip and one commit
	// (a burst of due tasks must not pay one store write per task). Each
	// request, except a manual one (ErrUnsupported: those are claimed one
	// at a time), follows ClaimOccurrence's rules and gets the result
	// ClaimOccurrence would have given, the requests being decided in the
	// order given, atomically each; concurrent claimers, batched or not,
	// never claim one occurrence twice. The returned slice has one result
	// per request. A non-nil error is about the call as a whole: no claim
	// may be relied on (as with a ClaimOccurrence whose answer was lost,
	// one that was made anyway is reaped when its run lease expires).
	ClaimOccurrences(ctx context.Context, reqs []ClaimRequest) ([]ClaimResult, error)
	// ExtendOccurrence renews Owner's run lease (ErrLost otherwise).
	ExtendOccurrence(ctx context.Context, occ Occurrence, lease time.Duration) (time.Time, error)
	// ExtendOccurrences renews many run leases in one round trip, each
	// under ExtendOccurrence's rules, with one result per extension; a
	// non-nil error is about the call as a whole (no lease may be taken
	// as renewed).
	ExtendOccurrences(ctx context.Context, exts []Extension) ([]ExtendResult, error)
	// FinishOccurrence records the result if occ.Owner still holds the run
	// (ErrLost otherwise), and trims history to the task's history_limit.
	FinishOccurrence(ctx context.Context, occ Occurrence, res RunResult) error
	// FinishOccurrences records many results in as few round trips and
	// commits as the backend allows, each under FinishOccurrence's rules,
	// with one error per finish (nil: recorded); a non-nil error is about
	// the call as a whole (no result may be taken as recorded).
	FinishOccurrences(ctx context.Context, fins []Finish) ([]error, error)
	// ExpiredOccurrences lists running occurrences whose run lease expired:
	// their host was lost.
	ExpiredOccurrences(ctx context.Context, limit int) ([]Occurrence, error)
	// ReapOccurrence marks an expired running occurrence as lost, only if it
	// is still running and expired (ErrConflict otherwise).
	ReapOccurrence(ctx context.Context, occ Occurrence) error
	// Running lists task's occurrences whose run lease is live.
	Running(ctx context.Context, task string) ([]Occurrence, error)
	// History lists task's runs, newest first.
	History(ctx context.Context, task string, limit int) ([]Run, error)
	// PendingRetries lists, across all tasks, the latest attempt of each
	// (task, scheduled_at) when it ended failed, timeout or lost and no
	// higher attempt exists, earliest finished first, up to limit
	// (non-positive: all), without output. Manual runs are included. The
	// caller decides from the task's max_attempts, retry_backoff and
	// on_host_loss whether to claim attempt+1. A run trimmed away by
	// history_limit is no longer listed.
	PendingRetries(ctx context.Context, limit int) ([]Run, error)
}

// QueueConfig is a queue as the runtime enforces it.
type QueueConfig struct {
	Name              string        `json:"name"`
	Partitions        int           `json:"partitions"`
	VisibilityTimeout time.Duration `json:"visibility_timeout"`
	MaxAttempts       int           `json:"max_attempts"`
	RetryBackoff      time.Duration `json:"retry_backoff"`
	Timeout           time.Duration `json:"timeout,omitempty"`
	Unique            string        `json:"unique"`
	MaxPayload        int64         `json:"max_payload"`
	Claim             string        `json:"claim"`
}

// QueueState is what a backend observes of one queue.
type QueueState struct {
	Config QueueConfig `json:"config"`
	// PartitionsPresent counts partition lock rows (or lists) present.
	PartitionsPresent int `json:"partitions_present"`
	// Ready counts the jobs waiting to be claimed, the Delayed ones
	// included; ReadyNow is what the CLI and /metrics call ready.
	Ready    int64 `json:"ready"`
	InFlight int64 `json:"in_flight"`
	Dead     int64 `json:"dead"`
	// Delayed counts ready jobs whose available_at is in the future.
	Delayed int64 `json:"delayed"`
	// OldestReady is the enqueue time of the oldest ready job (zero: none).
	OldestReady time.Time `json:"oldest_ready"`
	// NextDelayed is when the first Delayed job becomes available (zero:
	// none), for `queue work --drain` to say what it waits for.
	NextDelayed time.Time `json:"next_delayed,omitempty"`
	// Stranded counts jobs in partitions at or above Config.Partitions.
	Stranded int64 `json:"stranded"`
}

// Jobs is the number of jobs a queue holds in any state.
func (q *QueueState) Jobs() int64 { return q.Ready + q.InFlight + q.Dead }

// ReadyNow counts the ready jobs that are available now: Ready without the
// Delayed ones (a delayed push, a retry in its backoff). A job waiting
// behind an earlier job of its key counts here too. coordd status, queue
// stats and coordd_queue_ready all report this number.
func (q *QueueState) ReadyNow() int64 { return q.Ready - q.Delayed }

// QueueAdmin is reconcile's view of queues.
type QueueAdmin interface {
	// ObserveQueues observes many queues; absent ones are missing from the map.
	ObserveQueues(ctx context.Context, names []string) (map[string]*QueueState, error)
	// PutQueue creates or updates the queue and its partitions. Jobs in
	// partitions that no longer exist move into the remaining ones in the
	// same transaction, so none is lost. It returns how many moved.
	PutQueue(ctx context.Context, cfg QueueConfig) (moved int64, err error)
	// DeleteQueue removes the queue; with jobs left it returns ErrHasJobs
	// unless force. Absent is not an error.
	DeleteQueue(ctx context.Context, name string, force bool) error
}

// PayloadLimiter is implemented by a backend whose server bounds one job's
// payload below spec.MaxPayloadCap whatever coordd does (MySQL's
// max_allowed_packet, Redis's proto-max-bulk-len). Plan checks each queue's
// max_payload against it, so that a queue never promises to take payloads
// that every push would fail to store. A backend without it takes any
// payload up to spec.MaxPayloadCap.
type PayloadLimiter interface {
	// MaxPayload is the largest payload, in bytes, that a push stores and
	// a claim reads back with the server configured as it is now.
	MaxPayload(ctx context.Context) (int64, error)
}

// Job is one queued job.
type Job struct {
	ID        int64  `json:"id"`
	Queue     string `json:"queue"`
	Partition int    `json:"partition"`
	Payload   []byte `json:"-"`
	// Key picks the partition and is the unique key when the queue has
	// unique set.
	Key         string    `json:"key,omitempty"`
	Attempt     int       `json:"attempt"`
	EnqueuedAt  time.Time `json:"enqueued_at"`
	AvailableAt time.Time `json:"available_at"`
	Owner       string    `json:"-"`          // set while claimed
	ExpiresAt   time.Time `json:"expires_at"` // visibility deadline while claimed
	LastError   string    `json:"last_error,omitempty"`
}

// PushRequest enqueues one job.
type PushRequest struct {
	Payload []byte
	// Key: jobs with one key run one at a time in push order (see
	// Queues.Claim); empty spreads jobs over the partitions. With unique, a
	// second push of a key returns the existing job and ErrDuplicate.
	Key   string
	Delay time.Duration
}

// Queues is the runtime side of queues.
type Queues interface {
	// Push enqueues a job (ErrPayloadTooLarge, ErrNotFound; ErrDuplicate
	// with the existing job). It first runs CheckPush: a key outside
	// spec.CheckKey is spec.ErrInvalidKey, with nothing written.
	Push(ctx context.Context, queue string, req PushRequest) (Job, error)
	// Claim takes up to max claimable jobs, oldest (lowest id: push order)
	// first, whatever their partition, each leased to owner for the queue's
	// visibility timeout and counted as an attempt. A job whose visibility
	// expired is ready again; one whose attempts are used up moves to the
	// dead set instead. No job and no error when none is claimable.
	//
	// A ready job is claimable once its available_at has passed, except a
	// job with a key (claim partition), which is claimable only while no
	// job of its key is in flight and no ready job of its key (delayed ones
	// included) is older: the jobs of one key run one at a time, in push
	// order, and a claim takes at most one of them. A retried job keeps its
	// id, so the next job of its key waits through its backoff; an expired
	// lease keeps the key until a claim sweeps it, and the job then comes
	// first; a dead job no longer holds its key. MySQL's claim skip_locked
	// orders nothing: it takes available jobs in (available_at, id) order
	// and ignores keys.
	Claim(ctx context.Context, queue, owner string, max int) ([]Job, error)
	// Ack deletes a finished job if j.Owner still holds it (ErrLost).
	Ack(ctx context.Context, j Job) error
	// Retry returns a failed job to the queue after the queue's
	// retry_backoff, or moves it to the dead set when its attempts are used
	// up, if j.Owner still holds it (ErrLost).
	Retry(ctx context.Context, j Job, reason string) error
	// ExtendJob renews j.Owner's visibility lease (ErrLost).
	ExtendJob(ctx context.Context, j Job) (time.Time, error)
	// ReturnJob puts a job j.Owner still holds (ErrLost) back as ready now,
	// in its place in its partition, with the attempt its claim counted
	// taken back and last_error kept: the job was never tried (a worker
	// whose command cannot start). A job never goes to the dead set here.
	ReturnJob(ctx context.Context, j Job) error
	// WaitQueue blocks until a job may be ready, max elapsed or ctx ended.
	WaitQueue(ctx context.Context, queue string, max time.Duration) error
	// Dead lists dead jobs, oldest first.
	Dead(ctx context.Context, queue string, limit int) ([]Job, error)
	// RequeueDead makes every dead job ready again with attempts reset.
	RequeueDead(ctx context.Context, queue string) (int64, error)
	// PurgeDead deletes every dead job.
	PurgeDead(ctx context.Context, queue string) (int64, error)
}
