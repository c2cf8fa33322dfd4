package backends

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/coordd/coordd/spec"
)

// Keyed semaphores (per data key: one runs, one waits, the rest are
// dropped, for each user id or file). A semaphore applied with
// SemaphoreConfig.Keyed holds no slot of its own. Each key given at run
// time is an instance of it: its own holders and its own line of waiters,
// under the semaphore's limit, max_waiting, lease and max_hold. An instance
// exists only while it has a live holder or a waiter: the first TryAcquire
// or EnterWait of a key creates it and the Release or LeaveWait that leaves
// it idle removes it, each in the one transaction or script that makes the
// change, so that no row or key of an idle instance is left behind and no
// caller sees a half-made or half-removed instance. The config and the
// fencing counter are the semaphore's, read (and bumped) in that same
// transaction or script: a new limit reaches live instances at once
// (lowering it evicts nobody), a removal drains them, and fencing numbers
// grow strictly across every instance of the semaphore, so across the
// removal and re-creation of one instance too.
//
// The Semaphores and Waiters methods name a semaphore, or an instance of a
// keyed one, by a SemRef. Backends that cannot hold keyed semaphores
// refuse Keyed in PutSemaphore with ErrUnsupported (memcached, and MySQL's
// mode session; docs/spec.md says why).

// Sentinel errors of keyed semaphores.
var (
	// ErrKeyRequired: a keyed semaphore was acquired without a key.
	ErrKeyRequired = errors.New("the semaphore is keyed: give a key")
	// ErrNotKeyed: a key was given for a semaphore that is not keyed.
	ErrNotKeyed = errors.New("the semaphore is not keyed: give no key")
)

// SemRef names what the Semaphores and Waiters methods act on: semaphore
// Name itself when Key is empty, else the instance of keyed semaphore
// Name for Key. It is comparable, so that it can key a map.
type SemRef struct {
	Name string
	Key  string
}

// IsInstance reports whether r names an instance of a keyed semaphore.
func (r SemRef) IsInstance() bool { return r.Key != "" }

// String renders r for a message: `"name"` or `"name" key "key"`.
func (r SemRef) String() string {
	if r.IsInstance() {
		return fmt.Sprintf("%q key %q", r.Name, r.Key)
	}
	return fmt.Sprintf("%q", r.Name)
}

// CheckInstanceKey checks the key of an instance: not empty, and within
// spec.CheckKey's rule (spec.CheckSemaphoreKey, spec.ErrInvalidKey). The
// semaphore package runs it before any backend is touched, and each
// backend first thing when an instance is created (TryAcquire, EnterWait).
func CheckInstanceKey(key string) error { return spec.CheckSemaphoreKey(key) }

// InstanceState is one live instance of a keyed semaphore: one with a live
// holder or a live waiter.
type InstanceState struct {
	Key     string   `json:"key"`
	Holders []Holder `json:"holders"`
	Waiters int      `json:"waiters"`
}

// SortInstances sorts instances by key, and each one's holders by slot.
func SortInstances(is []InstanceState) {
	slices.SortFunc(is, func(a, b InstanceState) int { return strings.Compare(a.Key, b.Key) })
	for _, i := range is {
		slices.SortFunc(i.Holders, func(a, b Holder) int { return a.Slot - b.Slot })
	}
}
