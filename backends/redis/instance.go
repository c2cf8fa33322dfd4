package redis

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/coordd/coordd/backends"
)

// Instances of keyed semaphores: see instance_scripts.go and lua/inst_*.lua
// for the keys and the scripts, backends/instance.go for the rules.

// plainKey matches instance keys written into key names as they are; any
// other key appears as '=' and its bytes in hex (enc_key in
// lua/lib/inst_observe.lua does the same in Lua), so no key produces key
// syntax or collides with another (a plain key never holds '=').
var plainKey = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// encodeKey is an instance key as it appears inside a key name.
func encodeKey(key string) string {
	if plainKey.MatchString(key) {
		return key
	}
	return "=" + hex.EncodeToString([]byte(key))
}

// instIndex is the index of the live instances of semaphore name.
func (k keys) instIndex(name string) string { return k.object("sem", name, "inst") }

// instBase is the prefix of the keys of every instance of semaphore name.
func (k keys) instBase(name string) string { return k.object("sem", name, "i:") }

// instance returns the keys of the instance of semaphore name for key, in
// the order of the instance scripts' KEYS.
func (k keys) instance(name, key string) []string {
	part := "i:" + encodeKey(key) + ":"
	return []string{
		k.object("sem", name, "cfg"), k.object("sem", name, "fencing"), k.instIndex(name),
		k.object("sem", name, part+"exp"), k.object("sem", name, part+"hold"),
		k.object("sem", name, part+"wseq"), k.object("sem", name, part+"wexp"),
	}
}

// Position of the line's key in keys.instance.
const instKeyWseq = 5

// semAdminKeys are the keys of the admin scripts (put, delete, observe):
// the semaphore's and the index of its instances.
func (s *Store) semAdminKeys(name string) []string {
	k := s.semKeys(name)
	out := make([]string, 0, len(k)+1)
	return append(append(out, k...), s.keys.instIndex(name))
}

// instErr is semErr for an instance.
func (s *Store) instErr(op, name, key string, err error) error {
	return fmt.Errorf("redis %q: %s semaphore %s: %w", s.name, op, backends.SemRef{Name: name, Key: key}.String(), err)
}

func (s *Store) instAcquire(ctx context.Context, name, key string, req backends.AcquireRequest) (backends.Grant, error) {
	if err := backends.CheckInstanceKey(key); err != nil {
		return backends.Grant{}, s.instErr("acquire", name, key, err)
	}
	if err := backends.CheckAcquire(req); err != nil {
		return backends.Grant{}, s.instErr("acquire", name, key, err)
	}
	if req.Owner == "" {
		return backends.Grant{}, s.instErr("acquire", name, key, errors.New("empty owner"))
	}
	us, err := semMicros(req.Lease)
	if err != nil {
		return backends.Grant{}, s.instErr("acquire", name, key, err)
	}
	v, err := instAcquireScript.Run(ctx, s.rdb, s.keys.instance(name, key), key, req.Owner, req.Host, req.PID, us).Int64Slice()
	if err != nil {
		return backends.Grant{}, s.instErr("acquire", name, key, err)
	}
	switch code := v[0]; {
	case code >= 0:
		return backends.Grant{Slot: int(code), Fencing: v[1], ExpiresAt: fromMicros(v[2])}, nil
	case code == -1:
		err = backends.ErrNotFound
	case code == -5:
		err = backends.ErrNotKeyed
	case code == -2:
		err = fmt.Errorf("%d of %d held: %w", v[1], v[2], backends.ErrNoSlot)
	case code == -4:
		err = fmt.Errorf("%d waiters ahead in line for %d free slots: %w", v[1], max(v[2], 0), backends.ErrNoSlot)
	default:
		err = fmt.Errorf("unexpected reply %v", v)
	}
	return backends.Grant{}, s.instErr("acquire", name, key, err)
}

func (s *Store) instExtend(ctx context.Context, name, key, owner string, lease time.Duration) (time.Time, error) {
	us, err := semMicros(lease)
	if err != nil {
		return time.Time{}, s.instErr("extend", name, key, err)
	}
	exp, err := instExtendScript.Run(ctx, s.rdb, s.keys.instance(name, key), key, owner, us).Int64()
	if err != nil {
		return time.Time{}, s.instErr("extend", name, key, err)
	}
	if exp < 0 {
		return time.Time{}, s.instErr("extend", name, key, backends.ErrLost)
	}
	return fromMicros(exp), nil
}

