package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// semKeyNames are the parts of a semaphore's keys, in the order of the
// scripts' KEYS (see semaphore_scripts.go).
var semKeyNames = [...]string{"cfg", "free", "exp", "holders", "fencing", "wake", "wseq", "wexp", "lock"}

// semaphore returns the keys of semaphore name, in the scripts' order.
func (k keys) semaphore(name string) []string {
	out := make([]string, len(semKeyNames))
	for i, part := range semKeyNames {
		out[i] = k.object("sem", name, part)
	}
	return out
}

// semInterrupt is a waiter's private list: pushing to it ends the waiter's
// BLPOP (cancellation).
func (k keys) semInterrupt(name, id string) string {
	return k.object("sem", name, "int:"+id)
}

// Positions of keys in keys.semaphore.
const (
	semKeyFree    = 1
	semKeyExp     = 2
	semKeyHold    = 3
	semKeyFencing = 4
	semKeyWake    = 5
	semKeyWseq    = 6
	semKeyLock    = 8
)

// semWaiterWake is the wake list of one waiter in line (wkey in the
// scripts): the wseq key, ":" and the owner, after the hash tag.
func semWaiterWake(keys []string, owner string) string { return keys[semKeyWseq] + ":" + owner }

// semState is what a Store keeps for its semaphores: the keys of the
// semaphores it used (building them costs more than a script's server
// time), and the client for blocking calls (waiters.go), created on first
// use.
type semState struct {
	keys   sync.Map // name -> *semEntry
	nkeys  atomic.Int32
	mu     sync.Mutex
	block  *goredis.Client
	turns  chan struct{} // one per blocking connection
	closed bool
}

// semEntry is what a Store keeps of one semaphore.
type semEntry struct {
	keys []string // keys.semaphore; never modified once stored
	fast []string // fencing and lock: KEYS of semFastAcquireScript
	lock []string // lock: KEYS of semFastReleaseScript
	// tokens is set once the semaphore was seen without the one-slot mode:
	// its acquires go to semAcquireScript first. Only a hint (either
	// script sends the other kind of semaphore to the other).
	tokens atomic.Bool
}

// semKeyCacheMax bounds the key cache (names come from the spec, but the
// Go API accepts any).
const semKeyCacheMax = 4096

// semEntry returns what the Store keeps of semaphore name, cached.
func (s *Store) semEntry(name string) *semEntry {
	if v, ok := s.sems.keys.Load(name); ok {
		return v.(*semEntry)
	}
	k := s.keys.semaphore(name)
	e := &semEntry{keys: k, fast: []string{k[semKeyFencing], k[semKeyLock]}, lock: []string{k[semKeyLock]}}
	if s.sems.nkeys.Load() < semKeyCacheMax {
		v, loaded := s.sems.keys.LoadOrStore(name, e)
		if !loaded {
			s.sems.nkeys.Add(1)
		}
		e = v.(*semEntry)
	}
	return e
}

// semKeys returns the keys of semaphore name, cached. Callers must not
// modify the slice.
func (s *Store) semKeys(name string) []string { return s.semEntry(name).keys }

// semLockTTL is the one-slot lock's key TTL in ms for a lease: the lease in
// whole ms (rounded down: the lock's TTL never outlasts the lease it
// records) plus semLockGrace.
func semLockTTL(d time.Duration) int64 { return d.Milliseconds() + semLockGrace.Milliseconds() }

// semLockGrace is how long a one-slot lock outlives its lease: GRACE_MS
// in lua/lib/sem_consts.lua.
const semLockGrace = time.Hour

// semOwnerArg is the owner as the one-slot scripts take it: its length, a
// space and itself, so that a prefix comparison matches one owner only.
func semOwnerArg(owner string) string { return strconv.Itoa(len(owner)) + " " + owner }

