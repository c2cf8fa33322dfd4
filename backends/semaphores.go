package backends

import (
	"context"
	"time"
)

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

// Semaphores is the semaphores a backend holds: reconcile's view
// (observe, put, delete) and the runtime's (acquire, extend, release). The
// runtime methods name a semaphore or an instance of a keyed one by a
// SemRef (instance.go): TryAcquire refuses the semaphore itself of a keyed
// semaphore (ErrKeyRequired) and an instance of one that is not keyed
// (ErrNotKeyed), and checks the key (CheckInstanceKey) before anything is
// read or written.
type Semaphores interface {
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

	// TryAcquire takes a free or expired slot without waiting. It returns
	// ErrNoSlot when none is free, ErrNotFound when the semaphore is absent,
	// spec.ErrInvalidHostID when req.Host is neither empty nor a host id
	// (CheckAcquire, before anything is read or written).
	//
	// A backend with a line (Waiters) serves it first come, first served: it
	// grants a slot only while fewer live waiters are ahead of req.Owner in
	// line than slots are free (limit minus live holders), an owner not in
	// line having every live waiter ahead of it, and otherwise returns
	// ErrNoSlot; the check and the grant are one transaction or script, and
	// the grant removes req.Owner's waiter record.
	TryAcquire(ctx context.Context, ref SemRef, req AcquireRequest) (Grant, error)
	// Extend renews owner's lease to now+lease in backend time.
	Extend(ctx context.Context, ref SemRef, owner string, lease time.Duration) (time.Time, error)
	// Release frees owner's slot (or deletes it when the semaphore has more
	// slots than its limit). It returns ErrLost when owner holds nothing.
	Release(ctx context.Context, ref SemRef, owner string) error
	// Holders lists live holders.
	Holders(ctx context.Context, ref SemRef) ([]Holder, error)

	// Waiters is the semaphores' lines of waiters, nil on a backend that
	// keeps none (memcached: a caller then polls TryAcquire).
	Waiters() Waiters
}

// Waiters bounds and orders the waiters of a semaphore (max_waiting, FIFO):
// the line that TryAcquire follows, and that operators see (the dashboard,
// coordd status: ListWaiters). An instance of a keyed semaphore has a line
// of its own, bounded by the semaphore's max_waiting.
type Waiters interface {
	// EnterWait registers req.Owner as a waiter with a waiter lease of
	// req.Lease, at the tail of the line; an owner already in line renews
	// its lease and keeps its place. A record whose lease expired (its
	// waiter crashed) no longer counts, so it holds the line for at most
	// its lease. It records req.Host and req.PID and, on entry, the
	// backend's now as Since, for ListWaiters; req.Host is checked as
	// TryAcquire checks it (CheckAcquire). It returns ErrTooManyWaiters
	// when max_waiting live waiters exist.
	EnterWait(ctx context.Context, ref SemRef, req AcquireRequest) error
	// LeaveWait removes owner's waiter record, waking whoever that makes
	// it the turn of.
	LeaveWait(ctx context.Context, ref SemRef, owner string) error
	// WaitSemaphore blocks owner, a waiter in line, until it may be its
	// turn (a slot was freed, a waiter ahead left or its record expired),
	// max elapsed or ctx ended; an owner not in line waits as a newcomer.
	// Backends with a push mechanism (BLPOP, KILL QUERY) wake the waiter
	// whose turn it is; others poll with a bounded backoff. A backend whose
	// slots belong to a connection (MySQL mode session) waits on the
	// connection that will hold the slot and may take the slot already:
	// owner's next TryAcquire then completes that grant, and LeaveWait frees
	// what the wait still holds.
	WaitSemaphore(ctx context.Context, ref SemRef, owner string, max time.Duration) error
	// ListWaiters lists the live waiters of ref in line order, expired
	// records left out, never their owner tokens. For a keyed semaphore
	// itself (no key) it lists the waiters of every instance, by key and
	// then place. An absent semaphore has none.
	ListWaiters(ctx context.Context, ref SemRef) ([]Waiter, error)
}

// WakeRepairer is implemented by backends whose semaphore waiters sleep in
// the backend until a release wakes them (MySQL: mode lease, and mode
// session with wake kill). A release that never came (its releaser died) or
// a slot the backend freed by itself (a holder's connection died) leaves
// them asleep until their sleep ends; the repair pass wakes them sooner. The
// semaphore package runs it when a caller starts waiting, so a waiter never
// depends on a daemon; the daemon's leader runs it periodically too.
type WakeRepairer interface {
	// RepairWakeups wakes parked waiters of the semaphores and instances
	// refs that have a free slot, one per free slot, and returns how many
	// it woke.
	RepairWakeups(ctx context.Context, refs []SemRef) (int, error)
}
