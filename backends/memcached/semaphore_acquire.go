package memcached

// Acquire: TryAcquire takes a free slot key, then checks the limit.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// TryAcquire takes a free slot key with add, then checks: a grant stands
// only if, read after the add, the config is there in mode lease, the slot
// is below its limit and the live slot keys (this one included) do not
// exceed the limit. Two racing acquirers cannot both pass the check past
// the limit: the later add is read by the later check. A loser expires its
// key and returns ErrNoSlot.
//
// The slot to try comes from this store's last read of the semaphore (its
// hint) when it has one that shows a free slot: then the acquire is incr,
// add, check (3 round trips). Otherwise, or when the hinted slot was taken
// meanwhile, it reads first (4 round trips); a full semaphore costs that
// one read.
func (s *Store) TryAcquire(ctx context.Context, ref backends.SemRef, req backends.AcquireRequest) (backends.Grant, error) {
	name := ref.Name
	if err := s.writable(); err != nil {
		return backends.Grant{}, err
	}
	if ref.IsInstance() {
		return backends.Grant{}, s.semErr("acquire", name, fmt.Errorf("keyed semaphores: %w", backends.ErrUnsupported))
	}
	if err := backends.CheckAcquire(req); err != nil {
		return backends.Grant{}, s.semErr("acquire", name, err)
	}
	if req.Owner == "" {
		return backends.Grant{}, s.semErr("acquire", name, errors.New("empty owner"))
	}
	secs, err := leaseSeconds(req.Lease)
	if err != nil {
		return backends.Grant{}, s.semErr("acquire", name, err)
	}
	if h, ok := s.hint(name); ok {
		if slot := h.freeSlot(); slot >= 0 {
			g, res, err := s.takeSlot(ctx, name, &h.cfg, slot, req, secs, false)
			switch {
			case err != nil:
				return backends.Grant{}, s.semErr("acquire", name, err)
			case res == slotGranted:
				return g, nil
			}
			// Taken meanwhile, or the config changed: the full path.
		}
	}
	r, err := s.read(ctx, name, guessSpan)
	if err != nil {
		return backends.Grant{}, s.semErr("acquire", name, err)
	}
	if r.cfg == nil {
		return backends.Grant{}, s.semErr("acquire", name, backends.ErrNotFound)
	}
	if r.cfg.Mode == spec.ModeCounter {
		return s.counterAcquire(ctx, name, r, req, secs)
	}
	g, err := s.leaseAcquire(ctx, name, r, req, secs)
	if err != nil {
		return backends.Grant{}, s.semErr("acquire", name, err)
	}
	return g, nil
}

func (s *Store) leaseAcquire(ctx context.Context, name string, r *semRead, req backends.AcquireRequest, secs int64) (backends.Grant, error) {
	limit := r.cfg.Limit
	for slot := 0; slot < limit; slot++ {
		if len(r.slots) >= limit {
			return backends.Grant{}, fmt.Errorf("%d of %d held: %w", len(r.slots), limit, backends.ErrNoSlot)
		}
		if r.slots[slot] != nil {
			continue
		}
		g, res, err := s.takeSlot(ctx, name, r.cfg, slot, req, secs, true)
		if err != nil {
			return backends.Grant{}, err
		}
		switch res {
		case slotGranted:
			return g, nil
		case slotTaken:
			r.slots[slot] = &memcache.Item{Key: s.keys.semSlot(name, slot)} // taken meanwhile
			continue
		default:
			return backends.Grant{}, fmt.Errorf("the config changed during the acquire: %w", backends.ErrNoSlot)
		}
	}
	return backends.Grant{}, fmt.Errorf("%d of %d held: %w", len(r.slots), limit, backends.ErrNoSlot)
}

// takeSlot results.
const (
	slotGranted = iota
	slotTaken   // the add found the key: someone holds the slot
	slotChanged // the config vanished, changed mode or put the slot above the limit; backed off
)

// takeSlot tries slot with cfg as last read (or hinted): next fencing
// number, add, then the check after the add. With create unset (the hinted
// path, which has not read the config) a missing fencing key is
// slotChanged rather than re-created. An error other than ErrNoSlot is
// returned as such; ErrNoSlot when the check found the limit exceeded.
func (s *Store) takeSlot(ctx context.Context, name string, cfg *semCfg, slot int, req backends.AcquireRequest, secs int64, create bool) (backends.Grant, int, error) {
	fencing, err := s.nextFencing(ctx, name, create)
	if errors.Is(err, errNoFencing) {
		return backends.Grant{}, slotChanged, nil
	}
	if err != nil {
		return backends.Grant{}, 0, err
	}
	now, err := s.clockFor(ctx, semTag(name))
	if err != nil {
		return backends.Grant{}, 0, err
	}
	h := backends.Holder{
		Slot: slot, Owner: req.Owner, Host: req.Host, PID: req.PID, Fencing: fencing,
		AcquiredAt: time.Unix(now, 0).UTC(), ExpiresAt: time.Unix(now+secs, 0).UTC(),
	}
	key := s.keys.semSlot(name, slot)
	if err := s.trip(ctx); err != nil {
		return backends.Grant{}, 0, err
	}
	err = s.mc.Add(&memcache.Item{Key: key, Value: encodeHolder(h), Expiration: int32(now + secs)})
	if errors.Is(err, memcache.ErrNotStored) {
		return backends.Grant{}, slotTaken, nil
	}
	if err != nil {
		return backends.Grant{}, 0, err
	}
	// The check after the add (with the gen of the own connection just
	// before it: see grantCas).
	gen := s.ownGen(s.sel.pickTag(semTag(name)))
	after, err := s.read(ctx, name, max(cfg.Span, slot+1))
	if err != nil {
		return backends.Grant{}, 0, err
	}
	mine := after.slots[slot]
	if mine == nil {
		return backends.Grant{}, 0, fmt.Errorf("slot %d vanished right after it was taken: %w", slot, backends.ErrNoSlot)
	}
	changed := after.cfg == nil || after.cfg.Mode == spec.ModeCounter || slot >= after.cfg.Limit
	if !changed && len(after.slots) <= after.cfg.Limit {
		s.rememberGrant(name, req.Owner, grantCas{slot: slot, casID: mine.CasID, gen: gen})
		return backends.Grant{Slot: slot, Fencing: fencing, ExpiresAt: h.ExpiresAt}, slotGranted, nil
	}
	mine.Expiration = -1
	if err := s.trip(ctx); err != nil {
		return backends.Grant{}, 0, err
	}
	if err := s.mc.CompareAndSwap(mine); err != nil && !isGone(err) {
		return backends.Grant{}, 0, fmt.Errorf("back off from slot %d: %w", slot, err)
	}
	s.hintFreed(name, slot)
	if changed {
		return backends.Grant{}, slotChanged, nil
	}
	return backends.Grant{}, 0, fmt.Errorf("%d of %d held after a racing acquire: %w", len(after.slots), after.cfg.Limit, backends.ErrNoSlot)
}
