// Package ratelimit is the Go API for coordd rate limits: take a permit of
// a limit declared in the spec, at once or waiting for one, from any number
// of processes on any number of hosts.
//
// The store decides (backends.RateLimits): each limit, and each key of a
// keyed one, is one record of its theoretical arrival time, read and
// written in one statement or script with the store's clock by the
// generic cell rate algorithm. So over any window, the permits granted
// across every caller never exceed rate × window + burst, and an idle
// limit grants its burst at once. This package adds waiting: Wait asks
// again when the store says the next permit is due, never sooner, and
// gives up early when that is past its deadline.
package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coordd/coordd/backends"
)

// ErrNotGranted is returned when no permit was granted in time (Allow
// refused, or Wait's deadline comes before the next permit is due).
var ErrNotGranted = errors.New("no permit granted")

// Client takes permits of the rate limits held by one backend.
type Client struct {
	rl      backends.RateLimits
	backend string
	// sleep waits d or until ctx ends; tests replace it.
	sleep func(ctx context.Context, d time.Duration) error
}

// New returns a client for b; backends.ErrUnsupported when b holds no
// rate limits (memcached).
func New(b backends.Backend) (*Client, error) {
	rl := backends.RateLimitsOf(b)
	if rl == nil {
		return nil, fmt.Errorf("backend %q (%s) cannot hold rate limits: %w", b.Name(), b.Type(), backends.ErrUnsupported)
	}
	return &Client{rl: rl, backend: b.Name(), sleep: sleepCtx}, nil
}

// Allow takes one permit of limit name (for key, when the limit is keyed)
// if one is due now. A refusal returns the permit (RetryAfter says when
// to ask again) and an error wrapping ErrNotGranted.
func (c *Client) Allow(ctx context.Context, name, key string) (backends.Permit, error) {
	p, err := c.rl.TakePermit(ctx, name, key, 1)
	if err != nil {
		return p, err
	}
	if !p.Allowed {
		return p, fmt.Errorf("%w: the next is due in %s", ErrNotGranted, p.RetryAfter.Round(time.Millisecond))
	}
	return p, nil
}

// Wait takes one permit, waiting up to max for it (max <= 0: as long as
// ctx allows). It asks again when the store said the next permit is due;
// another caller may take that one first, and then it waits again. When
// the next permit is due after the deadline it returns at once, wrapping
// ErrNotGranted.
func (c *Client) Wait(ctx context.Context, name, key string, max time.Duration) (backends.Permit, error) {
	var deadline time.Time
	if max > 0 {
		deadline = time.Now().Add(max)
	}
	for {
		p, err := c.rl.TakePermit(ctx, name, key, 1)
		if err != nil || p.Allowed {
			return p, err
		}
		if !deadline.IsZero() && time.Until(deadline) < p.RetryAfter {
			return p, fmt.Errorf("%w in %s: the next is due in %s", ErrNotGranted, max, p.RetryAfter.Round(time.Millisecond))
		}
		if err := c.sleep(ctx, p.RetryAfter); err != nil {
			return p, err
		}
	}
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
