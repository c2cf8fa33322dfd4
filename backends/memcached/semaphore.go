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

// leaseSeconds is a lease as a slot key's TTL: whole seconds, rounded up,
// at least minLeaseSeconds.
func leaseSeconds(d time.Duration) (int64, error) {
	if d <= 0 {
		return 0, fmt.Errorf("lease %v is not positive", d)
	}
	return max(int64((d+time.Second-1)/time.Second), minLeaseSeconds), nil
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
	return r, nil
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
		if items, err = s.mc.GetMulti(ks); err == nil || try > 0 || !isConnErr(err) {
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

// nextFencing increments the fencing key, re-creating it first when it
// vanished (eviction, restart).
func (s *Store) nextFencing(ctx context.Context, name string) (int64, error) {
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
	r.cfgItem.Expiration = -1
	err = s.mc.CompareAndSwap(r.cfgItem)
	if err != nil && !errors.Is(err, memcache.ErrCacheMiss) && !errors.Is(err, memcache.ErrNotStored) {
		if errors.Is(err, memcache.ErrCASConflict) {
			return s.semErr("delete", name, fmt.Errorf("config changed meanwhile: %w", backends.ErrConflict))
		}
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
// only if, read after the add, the live slot keys (this one included) do
// not exceed the limit. Two racing acquirers cannot both pass the check
// past the limit: the later add is read by the later check. A loser
// expires its key and returns ErrNoSlot.
func (s *Store) TryAcquire(ctx context.Context, name string, req backends.AcquireRequest) (backends.Grant, error) {
	if err := s.writable(); err != nil {
		return backends.Grant{}, err
	}
	if req.Owner == "" {
		return backends.Grant{}, s.semErr("acquire", name, errors.New("empty owner"))
	}
	secs, err := leaseSeconds(req.Lease)
	if err != nil {
		return backends.Grant{}, s.semErr("acquire", name, err)
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
		fencing, err := s.nextFencing(ctx, name)
		if err != nil {
			return backends.Grant{}, err
		}
		now, err := s.nowFor(ctx, semTag(name))
		if err != nil {
			return backends.Grant{}, err
		}
		h := backends.Holder{
			Slot: slot, Owner: req.Owner, Host: req.Host, PID: req.PID, Fencing: fencing,
			AcquiredAt: time.Unix(now, 0).UTC(), ExpiresAt: time.Unix(now+secs, 0).UTC(),
		}
		key := s.keys.semSlot(name, slot)
		if err := s.trip(ctx); err != nil {
			return backends.Grant{}, err
		}
		err = s.mc.Add(&memcache.Item{Key: key, Value: encodeHolder(h), Expiration: int32(now + secs)})
		if errors.Is(err, memcache.ErrNotStored) {
			r.slots[slot] = &memcache.Item{Key: key} // taken meanwhile
			continue
		}
		if err != nil {
			return backends.Grant{}, err
		}
		// The check after the add.
		after, err := s.read(ctx, name, max(r.cfg.Span, slot+1))
		if err != nil {
			return backends.Grant{}, err
		}
		mine := after.slots[slot]
		if mine == nil {
			return backends.Grant{}, fmt.Errorf("slot %d vanished right after it was taken: %w", slot, backends.ErrNoSlot)
		}
		if after.cfg == nil || len(after.slots) > after.cfg.Limit {
			lim := 0
			if after.cfg != nil {
				lim = after.cfg.Limit
			}
			mine.Expiration = -1
			if err := s.trip(ctx); err != nil {
				return backends.Grant{}, err
			}
			if err := s.mc.CompareAndSwap(mine); err != nil && !isGone(err) {
				return backends.Grant{}, fmt.Errorf("back off from slot %d: %w", slot, err)
			}
			return backends.Grant{}, fmt.Errorf("%d of %d held after a racing acquire: %w", len(after.slots), lim, backends.ErrNoSlot)
		}
		return backends.Grant{Slot: slot, Fencing: fencing, ExpiresAt: h.ExpiresAt}, nil
	}
	return backends.Grant{}, fmt.Errorf("%d of %d held: %w", len(r.slots), limit, backends.ErrNoSlot)
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
	now, err := s.nowFor(ctx, semTag(name))
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

// Release expires owner's slot key with a cas, so only the owner frees it.
// A freed slot above the limit is gone, as every free slot is: slots retire
// by themselves.
func (s *Store) Release(ctx context.Context, name, owner string) error {
	if err := s.writable(); err != nil {
		return err
	}
	r, err := s.read(ctx, name, guessSpan)
	if err != nil {
		return s.semErr("release", name, err)
	}
	if r.cfg != nil && r.cfg.Mode == spec.ModeCounter {
		return s.counterRelease(ctx, name, owner, r)
	}
	it, _, ok := r.findOwner(owner)
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
