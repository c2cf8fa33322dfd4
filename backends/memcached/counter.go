package memcached

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/coordd/coordd/backends"
)

// Mode counter is the memcached counter mutex as published: the gate is
// one counter key, ctr.
// An acquirer increments it; the one whose increment returns 1 holds the
// semaphore, every other decrements it again and fails. Release decrements.
// The counter expires with the holder's lease (absolute server time; Extend
// touches it), so that a dead holder does not wedge it forever.
//
// The hold key is bookkeeping only (owner, host, pid, fencing, expiry, for
// Holders and for owner-checked Extend and Release); it is written with
// set, not add, because the counter alone decides who holds.
//
// Its weak points are real and tested (counter_test.go):
//   - With an expiry, the counter can let two holders in: an acquirer whose
//     increment lands before the counter expires and whose decrement lands
//     after it was re-created pushes the new counter down, and the next
//     increment returns 1 again while the first new holder still holds.
//   - A caller that dies between its increment and its decrement leaves the
//     counter one too high: after the holder releases, nobody's increment
//     returns 1 until the counter expires (without an expiry: forever).
//
// Mode lease has neither weakness; it is the default and the recommended
// mode.

// counterHook, when set (tests only), runs after a losing increment and
// before its decrement; returning false abandons the call there, as a
// caller that died would.
var counterHook func(name string) bool

func (s *Store) counterAcquire(ctx context.Context, name string, r *semRead, req backends.AcquireRequest, secs int64) (backends.Grant, error) {
	fail := func(err error) (backends.Grant, error) { return backends.Grant{}, s.semErr("acquire", name, err) }
	if r.cfg.Limit < 1 {
		return fail(fmt.Errorf("limit 0: %w", backends.ErrNoSlot))
	}
	now, err := s.clockFor(ctx, semTag(name))
	if err != nil {
		return fail(err)
	}
	key := s.keys.semCtr(name)
	var n uint64
	for range 3 {
		if err := s.trip(ctx); err != nil {
			return fail(err)
		}
		n, err = s.mc.Increment(key, 1)
		if !errors.Is(err, memcache.ErrCacheMiss) {
			break
		}
		// No counter (first use, expired, evicted): create it at 0.
		if err := s.trip(ctx); err != nil {
			return fail(err)
		}
		if err := s.mc.Add(&memcache.Item{Key: key, Value: []byte("0"), Expiration: int32(now + secs)}); err != nil && !errors.Is(err, memcache.ErrNotStored) {
			return fail(err)
		}
	}
	if err != nil {
		return fail(err)
	}
	if n != 1 {
		if counterHook != nil && !counterHook(name) {
			return fail(errors.New("abandoned after the increment (test hook)"))
		}
		if err := s.trip(ctx); err != nil {
			return fail(err)
		}
		if _, err := s.mc.Decrement(key, 1); err != nil && !errors.Is(err, memcache.ErrCacheMiss) {
			return fail(err)
		}
		return fail(fmt.Errorf("counter at %d: %w", n, backends.ErrNoSlot))
	}
	fencing, err := s.nextFencing(ctx, name, true)
	if err != nil {
		return fail(err)
	}
	h := backends.Holder{
		Slot: 0, Owner: req.Owner, Host: req.Host, PID: req.PID, Fencing: fencing,
		AcquiredAt: time.Unix(now, 0).UTC(), ExpiresAt: time.Unix(now+secs, 0).UTC(),
	}
	if err := s.trip(ctx); err != nil {
		return fail(err)
	}
	if err := s.mc.Set(&memcache.Item{Key: s.keys.semHold(name), Value: encodeHolder(h), Expiration: int32(now + secs)}); err != nil {
		return fail(err)
	}
	// The counter expires with this lease.
	if err := s.trip(ctx); err != nil {
		return fail(err)
	}
	if err := s.mc.Touch(key, int32(now+secs)); err != nil {
		if errors.Is(err, memcache.ErrCacheMiss) {
			return fail(fmt.Errorf("counter vanished right after the grant: %w", backends.ErrNoSlot))
		}
		return fail(err)
	}
	return backends.Grant{Slot: 0, Fencing: fencing, ExpiresAt: h.ExpiresAt}, nil
}

// counterHolder is the holder record while the counter exists.
func (r *semRead) counterHolder() (backends.Holder, bool) {
	if r.hold == nil || r.ctr == nil {
		return backends.Holder{}, false
	}
	h, err := decodeHolder(r.hold.Value)
	return h, err == nil
}

func (s *Store) counterExtend(ctx context.Context, name, owner string, r *semRead, secs int64) (time.Time, error) {
	h, ok := r.counterHolder()
	if !ok || h.Owner != owner {
		return time.Time{}, s.semErr("extend", name, backends.ErrLost)
	}
	now, err := s.clockFor(ctx, semTag(name))
	if err != nil {
		return time.Time{}, s.semErr("extend", name, err)
	}
	h.ExpiresAt = time.Unix(now+secs, 0).UTC()
	r.hold.Value, r.hold.Expiration = encodeHolder(h), int32(now+secs)
	if err := s.trip(ctx); err != nil {
		return time.Time{}, s.semErr("extend", name, err)
	}
	if err := s.mc.CompareAndSwap(r.hold); err != nil {
		if isGone(err) {
			return time.Time{}, s.semErr("extend", name, backends.ErrLost)
		}
		return time.Time{}, s.semErr("extend", name, err)
	}
	if err := s.trip(ctx); err != nil {
		return time.Time{}, s.semErr("extend", name, err)
	}
	if err := s.mc.Touch(s.keys.semCtr(name), int32(now+secs)); err != nil {
		if errors.Is(err, memcache.ErrCacheMiss) {
			return time.Time{}, s.semErr("extend", name, fmt.Errorf("counter vanished: %w", backends.ErrLost))
		}
		return time.Time{}, s.semErr("extend", name, err)
	}
	return h.ExpiresAt, nil
}

func (s *Store) counterRelease(ctx context.Context, name, owner string, r *semRead) error {
	h, ok := r.counterHolder()
	if !ok || h.Owner != owner {
		return s.semErr("release", name, backends.ErrLost)
	}
	r.hold.Expiration = -1
	if err := s.trip(ctx); err != nil {
		return s.semErr("release", name, err)
	}
	if err := s.mc.CompareAndSwap(r.hold); err != nil {
		if isGone(err) {
			return s.semErr("release", name, backends.ErrLost)
		}
		return s.semErr("release", name, err)
	}
	if err := s.trip(ctx); err != nil {
		return s.semErr("release", name, err)
	}
	if _, err := s.mc.Decrement(s.keys.semCtr(name), 1); err != nil && !errors.Is(err, memcache.ErrCacheMiss) {
		return s.semErr("release", name, err)
	}
	return nil
}