// parseLockGrant reads the grant from a one-slot record ("<flag><ownerArg>
// <fencing> <acquired µs> <expiry µs> <pid> <host>").
func parseLockGrant(rec, ownerArg string) (backends.Grant, bool) {
	if len(rec) < 1+len(ownerArg)+1 {
		return backends.Grant{}, false
	}
	rest := rec[1+len(ownerArg)+1:]
	var f [3]int64
	for i := range f {
		field, tail, _ := strings.Cut(rest, " ")
		n, err := strconv.ParseInt(field, 10, 64)
		if err != nil {
			return backends.Grant{}, false
		}
		f[i], rest = n, tail
	}
	return backends.Grant{Slot: 0, Fencing: f[0], ExpiresAt: fromMicros(f[2])}, true
}

// semMicros validates a lease and returns it in µs.
func semMicros(d time.Duration) (int64, error) {
	if d <= 0 {
		return 0, fmt.Errorf("lease %v is not positive", d)
	}
	return max(d.Microseconds(), 1), nil
}

// semErr wraps an error of operation op on semaphore name.
func (s *Store) semErr(op, name string, err error) error {
	return fmt.Errorf("redis %q: %s semaphore %q: %w", s.name, op, name, err)
}

// PutSemaphore creates the semaphore or updates its config, and repairs its
// tokens to max(limit, live holders) in the same script.
func (s *Store) PutSemaphore(ctx context.Context, cfg backends.SemaphoreConfig) error {
	if err := s.writable(); err != nil {
		return err
	}
	switch {
	case cfg.Name == "":
		return errors.New("put semaphore: empty name")
	case cfg.Limit < 0:
		return s.semErr("put", cfg.Name, fmt.Errorf("negative limit %d", cfg.Limit))
	case cfg.Mode != "" && cfg.Mode != spec.ModeLease:
		return s.semErr("put", cfg.Name, fmt.Errorf("mode %q: %w", cfg.Mode, backends.ErrUnsupported))
	}
	keyed := "0"
	if cfg.Keyed {
		keyed = "1"
	}
	err := semPutScript.Run(ctx, s.rdb, s.semAdminKeys(cfg.Name), s.keys.instBase(cfg.Name),
		cfg.Limit, int64(cfg.Lease), cfg.Mode, cfg.Wake, max(cfg.MaxWaiting, -1), int64(cfg.MaxHold), keyed).Err()
	if err != nil {
		return s.semErr("put", cfg.Name, err)
	}
	return nil
}

// DeleteSemaphore removes the semaphore when nobody holds it. Otherwise it
// drains it: limit 0, free tokens gone, ErrHeld; held slots retire on
// release.
func (s *Store) DeleteSemaphore(ctx context.Context, name string) error {
	if err := s.writable(); err != nil {
		return err
	}
	live, err := semDeleteScript.Run(ctx, s.rdb, s.semAdminKeys(name), s.keys.instBase(name)).Int64()
	if err != nil {
		return s.semErr("delete", name, err)
	}
	if live > 0 {
		return s.semErr("delete", name, fmt.Errorf("%d live holders: %w", live, backends.ErrHeld))
	}
	return nil
}

