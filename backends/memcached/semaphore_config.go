package memcached

// Semaphore config, fencing counter and delete: PutSemaphore and
// DeleteSemaphore.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

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
