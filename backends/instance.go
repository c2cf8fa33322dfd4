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
// The Semaphores and Waiters methods name an instance by the reference
// Instance(name, key) in place of a semaphore name. The separator is a
// control character, which neither names nor keys may hold
// (spec.CheckKey), so a reference splits back exactly. Backends that
// cannot hold keyed semaphores refuse Keyed in PutSemaphore with
// ErrUnsupported (memcached, and MySQL's mode session; docs/spec.md says
// why).

// instanceSep separates a semaphore's name from a key in a reference.
const instanceSep = "\x1f"

// Sentinel errors of keyed semaphores.
var (
	// ErrKeyRequired: a keyed semaphore was acquired without a key.
	ErrKeyRequired = errors.New("the semaphore is keyed: give a key")
	// ErrNotKeyed: a key was given for a semaphore that is not keyed.
	ErrNotKeyed = errors.New("the semaphore is not keyed: give no key")
)

// Instance is the reference of the instance of keyed semaphore name for
// key, to pass as the name of the Semaphores and Waiters methods.
func Instance(name, key string) string { return name + instanceSep + key }

// SplitInstance splits an instance reference into the semaphore's name and
// the key; ok is false for a plain semaphore name.
func SplitInstance(ref string) (name, key string, ok bool) {
	return strings.Cut(ref, instanceSep)
}

// CheckInstanceKey checks the key of an instance: not empty, and within
// spec.CheckKey's rule (spec.CheckSemaphoreKey, spec.ErrInvalidKey). The
// semaphore package runs it before any backend is touched, and each
// backend first thing when an instance is created (TryAcquire, EnterWait).
func CheckInstanceKey(key string) error { return spec.CheckSemaphoreKey(key) }

// DescribeRef renders a semaphore name or an instance reference for a
// message: `"name"` or `"name" key "key"`.
func DescribeRef(ref string) string {
	if name, key, ok := SplitInstance(ref); ok {
		return fmt.Sprintf("%q key %q", name, key)
	}
	return fmt.Sprintf("%q", ref)
}

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
