package backends

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coordd/coordd/spec"
)

// ErrRateKeyRequired and ErrRateNotKeyed refuse a permit asked of a keyed
// rate limit without a key, or with a key of one that is not keyed.
var (
	ErrRateKeyRequired = errors.New("the rate limit is keyed: a key is required")
	ErrRateNotKeyed    = errors.New("the rate limit is not keyed: no key may be given")
)

// RateLimitConfig is a rate limit as the stores enforce it: the generic
// cell rate algorithm (GCRA) with emission interval Per/Count and a
// tolerance of Burst-1 intervals.
type RateLimitConfig struct {
	Name  string        `json:"name"`
	Count int           `json:"count"`
	Per   time.Duration `json:"per"`
	Burst int           `json:"burst"`
	Keyed bool          `json:"keyed,omitempty"`
}

// Interval is the time one permit stands for, in whole microseconds (the
// stores keep time in µs; spec refuses a rate faster than one per µs).
func (c RateLimitConfig) Interval() time.Duration {
	return (c.Per / time.Duration(c.Count)).Truncate(time.Microsecond)
}

// CheckRateLimit checks a config as PutRateLimit receives it: the bounds
// that package spec validates.
func CheckRateLimit(c RateLimitConfig) error {
	if c.Count < 1 || c.Per <= 0 || c.Burst < 1 || c.Interval() < time.Microsecond {
		return fmt.Errorf("rate limit %q: rate %d/%s burst %d: the rate must be at least one permit per period, at most one per µs, and burst at least 1", c.Name, c.Count, c.Per, c.Burst)
	}
	return nil
}

// CheckRateKey checks the key of a permit against the stored config:
// required by a keyed limit (ErrRateKeyRequired), refused by another
// (ErrRateNotKeyed), and a valid key (spec.CheckKey).
func CheckRateKey(c RateLimitConfig, key string) error {
	switch {
	case c.Keyed && key == "":
		return fmt.Errorf("rate limit %q: %w", c.Name, ErrRateKeyRequired)
	case !c.Keyed && key != "":
		return fmt.Errorf("rate limit %q: %w", c.Name, ErrRateNotKeyed)
	}
	return spec.CheckKey(key)
}

// Permit is the answer to one request for permits.
type Permit struct {
	// Allowed: at least one permit was granted (and counted).
	Allowed bool
	// Granted is how many permits were granted: up to the number asked
	// for, as many as were due at once (0 when not Allowed).
	Granted int
	// RetryAfter is, when not allowed, how long from the store's now
	// until a request would be granted; 0 when allowed.
	RetryAfter time.Duration
	// Remaining is how many more permits would be granted at once after
	// this request.
	Remaining int
}

// RateLimitState is what a store observes of one rate limit.
type RateLimitState struct {
	Config RateLimitConfig `json:"config"`
	// Available is how many permits an unkeyed limit would grant at once
	// now (Burst when idle); 0 for a keyed one.
	Available int `json:"available"`
	// Keys counts the keys of a keyed limit that are not idle: whose next
	// permit is not yet at full burst.
	Keys int `json:"keys"`
}

// RateLimits is the rate limits a store holds: reconcile's view (observe,
// put, delete) and the runtime's (TakePermit). Each limit, and each key of
// a keyed one, is one record of its theoretical arrival time (TAT), read
// and written in one atomic step with the store's clock.
type RateLimits interface {
	// ObserveRateLimits observes many limits; absent ones are missing
	// from the map.
	ObserveRateLimits(ctx context.Context, names []string) (map[string]*RateLimitState, error)
	// PutRateLimit creates the limit or updates its config; the permits
	// already granted keep counting. Idempotent.
	PutRateLimit(ctx context.Context, cfg RateLimitConfig) error
	// DeleteRateLimit removes the limit and its keys' records. Absent is
	// not an error.
	DeleteRateLimit(ctx context.Context, name string) error
	// TakePermit grants up to n permits (n >= 1) of limit name (for key,
	// when keyed) that are due now, by the GCRA: with the store's clock
	// now and the record's TAT, base = max(TAT, now); permits are due when
	// base - now <= (Burst-1) x Interval, as many as
	// 1 + ((Burst-1) x Interval - (base - now)) / Interval, and TAT moves
	// by Interval for each one granted. A refusal changes nothing and says
	// when to ask again. It returns ErrNotFound for an absent limit,
	// ErrRateKeyRequired or ErrRateNotKeyed for a key that does not match
	// the limit, and spec.ErrInvalidKey for a bad key, before anything is
	// written.
	TakePermit(ctx context.Context, name, key string, n int) (Permit, error)
	// PruneRateKeys deletes the records of keys that are idle (TAT in the
	// past: such a record grants what an absent one does) and returns how
	// many it deleted; a store whose records expire by themselves (Redis)
	// deletes none.
	PruneRateKeys(ctx context.Context) (int, error)
}

// RateLimitHolder is implemented by the backends that hold rate limits
// (SQL and Redis). memcached does not: its clock ticks in whole seconds,
// so hosts reading it cannot space permits closer than a second without
// letting a second's worth of permits through at each tick.
type RateLimitHolder interface {
	RateLimits() RateLimits
}

// RateLimitsOf returns b's rate limits, nil when b holds none.
func RateLimitsOf(b Backend) RateLimits {
	if h, ok := b.(RateLimitHolder); ok {
		return h.RateLimits()
	}
	return nil
}

// PermitFrom is the permit a store's conditional write gave: the TAT
// before (prev) and after (tat) at the store's clock now, with the
// interval iv and tolerance tol it decided by, all in µs. The TAT moves
// only when permits are granted, from max(prev, now) by iv for each.
func PermitFrom(prev, tat, now, iv, tol int64) Permit {
	if tat != prev {
		return Permit{Allowed: true, Granted: int((tat - max(prev, now)) / iv), Remaining: int(max(0, (tol-(tat-now)+iv)/iv))}
	}
	base := max(tat, now)
	return Permit{RetryAfter: time.Duration(max(1, base-now-tol)) * time.Microsecond}
}

// CheckPermits checks the number of permits asked for.
func CheckPermits(n int) error {
	if n < 1 {
		return fmt.Errorf("permits asked for: %d: must be at least 1", n)
	}
	return nil
}

// Available is how many permits a record with TAT tat grants at once at
// now (µs): Burst when idle.
func (c RateLimitConfig) Available(tat, now int64) int {
	iv := c.Interval().Microseconds()
	base := max(tat, now)
	n := (int64(c.Burst)*iv - (base - now)) / iv
	return int(max(0, min(n, int64(c.Burst))))
}
