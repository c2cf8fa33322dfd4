package memcached

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

var (
	_ backends.SemaphoreAdmin = (*Store)(nil)
	_ backends.Semaphores     = (*Store)(nil)
)

// minLeaseSeconds is the shortest TTL a slot key gets: memcached's clock
// ticks in whole seconds, so a shorter lease could end within one tick.
const minLeaseSeconds = 3

// clockPadSeconds lengthens every slot key's life beyond the lease. A
// holder trusts its slot until its send time + lease - margin on its own
// monotonic clock, so the key must not end earlier than that. memcached's
// clock lags real time by up to a second (it ticks in whole seconds), and
// the expiry is computed from a clock reading that may be up to a second
// behind the server's (clockSample.estimate): without the pad a key could
// end up to two seconds before its holder stops trusting it, and another
// holder could take the slot meanwhile. With it, a holder that died frees
// its slot up to two seconds later: liveness, not safety.
const clockPadSeconds = 2

// leaseSeconds is a lease as a slot key's TTL: whole seconds, rounded up,
// at least minLeaseSeconds, plus clockPadSeconds.
func leaseSeconds(d time.Duration) (int64, error) {
	if d <= 0 {
		return 0, fmt.Errorf("lease %v is not positive", d)
	}
	return max(int64((d+time.Second-1)/time.Second), minLeaseSeconds) + clockPadSeconds, nil
}

// fencingScale: a fencing key that is missing is re-created at the server's
// clock in seconds times this. Its creator first waits until the server's
// second has changed since it saw the key missing, so that a key created
// (and lost) in the same second cannot have issued higher values: the new
// value is above every earlier one as long as fewer than a million grants
// were made in each second since the first creation.
const fencingScale = 1_000_000

// semCfg is the config key's value.
type semCfg struct {
	backends.SemaphoreConfig
	// Span is the number of slot keys that may exist: the highest limit
	// the semaphore ever had. Observe and release read slots [0, Span).
	Span int `json:"span"`
}

// semErr wraps an error of operation op on semaphore name.
func (s *Store) semErr(op, name string, err error) error {
	return fmt.Errorf("memcached %q: %s semaphore %q: %w", s.name, op, name, err)
}

// semRead is one read of a semaphore's keys.
type semRead struct {
	cfg     *semCfg        // nil: absent
	cfgItem *memcache.Item // with its cas id
	fencing bool           // the fencing key exists
	slots   map[int]*memcache.Item
	hold    *memcache.Item // mode counter
	ctr     *memcache.Item // mode counter
}

// read reads the config, the fencing key, the counter keys and slots
// [0, span) of name in one multi-get, and a second one when the config
// says the span is larger than guessed.
func (s *Store) read(ctx context.Context, name string, span int) (*semRead, error) {
	ks := []string{s.keys.semCfg(name), s.keys.semFencing(name), s.keys.semCtr(name), s.keys.semHold(name)}
	for i := range span {
		ks = append(ks, s.keys.semSlot(name, i))
	}
	items, err := s.getMulti(ctx, ks)
	if err != nil {
		return nil, err
	}
	r := &semRead{slots: map[int]*memcache.Item{}}
	if it := items[ks[0]]; it != nil {
		var c semCfg
		if err := json.Unmarshal(it.Value, &c); err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		c.Name = name
		r.cfg, r.cfgItem = &c, it
	}
	r.fencing = items[ks[1]] != nil
	r.ctr, r.hold = items[ks[2]], items[ks[3]]
	for i := range span {
		if it := items[ks[4+i]]; it != nil {
			r.slots[i] = it
		}
	}
	if r.cfg != nil && r.cfg.Span > span {
		more := make([]string, 0, r.cfg.Span-span)
		for i := span; i < r.cfg.Span; i++ {
			more = append(more, s.keys.semSlot(name, i))
		}
		items, err := s.getMulti(ctx, more)
		if err != nil {
			return nil, err
		}
		for i := span; i < r.cfg.Span; i++ {
			if it := items[more[i-span]]; it != nil {
				r.slots[i] = it
			}
		}
	}
	s.remember(name, r)
	return r, nil
}