// TryAcquire takes a free token (or reclaims an expired one) unless the live
// holders reach the limit or it is not req.Owner's turn in line (fewer live
// waiters ahead of it than free slots; a caller not in line has every
// waiter ahead of it). The grant takes req.Owner out of the line. A
// one-slot semaphore (semaphore_scripts.go) takes semFastAcquireScript,
// any other semAcquireScript; each sends the other kind to the other
// script, so the Store's hint of which is which only saves a round trip.
func (s *Store) TryAcquire(ctx context.Context, ref backends.SemRef, req backends.AcquireRequest) (backends.Grant, error) {
	name := ref.Name
	if err := s.writable(); err != nil {
		return backends.Grant{}, err
	}
	if err := s.loss.held(); err != nil {
		return backends.Grant{}, s.semErr("acquire", name, err)
	}
	if ref.IsInstance() {
		return s.instAcquire(ctx, name, ref.Key, req)
	}
	if err := backends.CheckAcquire(req); err != nil {
		return backends.Grant{}, s.semErr("acquire", name, err)
	}
	if req.Owner == "" {
		return backends.Grant{}, s.semErr("acquire", name, errors.New("empty owner"))
	}
	us, err := semMicros(req.Lease)
	if err != nil {
		return backends.Grant{}, s.semErr("acquire", name, err)
	}
	e := s.semEntry(name)
	var ownerArg string
	// A semaphore that changes kind between the two scripts' runs (a put
	// in between) sends the caller back once more; a bound keeps a
	// pathological flapping from looping.
	for range 4 {
		var v []int64
		if e.tokens.Load() {
			v, err = semAcquireScript.Run(ctx, s.rdb, e.keys, req.Owner, req.Host, req.PID, us).Int64Slice()
		} else {
			if ownerArg == "" {
				ownerArg = semOwnerArg(req.Owner)
			}
			var res any
			res, err = semFastAcquireScript.Run(ctx, s.rdb, e.fast, ownerArg, strconv.Itoa(req.PID)+" "+req.Host, semLockTTL(req.Lease), us).Result()
			if rec, ok := res.(string); ok && err == nil {
				if g, ok := parseLockGrant(rec, ownerArg); ok {
					return g, nil
				}
				return backends.Grant{}, s.semErr("acquire", name, fmt.Errorf("malformed grant %q", rec))
			}
			if err == nil {
				v, err = int64s(res)
			}
		}
		if err != nil {
			return backends.Grant{}, s.semErr("acquire", name, err)
		}
		if len(v) > 0 && v[0] == -7 {
			e.tokens.Store(!e.tokens.Load())
			continue
		}
		return s.acquireReply(name, v)
	}
	return backends.Grant{}, s.semErr("acquire", name, errors.New("the semaphore kept changing between its one-slot and token forms"))
}

// acquireReply reads the reply of either acquire script.
func (s *Store) acquireReply(name string, v []int64) (backends.Grant, error) {
	if len(v) == 0 {
		return backends.Grant{}, s.semErr("acquire", name, errors.New("empty reply"))
	}
	at := func(i int) int64 {
		if i < len(v) {
			return v[i]
		}
		return 0
	}
	var err error
	switch code := v[0]; {
	case code >= 0:
		return backends.Grant{Slot: int(code), Fencing: at(1), ExpiresAt: fromMicros(at(2))}, nil
	case code == -1:
		err = backends.ErrNotFound
	case code == -2:
		err = fmt.Errorf("%d of %d held: %w", at(1), at(2), backends.ErrNoSlot)
	case code == -3:
		err = fmt.Errorf("%d of %d held, but only %d free tokens (drift until the semaphore is repaired): %w", at(1), at(2), max(at(3), 0), backends.ErrNoSlot)
	case code == -4:
		err = fmt.Errorf("%d waiters ahead in line for %d free slots: %w", at(1), max(at(2), 0), backends.ErrNoSlot)
	case code == -6:
		err = backends.ErrKeyRequired
	default:
		err = fmt.Errorf("unexpected reply %v", v)
	}
	return backends.Grant{}, s.semErr("acquire", name, err)
}

// int64s reads a script's array reply of integers.
func int64s(res any) ([]int64, error) {
	a, ok := res.([]any)
	if !ok {
		return nil, fmt.Errorf("unexpected reply %v", res)
	}
	out := make([]int64, len(a))
	for i, x := range a {
		n, ok := x.(int64)
		if !ok {
			return nil, fmt.Errorf("unexpected reply %v", res)
		}
		out[i] = n
	}
	return out, nil
}

