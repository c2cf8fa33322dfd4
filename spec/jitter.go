package spec

import (
	"fmt"
	"hash/fnv"
	"time"
)

// JitterOffset is the fixed offset in [0, jitter) at which task name runs
// after each of its scheduled times. It comes from the name (FNV-1a), so
// every host computes the same one, and a thousand tasks declared @hourly
// with a jitter spread over the hour instead of all starting at :00 (as
// Jenkins' H does). It is a whole number of seconds when jitter is at
// least a minute, of milliseconds below.
func JitterOffset(name string, jitter time.Duration) time.Duration {
	if jitter <= 0 {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	unit := time.Second
	if jitter < time.Minute {
		unit = time.Millisecond
	}
	n := uint64(jitter / unit)
	if n == 0 {
		return 0
	}
	return time.Duration(h.Sum64()%n) * unit
}

// Jittered returns s with every occurrence offset later; s itself when
// offset is 0.
func Jittered(s Schedule, offset time.Duration) Schedule {
	if offset == 0 || s == nil {
		return s
	}
	return jittered{s: s, offset: offset}
}

type jittered struct {
	s      Schedule
	offset time.Duration
}

func (j jittered) Next(t time.Time) time.Time {
	n := j.s.Next(t.Add(-j.offset))
	if n.IsZero() {
		return n
	}
	return n.Add(j.offset)
}

func (j jittered) String() string { return j.s.String() }

// TaskSchedule is the schedule task t runs on: its expression in its
// timezone, each occurrence moved by its jitter's offset. The scheduler
// and reconcile read applied definitions through it, as Load does.
func TaskSchedule(t *CronTask) (Schedule, error) {
	if len(t.After) > 0 {
		return Never, nil
	}
	s, err := ParseSchedule(t.Schedule, t.Timezone)
	if err != nil {
		return nil, err
	}
	return Jittered(s, JitterOffset(t.Name, t.Jitter)), nil
}

// Never is the schedule of a task that runs after other tasks: it has no
// time of its own (Next is zero), so its next_exec is set only when its
// parents trigger it.
var Never Schedule = never{}

type never struct{}

func (never) Next(time.Time) time.Time { return time.Time{} }
func (never) String() string           { return "after" }

// jitterSamples is how many occurrences checkJitter looks at.
const jitterSamples = 200

// checkJitter refuses a jitter that is not shorter than every interval
// between two occurrences of s among the first jitterSamples from
// neverRef: an offset as long as the period would only move the runs into
// the next one, which reads as a mistake.
func checkJitter(s Schedule, jitter time.Duration) error {
	if jitter <= 0 {
		return nil
	}
	prev := s.Next(neverRef)
	shortest := time.Duration(0)
	for range jitterSamples {
		n := s.Next(prev)
		if n.IsZero() {
			break
		}
		if d := n.Sub(prev); shortest == 0 || d < shortest {
			shortest = d
		}
		prev = n
	}
	if shortest > 0 && jitter >= shortest {
		return fmt.Errorf("must be shorter than the schedule's shortest interval between two runs, %s", shortest)
	}
	return nil
}
