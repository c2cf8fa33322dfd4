// Package repeatlog keeps a failure that repeats from flooding the log. The
// first failure of a kind is logged as it comes; repeats within a window
// are counted and said in one line when the window ends ("12 more in the
// last 1m0s"); the recovery is logged once, with how many failures it
// ended. During a backend outage a loop that retries every second thus
// logs a line a minute, not sixty, and the operator still sees when it
// began, that it goes on, and when it ended.
package repeatlog

import (
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// DefaultWindow is how often a repeating failure is said again.
const DefaultWindow = time.Minute

// Limiter logs failures by key. The zero value is not usable: use New.
type Limiter struct {
	log    hclog.Logger
	window time.Duration
	now    func() time.Time

	mu   sync.Mutex
	keys map[string]*state
}

type state struct {
	since    time.Time // the first failure of this run of failures
	said     time.Time // when a line was last logged
	failures int       // since the first
	unsaid   int       // repeats not logged yet
}

// New returns a Limiter that logs to log, saying a repeating failure again
// once per window (DefaultWindow when zero or less).
func New(log hclog.Logger, window time.Duration) *Limiter {
	if window <= 0 {
		window = DefaultWindow
	}
	return &Limiter{log: log, window: window, now: time.Now, keys: map[string]*state{}}
}

// SetClock replaces the clock (tests).
func (l *Limiter) SetClock(now func() time.Time) { l.now = now }

// Warn logs a failure of kind key at WARN: the first at once, repeats
// once per window with the count of those not logged ("repeated").
func (l *Limiter) Warn(key, msg string, args ...any) {
	l.fail(hclog.Warn, key, msg, args)
}

// Error is Warn at ERROR.
func (l *Limiter) Error(key, msg string, args ...any) {
	l.fail(hclog.Error, key, msg, args)
}

func (l *Limiter) fail(level hclog.Level, key, msg string, args []any) {
	now := l.now()
	l.mu.Lock()
	s := l.keys[key]
	if s == nil {
		s = &state{since: now}
		l.keys[key] = s
	}
	s.failures++
	if !s.said.IsZero() && now.Sub(s.said) < l.window {
		s.unsaid++
		l.mu.Unlock()
		return
	}
	first := s.said.IsZero()
	repeated, window := s.unsaid, now.Sub(s.said)
	s.said, s.unsaid = now, 0
	l.mu.Unlock()
	if !first {
		args = append(args, "repeated", repeated, "in_last", window.Round(time.Second).String(), "failing_for", now.Sub(s.since).Round(time.Second).String())
	}
	l.log.Log(level, msg, args...)
}

// Recovered ends a run of failures of kind key: when there was one, msg is
// logged at INFO with how many failures it counted and how long it lasted.
// Without failures it logs nothing, so callers may call it on every
// success.
func (l *Limiter) Recovered(key, msg string, args ...any) {
	l.mu.Lock()
	s := l.keys[key]
	delete(l.keys, key)
	l.mu.Unlock()
	if s == nil {
		return
	}
	args = append(args, "failures", s.failures, "failed_for", l.now().Sub(s.since).Round(time.Millisecond).String())
	l.log.Info(msg, args...)
}
