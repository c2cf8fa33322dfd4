package redis

import (
	"context"
	"fmt"
	"time"

	"github.com/coordd/coordd/backends"
	goredis "github.com/redis/go-redis/v9"
)

// Rate limits on Redis (backends.RateLimits). A limit is one hash,
// {rate:name}:limit, holding
//
//	count, per (µs), iv (interval µs), burst, keyed   its config
//	tat                                               the unkeyed limit's theoretical arrival time (µs)
//	k:<key>                                           each key's TAT, the key as given
//	sweep                                             where the next sweep of idle keys starts
//
// A permit is one script (lua/rate_take.lua) that reads the config, the
// TAT and the server's TIME with one HMGET and writes the TAT with one
// HSET, only when it grants: the same calls whatever the key, and one
// call fewer than a config key beside a record key would take. A key's
// field whose TAT has passed grants what an absent one does; each new key
// sweeps a few fields and deletes the idle ones, so they do not pile up.
// Deleting the limit is deleting the hash.

// Scripts of the rate limits (lua/rate_*.lua).
var (
	rateTakeScript    = luaScript("rate_take.lua")
	ratePutScript     = luaScript("rate_put.lua")
	rateObserveScript = luaScript("rate_observe.lua")
)

// rateKey is a limit's hash.
func (k keys) rateKey(name string) string { return k.object("rate", name, "limit") }

// PutRateLimit writes a limit's config.
func (s *Store) PutRateLimit(ctx context.Context, cfg backends.RateLimitConfig) error {
	if err := s.writable(); err != nil {
		return err
	}
	if err := backends.CheckRateLimit(cfg); err != nil {
		return err
	}
	keyed := 0
	if cfg.Keyed {
		keyed = 1
	}
	err := ratePutScript.Run(ctx, s.rdb, []string{s.keys.rateKey(cfg.Name)}, cfg.Count, cfg.Per.Microseconds(), cfg.Interval().Microseconds(), cfg.Burst, keyed).Err()
	if err != nil {
		return fmt.Errorf("put rate limit %q: %w", cfg.Name, err)
	}
	return nil
}

// DeleteRateLimit deletes a limit and its records.
func (s *Store) DeleteRateLimit(ctx context.Context, name string) error {
	if err := s.writable(); err != nil {
		return err
	}
	if err := s.rdb.Del(ctx, s.keys.rateKey(name)).Err(); err != nil {
		return fmt.Errorf("delete rate limit %q: %w", name, err)
	}
	return nil
}

// TakePermit takes up to n permits in one script call.
func (s *Store) TakePermit(ctx context.Context, name, key string, n int) (backends.Permit, error) {
	if err := s.writable(); err != nil {
		return backends.Permit{}, err
	}
	if err := backends.CheckPermits(n); err != nil {
		return backends.Permit{}, err
	}
	if err := backends.CheckRateKey(backends.RateLimitConfig{Name: name, Keyed: key != ""}, key); err != nil {
		return backends.Permit{}, err
	}
	res, err := s.queueEval(ctx, rateTakeScript, []string{s.keys.rateKey(name)}, key, n)
	if err == nil && len(res) == 0 {
		err = fmt.Errorf("empty reply")
	}
	if err != nil {
		return backends.Permit{}, fmt.Errorf("rate limit %q: take a permit: %w", name, err)
	}
	switch k := queueInt(res[0]); {
	case k > 0:
		return backends.Permit{Allowed: true, Granted: int(k), Remaining: int(queueInt(res[1]))}, nil
	case k == 0:
		return backends.Permit{RetryAfter: time.Duration(max(1, queueInt(res[1]))) * time.Microsecond}, nil
	case k == -1:
		return backends.Permit{}, fmt.Errorf("rate limit %q: %w", name, backends.ErrNotFound)
	}
	cfg := backends.RateLimitConfig{Name: name, Keyed: len(res) > 1 && queueInt(res[1]) == 1}
	return backends.Permit{}, backends.CheckRateKey(cfg, key)
}

// ObserveRateLimits reads many limits, one script per limit in one
// pipeline (each limit has its own hash tag).
func (s *Store) ObserveRateLimits(ctx context.Context, names []string) (map[string]*backends.RateLimitState, error) {
	out := map[string]*backends.RateLimitState{}
	if len(names) == 0 {
		return out, nil
	}
	var err error
	perr := queueScriptsPipelined(ctx, s.rdb, rateObserveScript, len(names), func(i int) ([]string, []any) {
		return []string{s.keys.rateKey(names[i])}, nil
	}, func(i int, c *goredis.Cmd) {
		res, cerr := c.Slice()
		if cerr != nil {
			if err == nil {
				err = cerr
			}
			return
		}
		if len(res) < 7 {
			return
		}
		cfg := backends.RateLimitConfig{
			Name: names[i], Count: int(queueInt(res[0])), Per: time.Duration(queueInt(res[1])) * time.Microsecond,
			Burst: int(queueInt(res[2])), Keyed: queueStr(res[3]) == "1",
		}
		st := &backends.RateLimitState{Config: cfg, Keys: int(queueInt(res[6]))}
		if !cfg.Keyed && cfg.Count > 0 && cfg.Interval() > 0 {
			st.Available = cfg.Available(queueInt(res[5]), queueInt(res[4]))
		}
		out[names[i]] = st
	})
	if perr != nil {
		err = perr
	}
	if err != nil {
		return nil, fmt.Errorf("observe rate limits: %w", err)
	}
	return out, nil
}

// PruneRateKeys deletes nothing: each new key of a keyed limit sweeps a
// few idle keys of its hash.
func (s *Store) PruneRateKeys(context.Context) (int, error) { return 0, nil }

// RateLimits is the store's rate limits (backends.RateLimitHolder).
func (s *Store) RateLimits() backends.RateLimits { return s }
