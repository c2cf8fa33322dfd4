package spec

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Bounds of a rate limit, documented in docs/spec.md.
const (
	// defaultBurst is the burst of a rate limit that sets none: one permit
	// at a time, evenly spaced, as in the GCRA's definition (a tolerance
	// of zero). A limit that should let an idle client send a whole
	// period's worth at once sets burst to the rate's count.
	defaultBurst = 1
	// maxBurst bounds burst: the backends keep the theoretical arrival
	// time in microseconds, and burst × interval must stay far from
	// overflowing it.
	maxBurst = 1000000
	// maxRatePer bounds the period of a rate.
	maxRatePer = 24 * time.Hour
	// minInterval is the smallest interval between permits: backends keep
	// time in microseconds.
	minInterval = time.Microsecond
)

var rateLimitFields = []string{"backend", "rate", "burst", "keyed", "prevent_destroy"}

func (l *loader) decodeRateLimits(s *Spec) {
	for _, name := range l.sortedNames("rate_limits") {
		d := l.named["rate_limits"][name]
		fs := l.fields(d.file, "rate_limit."+name, d.key, d.val, rateLimitFields, nil)
		if fs == nil {
			continue
		}
		o := &RateLimit{Name: name, Pos: d.file.posOf(d.key)}
		var typ string
		o.Backend, typ = l.objectBackend(fs)
		// memcached's clock ticks in whole seconds: hosts reading it
		// would let a second's worth of permits through at each tick.
		notOnMemcached(fs, o.Backend, typ, "rate limits (its clock ticks in whole seconds, too coarse to space permits)")
		if !fs.has("rate") {
			fs.missing("rate", " (permits per period, like 100/1m)")
		} else if v, ok := fs.str("rate", false); ok {
			count, per, err := ParseRate(v)
			if err != nil {
				fs.errf("rate", "%v", err)
			} else {
				o.Count, o.Per = count, per
			}
		}
		o.Burst, _ = fs.intRange("burst", defaultBurst, 1, maxBurst)
		o.Keyed = fs.boolean("keyed")
		o.PreventDestroy = fs.boolean("prevent_destroy")
		s.RateLimits[name] = o
	}
}

// ParseRate parses a rate written COUNT/PERIOD: "100/1m", "10/s" (a bare
// unit is one of it), "5/1h", "3/90s". COUNT is a positive integer and
// PERIOD a Go duration of at most 24h; one permit's interval,
// PERIOD/COUNT, must be at least 1µs.
func ParseRate(v string) (count int, per time.Duration, err error) {
	c, p, ok := strings.Cut(strings.TrimSpace(v), "/")
	if !ok {
		return 0, 0, fmt.Errorf("must be COUNT/PERIOD like 100/1m or 10/s, got %s", quote(v))
	}
	n, nerr := strconv.Atoi(strings.TrimSpace(c))
	if nerr != nil || n < 1 {
		return 0, 0, fmt.Errorf("count must be a positive integer, like the 100 of 100/1m; got %s", quote(c))
	}
	p = strings.TrimSpace(p)
	if p != "" && (p[0] < '0' || p[0] > '9') {
		p = "1" + p
	}
	d, derr := time.ParseDuration(p)
	switch {
	case derr != nil:
		return 0, 0, fmt.Errorf("period must be a duration like 1m or a unit like s, as in 100/1m or 10/s; got %s", quote(v))
	case d <= 0:
		return 0, 0, fmt.Errorf("period must be greater than 0, got %s", quote(v))
	case d > maxRatePer:
		return 0, 0, fmt.Errorf("period must be at most %s, got %s", maxRatePer, quote(v))
	case d/time.Duration(n) < minInterval:
		return 0, 0, fmt.Errorf("at most one permit per %s: %d per %s is too fast", minInterval, n, d)
	}
	return n, d, nil
}
