package memcached

// A holder's lease: Extend and Release, each a compare-and-swap on the
// owner's slot key.

import (
	"context"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// Extend renews owner's slot key with gets + cas: new expiry in the record
// and as the key's TTL. A vanished key (expired, evicted, restart) or a
// changed one is ErrLost.
func (s *Store) Extend(ctx context.Context, ref backends.SemRef, owner string, lease time.Duration) (time.Time, error) {
	name := ref.Name
	if err := s.writable(); err != nil {
		return time.Time{}, err
	}
	if ref.IsInstance() { // never granted here (TryAcquire)
		return time.Time{}, s.semErr("extend", name, backends.ErrLost)
	}
	secs, err := leaseSeconds(lease)
	if err != nil {
		return time.Time{}, s.semErr("extend", name, err)
	}
	s.takeGrant(name, owner) // the cas below changes the cas id kept
	r, err := s.read(ctx, name, guessSpan)
	if err != nil {
		return time.Time{}, s.semErr("extend", name, err)
	}
	if r.cfg != nil && r.cfg.Mode == spec.ModeCounter {
		return s.counterExtend(ctx, name, owner, r, secs)
	}
	it, h, ok := r.findOwner(owner)
	if !ok {
		return time.Time{}, s.semErr("extend", name, backends.ErrLost)
	}
	now, err := s.clockFor(ctx, semTag(name))
	if err != nil {
		return time.Time{}, s.semErr("extend", name, err)
	}
	h.ExpiresAt = time.Unix(now+secs, 0).UTC()
	it.Value, it.Expiration = encodeHolder(h), int32(now+secs)
	if err := s.trip(ctx); err != nil {
		return time.Time{}, s.semErr("extend", name, err)
	}
	if err := s.mc.CompareAndSwap(it); err != nil {
		if isGone(err) {
			return time.Time{}, s.semErr("extend", name, backends.ErrLost)
		}
		return time.Time{}, s.semErr("extend", name, err)
	}
	return h.ExpiresAt, nil
}

// grantCas is what this store keeps of a grant it made, so that the
// release can be a single cas: the slot key's cas id as the check after
// the add read it, and the gen of the store's own connection to the
// server, taken before that read. The release sends the cas on that
// connection only if it is still the same one (no redial since): then the
// server process that issued the cas id is the one that receives the cas,
// since a restarted memcached, which reuses cas ids, cannot take over a
// TCP connection. Anything else (another reply, a redial, a busy
// connection, an Extend since, another process) falls back to gets + cas.
type grantCas struct {
	slot  int
	casID uint64
	gen   uint64
}

// maxGrantCas bounds the grants kept (holders that never release, e.g.
// lost ones, would otherwise pile up); beyond it releases use gets + cas.
const maxGrantCas = 4096

func grantKey(name, owner string) string { return name + "\x00" + owner }

func (s *Store) rememberGrant(name, owner string, g grantCas) {
	if g.gen == 0 || g.casID == 0 {
		return
	}
	s.grantMu.Lock()
	defer s.grantMu.Unlock()
	if len(s.grants) < maxGrantCas {
		s.grants[grantKey(name, owner)] = g
	}
}

// takeGrant removes and returns the grant kept for owner of name.
func (s *Store) takeGrant(name, owner string) (grantCas, bool) {
	s.grantMu.Lock()
	defer s.grantMu.Unlock()
	k := grantKey(name, owner)
	g, ok := s.grants[k]
	delete(s.grants, k)
	return g, ok
}

// Release expires owner's slot key with a cas, so only the owner frees it.
// A freed slot above the limit is gone, as every free slot is: slots retire
// by themselves. When this store granted the slot and kept its cas id
// (grantCas), the cas is sent directly (1 round trip); otherwise, or when
// that cas does not succeed, gets + cas (2). An I/O error on the direct cas
// leaves unknown whether it was applied: the gets then finds the key gone
// and Release returns ErrLost, as it does for a key that expired.
func (s *Store) Release(ctx context.Context, ref backends.SemRef, owner string) error {
	name := ref.Name
	if err := s.writable(); err != nil {
		return err
	}
	if ref.IsInstance() { // never granted here (TryAcquire)
		return s.semErr("release", name, backends.ErrLost)
	}
	if g, ok := s.takeGrant(name, owner); ok {
		line, err := s.casExpire(ctx, s.sel.pickTag(semTag(name)), g.gen, s.keys.semSlot(name, g.slot), g.casID)
		if err == nil && line == "STORED" {
			s.hintFreed(name, g.slot)
			return nil
		}
		if err != nil && ctx.Err() != nil {
			return s.semErr("release", name, err)
		}
	}
	r, err := s.read(ctx, name, guessSpan)
	if err != nil {
		return s.semErr("release", name, err)
	}
	if r.cfg != nil && r.cfg.Mode == spec.ModeCounter {
		return s.counterRelease(ctx, name, owner, r)
	}
	it, h, ok := r.findOwner(owner)
	if !ok {
		return s.semErr("release", name, backends.ErrLost)
	}
	it.Expiration = -1
	if err := s.trip(ctx); err != nil {
		return s.semErr("release", name, err)
	}
	if err := s.mc.CompareAndSwap(it); err != nil {
		if isGone(err) {
			return s.semErr("release", name, backends.ErrLost)
		}
		return s.semErr("release", name, err)
	}
	s.hintFreed(name, h.Slot)
	return nil
}
