package redis

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// The applied state lives under the {global} hash tag, beside the leader
// lease and the cron schedule, so that one script may touch all of it.
func (k keys) stateLock() string       { return k.global("state:apply-lock") }
func (k keys) stateInventory() string  { return k.global("state:inventory") }
func (k keys) stateLog() string        { return k.global("state:applies") }
func (k keys) stateBySpec() string     { return k.global("state:applies-by-spec") }
func (k keys) stateGeneration() string { return k.global("state:generation") }

// stateLockScript takes or renews the apply lock (lua/state_lock.lua).
var stateLockScript = luaScript("state_lock.lua")

// stateUnlockScript deletes the apply lock only while owner holds it, so a
// stale unlock never frees another owner's lock (lua/state_unlock.lua).
var stateUnlockScript = luaScript("state_unlock.lua")

// stateCommitScript writes one apply atomically, only while owner holds the
// apply lock (lua/state_commit.lua).
var stateCommitScript = luaScript("state_commit.lua")

// stateEntry is an inventory entry as stored, without its generation: the
// commit script puts the generation it assigns in front.
type stateEntry struct {
	Address     spec.Address        `json:"address"`
	Backend     string              `json:"backend"`
	BackendType string              `json:"backend_type"`
	Spec        json.RawMessage     `json:"spec,omitempty"`
	Status      string              `json:"status"`
	Previous    *backends.Placement `json:"previous,omitempty"`
}

// storedEntry is an inventory entry as read back, with its generation.
type storedEntry struct {
	stateEntry
	Generation int64 `json:"generation"`
}

// stateRecord is an apply record as the commit script writes it (numbers
// as strings: Lua's cjson would round them).
type stateRecord struct {
	Generation int64  `json:"generation,string"`
	SpecHash   string `json:"spec_hash"`
	Host       string `json:"host"`
	Summary    string `json:"summary"`
	AtMicros   int64  `json:"at_us,string"`
}

func (r stateRecord) apply() backends.ApplyRecord {
	return backends.ApplyRecord{Generation: r.Generation, SpecHash: r.SpecHash, Host: r.Host, At: timeOfMicros(r.AtMicros), Summary: r.Summary}
}

// stateField is an entry's field in the inventory hash. Kinds never hold a
// colon, so the field is unambiguous whatever the name holds.
func stateField(a spec.Address) string { return string(a.Kind) + ":" + a.Name }

// TryLockApply takes the apply lock for owner for ttl (rounded up to a
// millisecond, Redis's expiry resolution) of the server's clock: when it is
// absent, expired or already owner's (a renewal).
func (s *Store) TryLockApply(ctx context.Context, owner string, ttl time.Duration) (func(context.Context) error, error) {
	if err := s.writable(); err != nil {
		return nil, fmt.Errorf("lock apply: %w", err)
	}
	if owner == "" {
		return nil, errors.New("lock apply: empty owner")
	}
	if ttl < time.Microsecond {
		return nil, fmt.Errorf("lock apply: ttl %v: must be at least 1µs", ttl)
	}
	ms := (ttl + time.Millisecond - 1) / time.Millisecond
	res, err := stateLockScript.Run(ctx, s.rdb, []string{s.keys.stateLock()}, owner, int64(ms)).Slice()
	if err != nil {
		return nil, fmt.Errorf("lock apply: %w", err)
	}
	if n, _ := res[0].(int64); n != 1 {
		holder, _ := res[1].(string)
		left, _ := res[2].(int64)
		return nil, fmt.Errorf("lock apply: held by %q for another %v: %w", holder, time.Duration(left)*time.Millisecond, backends.ErrLocked)
	}
	unlock := func(ctx context.Context) error {
		if err := stateUnlockScript.Run(ctx, s.rdb, []string{s.keys.stateLock()}, owner).Err(); err != nil {
			return fmt.Errorf("unlock apply: %w", err)
		}
		return nil
	}
	return unlock, nil
}

