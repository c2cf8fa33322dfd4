package memcached

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
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