// semHint is what this store last read of a semaphore in mode lease: its
// config and the slots seen held. TryAcquire uses it to pick a slot
// without reading first. It is a guess, never a gate: the check after the
// add reads the config and every slot again, and a stale hint costs only a
// failed add (then the full path) or a back-off.
type semHint struct {
	cfg  semCfg
	held map[int]bool // never modified once stored
}

// freeSlot is the first slot in [0, limit) the hint does not see held, or
// -1 when it sees the semaphore full.
func (h semHint) freeSlot() int {
	if len(h.held) >= h.cfg.Limit {
		return -1
	}
	for i := range h.cfg.Limit {
		if !h.held[i] {
			return i
		}
	}
	return -1
}

// remember keeps r as the hint of name (a config in mode lease), or drops
// the hint.
func (s *Store) remember(name string, r *semRead) {
	s.hintMu.Lock()
	defer s.hintMu.Unlock()
	if r.cfg == nil || r.cfg.Mode == spec.ModeCounter {
		delete(s.hints, name)
		return
	}
	h := semHint{cfg: *r.cfg, held: make(map[int]bool, len(r.slots))}
	for i := range r.slots {
		h.held[i] = true
	}
	s.hints[name] = h
}

// hint is the hint of name, if any.
func (s *Store) hint(name string) (semHint, bool) {
	s.hintMu.Lock()
	defer s.hintMu.Unlock()
	h, ok := s.hints[name]
	return h, ok
}

// hintFreed notes in the hint that this store freed slot of name.
func (s *Store) hintFreed(name string, slot int) {
	s.hintMu.Lock()
	defer s.hintMu.Unlock()
	h, ok := s.hints[name]
	if !ok || !h.held[slot] {
		return
	}
	held := make(map[int]bool, len(h.held))
	for i := range h.held {
		if i != slot {
			held[i] = true
		}
	}
	s.hints[name] = semHint{cfg: h.cfg, held: held}
}

// forgetHint drops the hint of name.
func (s *Store) forgetHint(name string) {
	s.hintMu.Lock()
	defer s.hintMu.Unlock()
	delete(s.hints, name)
}

// getMulti reads keys, once more after a connection error: a read is safe
// to repeat, and a pooled connection to a server that restarted fails once.
func (s *Store) getMulti(ctx context.Context, ks []string) (map[string]*memcache.Item, error) {
	var items map[string]*memcache.Item
	var err error
	for try := range 2 {
		if err = s.trip(ctx); err != nil {
			return nil, err
		}
		items, err = s.mc.GetMulti(ks)
		if err != nil && isConnErr(err) && len(ks) > 0 {
			s.forgetClock(s.sel.tag(ks[0]))
		}
		if err == nil || try > 0 || !isConnErr(err) {
			break
		}
	}
	return items, err
}

// isConnErr: err came from the connection, not from memcached.
func isConnErr(err error) bool {
	var ne net.Error
	var oe *net.OpError
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.As(err, &ne) || errors.As(err, &oe)
}

// guessSpan is how many slots a first read fetches; read fetches the rest
// when the config says so.
const guessSpan = 8

// PutSemaphore creates the semaphore or updates its config (a
// compare-and-swap on the config key), and creates the fencing key when it
// is missing. Slots need no repair: a free slot is an absent key.
func (s *Store) PutSemaphore(ctx context.Context, cfg backends.SemaphoreConfig) error {
	if err := s.writable(); err != nil {
		return err
	}
	if err := checkConfig(cfg); err != nil {
		return s.semErr("put", cfg.Name, err)
	}
	if _, err := s.putConfig(ctx, cfg.Name, func(old *semCfg) semCfg {
		c := semCfg{SemaphoreConfig: cfg, Span: cfg.Limit}
		if old != nil {
			c.Span = max(c.Span, old.Span)
		}
		return c
	}); err != nil {
		return s.semErr("put", cfg.Name, err)
	}
	if err := s.ensureFencing(ctx, cfg.Name); err != nil {
		return s.semErr("put", cfg.Name, err)
	}
	return nil
}