// CommitApply writes the inventory changes and a new apply record in one
// script, only while owner holds the apply lock.
func (s *Store) CommitApply(ctx context.Context, owner string, rec backends.ApplyRecord, put []backends.InventoryEntry, remove []spec.Address) (int64, error) {
	if err := s.writable(); err != nil {
		return 0, fmt.Errorf("commit apply: %w", err)
	}
	args := make([]any, 0, 5+2*len(put)+len(remove))
	args = append(args, owner, rec.SpecHash, rec.Host, rec.Summary, len(put))
	for _, e := range put {
		b, err := json.Marshal(stateEntry{Address: e.Address, Backend: e.Backend, BackendType: e.BackendType,
			Spec: e.Spec, Status: e.Status, Previous: e.Previous})
		if err != nil {
			return 0, fmt.Errorf("commit apply: %s: %w", e.Address, err)
		}
		args = append(args, stateField(e.Address), string(b))
	}
	for _, a := range remove {
		args = append(args, stateField(a))
	}
	keys := []string{s.keys.stateLock(), s.keys.stateGeneration(), s.keys.stateInventory(), s.keys.stateLog(), s.keys.stateBySpec()}
	res, err := stateCommitScript.Run(ctx, s.rdb, keys, args...).Slice()
	if err != nil {
		return 0, fmt.Errorf("commit apply: %w", err)
	}
	if n, _ := res[0].(int64); n != 1 {
		return 0, fmt.Errorf("commit apply: apply lock not held by %q: %w", owner, backends.ErrLost)
	}
	gen, _ := res[1].(int64)
	return gen, nil
}

// LoadState reads the inventory and the last apply record in one MULTI
// (one round trip, one snapshot). A store never written reads as empty.
func (s *Store) LoadState(ctx context.Context) (backends.State, error) {
	var vals *goredis.StringSliceCmd
	var last *goredis.StringCmd
	_, err := s.rdb.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		vals = p.HVals(ctx, s.keys.stateInventory())
		last = p.LIndex(ctx, s.keys.stateLog(), -1)
		return nil
	})
	if err != nil && !errors.Is(err, goredis.Nil) {
		return backends.State{}, fmt.Errorf("load state: %w", err)
	}
	var st backends.State
	for _, v := range vals.Val() {
		var e storedEntry
		if err := json.Unmarshal([]byte(v), &e); err != nil {
			return backends.State{}, fmt.Errorf("load state: inventory entry: %w", err)
		}
		st.Entries = append(st.Entries, backends.InventoryEntry{Address: e.Address,
			Placement: backends.Placement{Backend: e.Backend, BackendType: e.BackendType, Spec: e.Spec},
			Status:    e.Status, Previous: e.Previous, Generation: e.Generation})
	}
	slices.SortFunc(st.Entries, func(a, b backends.InventoryEntry) int {
		return cmp.Or(cmp.Compare(a.Address.Kind, b.Address.Kind), cmp.Compare(a.Address.Name, b.Address.Name))
	})
	if v, err := last.Result(); err == nil {
		var r stateRecord
		if err := json.Unmarshal([]byte(v), &r); err != nil {
			return backends.State{}, fmt.Errorf("load state: last apply record: %w", err)
		}
		a := r.apply()
		st.Last = &a
	} else if !errors.Is(err, goredis.Nil) {
		return backends.State{}, fmt.Errorf("load state: %w", err)
	}
	return st, nil
}

// FindApply returns the latest apply record of specHash (one HGET).
func (s *Store) FindApply(ctx context.Context, specHash string) (backends.ApplyRecord, error) {
	v, err := s.rdb.HGet(ctx, s.keys.stateBySpec(), specHash).Result()
	if errors.Is(err, goredis.Nil) {
		return backends.ApplyRecord{}, fmt.Errorf("find apply: spec hash %.12s: %w", specHash, backends.ErrNotFound)
	}
	if err != nil {
		return backends.ApplyRecord{}, fmt.Errorf("find apply: %w", err)
	}
	var r stateRecord
	if err := json.Unmarshal([]byte(v), &r); err != nil {
		return backends.ApplyRecord{}, fmt.Errorf("find apply: %w", err)
	}
	return r.apply(), nil
}

// timeOfMicros is a time in microseconds since the Unix epoch (the
// scripts' clock, from TIME), in UTC.
func timeOfMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

// microsOfLease is a lease in whole microseconds, at least one.
func microsOfLease(d time.Duration) (int64, error) {
	if d < time.Microsecond {
		return 0, fmt.Errorf("lease %v: must be at least 1µs", d)
	}
	return d.Microseconds(), nil
}

// usArg formats microseconds for a script argument.
func usArg(us int64) string { return strconv.FormatInt(us, 10) }