func (s *Store) instRelease(ctx context.Context, name, key, owner string) error {
	v, err := instReleaseScript.Run(ctx, s.rdb, s.keys.instance(name, key), key, owner).Int64Slice()
	if err != nil {
		return s.instErr("release", name, key, err)
	}
	switch v[0] {
	case 1:
		return nil
	case 0:
		return s.instErr("release", name, key, fmt.Errorf("lease had expired: %w", backends.ErrLost))
	default:
		return s.instErr("release", name, key, backends.ErrLost)
	}
}

// instHolders lists an instance's live holders, from an observation of
// its semaphore.
func (s *Store) instHolders(ctx context.Context, name, key string) ([]backends.Holder, error) {
	m, err := s.ObserveSemaphores(ctx, []string{name})
	if err != nil {
		return nil, err
	}
	if st := m[name]; st != nil {
		for _, i := range st.Instances {
			if i.Key == key {
				return i.Holders, nil
			}
		}
	}
	return nil, nil
}

func (s *Store) instEnterWait(ctx context.Context, name, key string, req backends.AcquireRequest) error {
	owner, lease := req.Owner, req.Lease
	if err := backends.CheckInstanceKey(key); err != nil {
		return s.instErr("enter wait", name, key, err)
	}
	if owner == "" {
		return s.instErr("enter wait", name, key, errors.New("empty owner"))
	}
	us, err := semMicros(lease)
	if err != nil {
		return s.instErr("enter wait", name, key, err)
	}
	v, err := instEnterWaitScript.Run(ctx, s.rdb, s.keys.instance(name, key), key, owner, us, req.Host, req.PID).Int64Slice()
	if err != nil {
		return s.instErr("enter wait", name, key, err)
	}
	switch v[0] {
	case 0, 1:
		return nil
	case -1:
		return s.instErr("enter wait", name, key, backends.ErrNotFound)
	case -5:
		return s.instErr("enter wait", name, key, backends.ErrNotKeyed)
	default:
		return s.instErr("enter wait", name, key, fmt.Errorf("%d of %d waiting: %w", v[1], v[2], backends.ErrTooManyWaiters))
	}
}

func (s *Store) instLeaveWait(ctx context.Context, name, key, owner string) error {
	if err := instLeaveWaitScript.Run(ctx, s.rdb, s.keys.instance(name, key), key, owner).Err(); err != nil {
		return s.instErr("leave wait", name, key, err)
	}
	return nil
}

func (s *Store) instFirstWaiter(ctx context.Context, name, key string) (string, error) {
	owner, err := instFirstWaiterScript.Run(ctx, s.rdb, s.keys.instance(name, key), key).Text()
	if err != nil {
		return "", s.instErr("first waiter", name, key, err)
	}
	return owner, nil
}

// instPollMax bounds the wait of a caller that is not in an instance's
// line (it never called EnterWait): nobody pushes to it, so it looks again
// this often.
const instPollMax = 100 * time.Millisecond

// instWait is WaitSemaphore for an instance: as for a semaphore, a waiter
// in line blocks on its own wake list until a release (or a waiter ahead
// that leaves, or a higher limit) makes it its turn, or the next event
// comes due. A caller not in line polls.
func (s *Store) instWait(ctx context.Context, name, key, owner string, maxWait time.Duration) error {
	start := time.Now()
	ks := s.keys.instance(name, key)
	v, err := instWaitCheckScript.Run(ctx, s.rdb, ks, key, owner).Int64Slice()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return s.instErr("wait", name, key, err)
	}
	if v[0] == 1 {
		return nil
	}
	d := min(maxWait-time.Since(start), semBlockMax)
	if v[1] >= 0 {
		d = min(d, time.Duration(v[1])*time.Microsecond+time.Millisecond)
	}
	if d <= 0 {
		return nil
	}
	if len(v) < 3 || v[2] != 1 {
		return sleepCtx(ctx, min(d, instPollMax))
	}
	return s.blockOn(ctx, name, ks[instKeyWseq]+":"+owner, d, nil)
}

// sleepCtx sleeps d or until ctx ends (its error).
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