// Extend renews owner's lease to now+lease; ErrLost once it has expired.
func (s *Store) Extend(ctx context.Context, ref backends.SemRef, owner string, lease time.Duration) (time.Time, error) {
	name := ref.Name
	if err := s.writable(); err != nil {
		return time.Time{}, err
	}
	if ref.IsInstance() {
		return s.instExtend(ctx, name, ref.Key, owner, lease)
	}
	us, err := semMicros(lease)
	if err != nil {
		return time.Time{}, s.semErr("extend", name, err)
	}
	exp, err := semExtendScript.Run(ctx, s.rdb, s.semKeys(name), owner, us, semLockTTL(lease)).Int64()
	if err != nil {
		return time.Time{}, s.semErr("extend", name, err)
	}
	if exp < 0 {
		return time.Time{}, s.semErr("extend", name, backends.ErrLost)
	}
	return fromMicros(exp), nil
}

// Release frees owner's slot, or retires it when the semaphore has more
// slots than max(limit, live holders). A slot whose lease had expired (and
// was not yet reclaimed) is cleared too, but the call returns ErrLost: the
// caller's hold was not exclusive to the end. The script of the kind the
// Store saw last goes first; an owner it does not find is looked for with
// the other (a stale release, a semaphore that changed kind).
func (s *Store) Release(ctx context.Context, ref backends.SemRef, owner string) error {
	name := ref.Name
	if err := s.writable(); err != nil {
		return err
	}
	if ref.IsInstance() {
		return s.instRelease(ctx, name, ref.Key, owner)
	}
	e := s.semEntry(name)
	tokens := e.tokens.Load()
	for range 2 {
		var code int64
		var err error
		if tokens {
			var v []int64
			v, err = semReleaseScript.Run(ctx, s.rdb, e.keys, owner).Int64Slice()
			if err == nil {
				code = v[0]
			}
		} else {
			code, err = semFastReleaseScript.Run(ctx, s.rdb, e.lock, semOwnerArg(owner)).Int64()
		}
		if err != nil {
			return s.semErr("release", name, err)
		}
		switch code {
		case 1:
			return nil
		case 0:
			return s.semErr("release", name, fmt.Errorf("lease had expired: %w", backends.ErrLost))
		}
		tokens = !tokens
	}
	return s.semErr("release", name, backends.ErrLost)
}

// Holders lists live holders by slot; an absent semaphore has none. Those
// of a keyed semaphore's instances follow, by key and slot; an instance
// reference lists the instance's.
func (s *Store) Holders(ctx context.Context, ref backends.SemRef) ([]backends.Holder, error) {
	name := ref.Name
	if ref.IsInstance() {
		return s.instHolders(ctx, name, ref.Key)
	}
	v, err := semObserveScript.Run(ctx, s.rdb, s.semAdminKeys(name), s.keys.instBase(name)).Slice()
	if err != nil {
		return nil, s.semErr("holders", name, err)
	}
	st, err := parseSemState(name, v)
	if err != nil || st == nil {
		return nil, err
	}
	return st.Holders, nil
}

// ObserveSemaphores reads many semaphores in one pipeline of one script per
// semaphore (each atomic on its own), so in one round trip.
func (s *Store) ObserveSemaphores(ctx context.Context, names []string) (map[string]*backends.SemaphoreState, error) {
	out := make(map[string]*backends.SemaphoreState, len(names))
	if len(names) == 0 {
		return out, nil
	}
	run := func() ([]*goredis.Cmd, error) {
		pipe := s.rdb.Pipeline()
		cmds := make([]*goredis.Cmd, len(names))
		for i, n := range names {
			cmds[i] = semObserveScript.EvalSha(ctx, pipe, s.semAdminKeys(n), s.keys.instBase(n))
		}
		_, err := pipe.Exec(ctx)
		return cmds, err
	}
	cmds, err := run()
	if err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
		// The script cache was empty (first use, a restart, SCRIPT FLUSH).
		if err = semObserveScript.Load(ctx, s.rdb).Err(); err == nil {
			cmds, err = run()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("redis %q: observe semaphores: %w", s.name, err)
	}
	for i, n := range names {
		v, err := cmds[i].Slice()
		if err != nil {
			return nil, s.semErr("observe", n, err)
		}
		st, err := parseSemState(n, v)
		if err != nil {
			return nil, err
		}
		if st != nil {
			out[n] = st
		}
	}
	return out, nil
}