// checkConfig refuses what memcached cannot hold.
func checkConfig(cfg backends.SemaphoreConfig) error {
	switch {
	case cfg.Name == "":
		return errors.New("empty name")
	case cfg.Limit < 0:
		return fmt.Errorf("negative limit %d", cfg.Limit)
	case cfg.Mode == spec.ModeCounter && cfg.Limit > 1:
		return fmt.Errorf("mode counter holds limit 1, not %d: %w", cfg.Limit, backends.ErrUnsupported)
	case cfg.Mode != "" && cfg.Mode != spec.ModeLease && cfg.Mode != spec.ModeCounter:
		return fmt.Errorf("mode %q: %w", cfg.Mode, backends.ErrUnsupported)
	case cfg.Wake != "" && cfg.Wake != spec.WakePoll:
		return fmt.Errorf("wake %q (memcached can only poll): %w", cfg.Wake, backends.ErrUnsupported)
	case cfg.MaxWaiting >= 0:
		return fmt.Errorf("max_waiting %d (memcached keeps no waiter line): %w", cfg.MaxWaiting, backends.ErrUnsupported)
	case cfg.Keyed:
		// memcached cannot list keys: a keyed semaphore's instances could
		// not be counted to drain them, nor shown.
		return fmt.Errorf("keyed (memcached cannot list a semaphore's instances): %w", backends.ErrUnsupported)
	}
	return nil
}

// putConfig writes the config computed by next from the current one
// (nil when absent) with add or cas, retrying on a lost race.
func (s *Store) putConfig(ctx context.Context, name string, next func(old *semCfg) semCfg) (semCfg, error) {
	for {
		r, err := s.read(ctx, name, 0)
		if err != nil {
			return semCfg{}, err
		}
		c := next(r.cfg)
		v, err := json.Marshal(c)
		if err != nil {
			return semCfg{}, err
		}
		if err := s.trip(ctx); err != nil {
			return semCfg{}, err
		}
		if r.cfgItem == nil {
			err = s.mc.Add(&memcache.Item{Key: s.keys.semCfg(name), Value: v})
		} else {
			r.cfgItem.Value = v
			err = s.mc.CompareAndSwap(r.cfgItem)
		}
		switch {
		case err == nil:
			return c, nil
		case errors.Is(err, memcache.ErrNotStored), errors.Is(err, memcache.ErrCASConflict), errors.Is(err, memcache.ErrCacheMiss):
			continue // another writer won; read again
		default:
			return semCfg{}, err
		}
	}
}

