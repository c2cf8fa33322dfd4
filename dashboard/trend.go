package dashboard

import (
	"fmt"
	"sync"
	"time"
)

// sampleWindow is how far back the queue samples go.
const sampleWindow = 15 * time.Minute

// sampler keeps, per queue, the backlog (ready, delayed and in-flight
// jobs) and the dead count each time they were read: by a page, and by
// the daemon every SampleEvery. coordd stores no per-job completion
// counter (workers are other processes), so the dashboard shows what its
// own readings give: the backlog's trend and the jobs that died, by
// backend time, over up to the last 15 minutes.
type sampler struct {
	mu sync.Mutex
	m  map[string][]sample
}

type sample struct {
	at            time.Time
	backlog, dead int64
}

// trend is a queue's backlog change per minute over Span (zero: fewer
// than two readings 10 s apart).
type trend struct {
	Span      time.Duration
	PerMinute float64
	DeadAdded int64
}

// Known reports whether the trend has enough readings.
func (t trend) Known() bool { return t.Span > 0 }

// Text is the trend for a person: "draining 12.0/min" or "growing".
func (t trend) Text() string {
	switch {
	case !t.Known():
		return "-"
	case t.PerMinute > 0.05:
		return fmt.Sprintf("growing %.1f/min", t.PerMinute)
	case t.PerMinute < -0.05:
		return fmt.Sprintf("draining %.1f/min", -t.PerMinute)
	}
	return "steady"
}

func (s *sampler) add(key string, at time.Time, backlog, dead int64) trend {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string][]sample{}
	}
	xs := append(s.m[key], sample{at, backlog, dead})
	for len(xs) > 1 && at.Sub(xs[0].at) > sampleWindow {
		xs = xs[1:]
	}
	if len(xs) > 500 { // many viewers: keep every other reading
		xs = append(xs[:0:0], xs[len(xs)-250:]...)
	}
	s.m[key] = xs
	first := xs[0]
	d := at.Sub(first.at)
	if d < 10*time.Second {
		return trend{}
	}
	return trend{Span: d.Round(time.Second), PerMinute: float64(backlog-first.backlog) / d.Minutes(), DeadAdded: dead - first.dead}
}