// parseSemState reads semObserveScript's reply; nil when absent.
func parseSemState(name string, v []any) (*backends.SemaphoreState, error) {
	if len(v) == 0 || toInt(v[0]) == 0 {
		return nil, nil
	}
	malformed := fmt.Errorf("observe semaphore %q: malformed reply of %d values", name, len(v))
	if len(v) < 12 || len(v) < 12+3*int(toInt(v[11])) {
		return nil, malformed
	}
	num := func(i int) int64 {
		n, _ := strconv.ParseInt(toString(v[i]), 10, 64)
		return n
	}
	st := &backends.SemaphoreState{
		Config: backends.SemaphoreConfig{
			Name: name, Limit: int(num(1)), Lease: time.Duration(num(2)), Mode: toString(v[3]),
			Wake: toString(v[4]), MaxWaiting: int(num(5)), MaxHold: time.Duration(num(6)),
		},
		Slots: int(toInt(v[7])), Expired: int(toInt(v[8])), Waiters: int(toInt(v[9])),
	}
	st.Config.Keyed = toString(v[10]) == "1"
	// holders reads n triples (slot, expiry, record) from v[i:].
	holders := func(i, n int, key string) ([]backends.Holder, int, error) {
		var hs []backends.Holder
		for ; n > 0; n-- {
			if i+3 > len(v) {
				return nil, i, malformed
			}
			h, err := parseHolder(toString(v[i+2]))
			if err != nil {
				return nil, i, fmt.Errorf("observe semaphore %q: slot %d: %w", name, toInt(v[i]), err)
			}
			h.Slot, h.ExpiresAt, h.Key = int(toInt(v[i])), fromMicros(toInt(v[i+1])), key
			hs = append(hs, h)
			i += 3
		}
		slices.SortFunc(hs, func(a, b backends.Holder) int { return a.Slot - b.Slot })
		return hs, i, nil
	}
	hs, i, err := holders(12, int(toInt(v[11])), "")
	if err != nil {
		return nil, err
	}
	st.Holders = hs
	for i < len(v) {
		if i+3 > len(v) {
			return nil, malformed
		}
		is := backends.InstanceState{Key: toString(v[i]), Waiters: int(toInt(v[i+1]))}
		if is.Holders, i, err = holders(i+3, int(toInt(v[i+2])), is.Key); err != nil {
			return nil, err
		}
		if len(is.Holders) == 0 && is.Waiters == 0 {
			continue // only expired records, not yet pruned
		}
		st.Instances = append(st.Instances, is)
		st.Holders = append(st.Holders, is.Holders...)
		st.Waiters += is.Waiters
	}
	if st.Config.Keyed {
		backends.SortInstances(st.Instances)
		st.Slots = st.WantSlots()
	}
	return st, nil
}

// parseHolder reads a holder record: "<fencing> <acquired µs> <pid>
// <len(owner)> <owner><host>".
func parseHolder(rec string) (backends.Holder, error) {
	var h backends.Holder
	var f [4]int64
	rest := rec
	for i := range f {
		field, tail, ok := strings.Cut(rest, " ")
		n, err := strconv.ParseInt(field, 10, 64)
		if !ok || err != nil {
			return h, fmt.Errorf("malformed holder record %q", rec)
		}
		f[i], rest = n, tail
	}
	if f[3] < 0 || f[3] > int64(len(rest)) {
		return h, fmt.Errorf("malformed holder record %q", rec)
	}
	h.Fencing, h.AcquiredAt, h.PID = f[0], fromMicros(f[1]), int(f[2])
	h.Owner, h.Host = rest[:f[3]], rest[f[3]:]
	return h, nil
}
