package redis

import (
	"context"
	"fmt"
	"time"

	"github.com/coordd/coordd/backends"
	goredis "github.com/redis/go-redis/v9"
)

// Rate limits on Redis (backends.RateLimits). A limit's keys share its
// hash tag {rate:name}:
//
//	config   hash: count, per (µs), iv (interval µs), burst, keyed
//	tat      string: the unkeyed limit's theoretical arrival time (µs)
//	k:<key>  string: a key's TAT, the key written as names are
//	keys     sorted set: the keys with a record, scored by TAT
//
// A permit is one script (lua/rate_take.lua) that reads the config, the
// server's TIME and the record, and writes the record only when it grants;
// records expire once their TAT has passed, so an idle limit holds
// nothing but its config.

// Scripts of the rate limits (lua/rate_*.lua).
var (
	rateTakeScript    = luaScript("rate_take.lua")
	ratePutScript     = luaScript("rate_put.lua")
	rateDeleteScript  = luaScript("rate_delete.lua")
	rateObserveScript = luaScript("rate_observe.lua")
)

// rateKeys are a limit's keys as the scripts take them: the config, the
// limit's own record and the keys set.
func (k keys) rateKeys(name string) []string {
	return []string{k.object("rate", name, "config"), k.object("rate", name, "tat"), k.object("rate", name, "keys")}
}

// rateKeyPrefix starts the record of each key of a keyed limit.
func (k keys) rateKeyPrefix(name string) string { return k.object("rate", name, "k:") }

// rateTakeKeys are the keys of one permit: the record is the key's own
// for a keyed limit.
func (k keys) rateTakeKeys(name, key string) ([]string, string) {
	ks := k.rateKeys(name)
	if key == "" {
		return ks, ""
	}
	member := encodeName(key)
	ks[1] = k.rateKeyPrefix(name) + member
	return ks, member
}

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
	err := ratePutScript.Run(ctx, s.rdb, s.keys.rateKeys(cfg.Name), cfg.Count, cfg.Per.Microseconds(), cfg.Interval().Microseconds(), cfg.Burst, keyed, s.keys.rateKeyPrefix(cfg.Name)).Err()
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
	if err := rateDeleteScript.Run(ctx, s.rdb, s.keys.rateKeys(name), s.keys.rateKeyPrefix(name)).Err(); err != nil {
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
	ks, member := s.keys.rateTakeKeys(name, key)
	res, err := s.queueEval(ctx, rateTakeScript, ks, member, n)
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
		return s.keys.rateKeys(names[i]), nil
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

// PruneRateKeys deletes nothing: records expire when their TAT has passed,
// and each permit of a keyed limit drops the idle members of its set.
func (s *Store) PruneRateKeys(context.Context) (int, error) { return 0, nil }

// RateLimits is the store's rate limits (backends.RateLimitHolder).
func (s *Store) RateLimits() backends.RateLimits { return s }