// ensureFencing creates the fencing key when it is missing: it waits for
// the server's second to change (see fencingScale), then adds server time ×
// 10⁶ (add: a racing creator's value wins, and both are above any earlier
// value). It costs up to one second, once per semaphore and per loss.
func (s *Store) ensureFencing(ctx context.Context, name string) error {
	if err := s.trip(ctx); err != nil {
		return err
	}
	_, err := s.mc.Get(s.keys.semFencing(name))
	if err == nil {
		return nil
	}
	if !errors.Is(err, memcache.ErrCacheMiss) {
		return err
	}
	seen, err := s.nowFor(ctx, semTag(name))
	if err != nil {
		return err
	}
	now := seen
	for now <= seen {
		t := time.NewTimer(fencingTickPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		if now, err = s.nowFor(ctx, semTag(name)); err != nil {
			return err
		}
	}
	if err := s.trip(ctx); err != nil {
		return err
	}
	err = s.mc.Add(&memcache.Item{Key: s.keys.semFencing(name), Value: []byte(strconv.FormatInt(now*fencingScale, 10))})
	if err != nil && !errors.Is(err, memcache.ErrNotStored) {
		return err
	}
	return nil
}

// fencingTickPoll is how often ensureFencing reads the clock while it waits
// for the server's second to change.
const fencingTickPoll = 50 * time.Millisecond

// errNoFencing: the fencing key is missing and nextFencing was told not
// to re-create it (the fast path of TryAcquire, which has not read the
// config: the semaphore may be gone).
var errNoFencing = errors.New("fencing key missing")

// nextFencing increments the fencing key, re-creating it first when it
// vanished (eviction, restart) if create is set, else returning
// errNoFencing.
func (s *Store) nextFencing(ctx context.Context, name string, create bool) (int64, error) {
	for range 3 {
		if err := s.trip(ctx); err != nil {
			return 0, err
		}
		n, err := s.mc.Increment(s.keys.semFencing(name), 1)
		if err == nil {
			return int64(n), nil
		}
		if !errors.Is(err, memcache.ErrCacheMiss) {
			return 0, err
		}
		if !create {
			return 0, errNoFencing
		}
		if err := s.ensureFencing(ctx, name); err != nil {
			return 0, err
		}
	}
	return 0, errors.New("fencing key keeps vanishing")
}

// DeleteSemaphore removes a semaphore without live holders. It first sets
// the limit to 0, so that an acquire racing with it either is seen here
// as a holder or sees the limit 0 in its check and backs off; with live
// holders it stops there and returns ErrHeld.
func (s *Store) DeleteSemaphore(ctx context.Context, name string) error {
	if err := s.writable(); err != nil {
		return err
	}
	r, err := s.read(ctx, name, guessSpan)
	if err != nil {
		return s.semErr("delete", name, err)
	}
	if r.cfg == nil {
		return nil
	}
	if r.cfg.Limit != 0 {
		if _, err := s.putConfig(ctx, name, func(old *semCfg) semCfg {
			c := *r.cfg
			if old != nil {
				c = *old
			}
			c.Limit = 0
			return c
		}); err != nil {
			return s.semErr("delete", name, err)
		}
		if r, err = s.read(ctx, name, guessSpan); err != nil {
			return s.semErr("delete", name, err)
		}
		if r.cfg == nil {
			return nil
		}
	}
	if live := r.live(); live > 0 {
		return s.semErr("delete", name, fmt.Errorf("%d live holders: %w", live, backends.ErrHeld))
	}
	if err := s.trip(ctx); err != nil {
		return s.semErr("delete", name, err)
	}
	// Expire the config only if nobody re-put it since the read.
	s.forgetHint(name)
	r.cfgItem.Expiration = -1
	err = s.mc.CompareAndSwap(r.cfgItem)
	if err != nil && !errors.Is(err, memcache.ErrCacheMiss) && !errors.Is(err, memcache.ErrNotStored) {
		if errors.Is(err, memcache.ErrCASConflict) {
			return s.semErr("delete", name, fmt.Errorf("config changed meanwhile: %w", backends.ErrConflict))
		}
		return s.semErr("delete", name, err)
	}
	// Forget the fencing counter too: a semaphore created here again,
	// maybe after living on another backend whose numbers follow that
	// backend's clock, starts again at this server's time × 10⁶
	// (ensureFencing), not below the numbers its holders had there.
	if err := s.trip(ctx); err != nil {
		return s.semErr("delete", name, err)
	}
	if err := s.mc.Delete(s.keys.semFencing(name)); err != nil && !errors.Is(err, memcache.ErrCacheMiss) {
		return s.semErr("delete", name, err)
	}
	return nil
}

// live counts held slots (mode lease) or the holder record (mode counter).
func (r *semRead) live() int {
	if r.cfg != nil && r.cfg.Mode == spec.ModeCounter {
		if r.hold != nil && r.ctr != nil {
			return 1
		}
		return 0
	}
	return len(r.slots)
}

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
func (s *Store) TryAcquire(ctx context.Context, name string, req backends.AcquireRequest) (backends.Grant, error) {
	if err := s.writable(); err != nil {
		return backends.Grant{}, err
	}
	if _, _, ok := backends.SplitInstance(name); ok {
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

// isGone: a compare-and-swap found the key changed or missing.
func isGone(err error) bool {
	return errors.Is(err, memcache.ErrCacheMiss) || errors.Is(err, memcache.ErrNotStored) || errors.Is(err, memcache.ErrCASConflict)
}

// findOwner returns owner's slot item and record.
func (r *semRead) findOwner(owner string) (*memcache.Item, backends.Holder, bool) {
	for slot, it := range r.slots {
		h, err := decodeHolder(it.Value)
		if err == nil && h.Owner == owner {
			h.Slot = slot
			return it, h, true
		}
	}
	return nil, backends.Holder{}, false
}

// Extend renews owner's slot key with gets + cas: new expiry in the record
// and as the key's TTL. A vanished key (expired, evicted, restart) or a
// changed one is ErrLost.
func (s *Store) Extend(ctx context.Context, name, owner string, lease time.Duration) (time.Time, error) {
	if err := s.writable(); err != nil {
		return time.Time{}, err
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
func (s *Store) Release(ctx context.Context, name, owner string) error {
	if err := s.writable(); err != nil {
		return err
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

// Holders lists live holders by slot; an absent semaphore has none.
func (s *Store) Holders(ctx context.Context, name string) ([]backends.Holder, error) {
	st, err := s.observe(ctx, name)
	if err != nil || st == nil {
		return nil, err
	}
	return st.Holders, nil
}

// ObserveSemaphores reads each semaphore with one multi-get (two when its
// span exceeds guessSpan). Slots is max(limit, held) when the config and
// fencing keys exist; when the fencing key vanished it is the number held,
// so that a plan shows the drift and reconcile's PutSemaphore re-creates
// the key. A vanished config key is an absent semaphore.
func (s *Store) ObserveSemaphores(ctx context.Context, names []string) (map[string]*backends.SemaphoreState, error) {
	out := make(map[string]*backends.SemaphoreState, len(names))
	for _, n := range names {
		st, err := s.observe(ctx, n)
		if err != nil {
			return nil, err
		}
		if st != nil {
			out[n] = st
		}
	}
	return out, nil
}

func (s *Store) observe(ctx context.Context, name string) (*backends.SemaphoreState, error) {
	r, err := s.read(ctx, name, guessSpan)
	if err != nil {
		return nil, s.semErr("observe", name, err)
	}
	if r.cfg == nil {
		return nil, nil
	}
	st := &backends.SemaphoreState{Config: r.cfg.SemaphoreConfig}
	if r.cfg.Mode == spec.ModeCounter {
		if h, ok := r.counterHolder(); ok {
			st.Holders = []backends.Holder{h}
		}
	} else {
		for slot, it := range r.slots {
			h, err := decodeHolder(it.Value)
			if err != nil {
				return nil, s.semErr("observe", name, fmt.Errorf("slot %d: %w", slot, err))
			}
			h.Slot = slot
			st.Holders = append(st.Holders, h)
		}
		slices.SortFunc(st.Holders, func(a, b backends.Holder) int { return a.Slot - b.Slot })
	}
	st.Slots = len(st.Holders)
	if r.fencing {
		st.Slots = st.WantSlots()
	}
	return st, nil
}

// encodeHolder is a slot key's value: "v1 <fencing> <acquired s> <expires s>
// <pid> <len(owner)> <owner><host>".
func encodeHolder(h backends.Holder) []byte {
	return fmt.Appendf(nil, "v1 %d %d %d %d %d %s%s", h.Fencing, h.AcquiredAt.Unix(), h.ExpiresAt.Unix(), h.PID, len(h.Owner), h.Owner, h.Host)
}

func decodeHolder(v []byte) (backends.Holder, error) {
	var h backends.Holder
	rest, ok := strings.CutPrefix(string(v), "v1 ")
	if !ok {
		return h, fmt.Errorf("malformed holder record %q", v)
	}
	var f [5]int64
	for i := range f {
		field, tail, ok := strings.Cut(rest, " ")
		n, err := strconv.ParseInt(field, 10, 64)
		if !ok || err != nil {
			return h, fmt.Errorf("malformed holder record %q", v)
		}
		f[i], rest = n, tail
	}
	if f[4] < 0 || f[4] > int64(len(rest)) {
		return h, fmt.Errorf("malformed holder record %q", v)
	}
	h.Fencing, h.AcquiredAt, h.ExpiresAt, h.PID = f[0], time.Unix(f[1], 0).UTC(), time.Unix(f[2], 0).UTC(), int(f[3])
	h.Owner, h.Host = rest[:f[4]], rest[f[4]:]
	return h, nil
}
