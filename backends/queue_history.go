package backends

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"time"
)

// A queue's history: the errors of a job's failed attempts, and what the
// workers of every host did with the queue's jobs minute by minute.

// MaxAttemptErrors is how many failed attempts a job keeps, the newest:
// a job retried without end (max_attempts 0) stays bounded.
const MaxAttemptErrors = 10

// AttemptError is one failed attempt of a job: what its worker reported
// (the error and the end of the command's stderr, as last_error holds
// it), when by the backend's clock, and which worker.
type AttemptError struct {
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
	// Worker is the claim's owner token without its random part: the
	// worker's host id, and ":" and its pid when it gave one. Empty for an
	// owner token that names no host.
	Worker string `json:"worker,omitempty"`
	Error  string `json:"error"`
}

// OwnerWorker is the worker part of an owner token: what comes before its
// last ":" (queue.WorkerOptions.Owner), or "" for a bare random token.
func OwnerWorker(owner string) string {
	if i := strings.LastIndexByte(owner, ':'); i > 0 {
		return owner[:i]
	}
	return ""
}

// storedAttempt is an AttemptError as the stores keep it: a JSON array of
// these, the time in microseconds written as a string so that Redis' Lua
// (whose numbers are doubles printed with 14 digits) keeps it exact.
type storedAttempt struct {
	Attempt  int    `json:"attempt"`
	AtMicros int64  `json:"at_us,string"`
	Worker   string `json:"worker,omitempty"`
	Error    string `json:"error"`
}

// AppendAttemptError adds e to a stored history (the text of a JSON array,
// "" for none) and keeps the newest MaxAttemptErrors. A history that does
// not parse is replaced: it is a record for people, never a reason to
// fail a retry.
func AppendAttemptError(stored string, e AttemptError) string {
	var h []storedAttempt
	if stored != "" {
		_ = json.Unmarshal([]byte(stored), &h)
	}
	h = append(h, storedAttempt{Attempt: e.Attempt, AtMicros: e.At.UnixMicro(), Worker: e.Worker, Error: e.Error})
	if n := len(h) - MaxAttemptErrors; n > 0 {
		h = h[n:]
	}
	b, _ := json.Marshal(h)
	return string(b)
}

// ParseAttemptErrors reads a stored history, oldest first; nil for none
// or for text that does not parse.
func ParseAttemptErrors(stored string) []AttemptError {
	if stored == "" {
		return nil
	}
	var h []storedAttempt
	if err := json.Unmarshal([]byte(stored), &h); err != nil {
		return nil
	}
	out := make([]AttemptError, len(h))
	for i, a := range h {
		out[i] = AttemptError{Attempt: a.Attempt, At: time.UnixMicro(a.AtMicros).UTC(), Worker: a.Worker, Error: a.Error}
	}
	return out
}

// QueueCount is what workers did with a queue's jobs: jobs processed
// (acked) and attempts that failed (retried or moved to the dead set).
type QueueCount struct {
	Processed int64 `json:"processed"`
	Failed    int64 `json:"failed"`
}

// IsZero reports whether c counts nothing.
func (c QueueCount) IsZero() bool { return c.Processed == 0 && c.Failed == 0 }

// CountedQueues lists the queues of counts that count something, sorted,
// the order in which a store adds them (two writers then take their locks
// in one order).
func CountedQueues(counts map[string]QueueCount) []string {
	names := make([]string, 0, len(counts))
	for q, c := range counts {
		if !c.IsZero() {
			names = append(names, q)
		}
	}
	sort.Strings(names)
	return names
}

// QueueMinute is one minute of a queue's counts; Minute is its start by
// the backend's clock.
type QueueMinute struct {
	Minute time.Time `json:"minute"`
	QueueCount
}

// QueueCounts is a queue's counts, minute by minute, as read at one
// instant of the backend's clock.
type QueueCounts struct {
	Minutes []QueueMinute `json:"minutes"`
	Now     time.Time     `json:"now"`
}

// Since sums the minutes that began within d before Now (the current
// minute included).
func (c QueueCounts) Since(d time.Duration) QueueCount {
	var sum QueueCount
	from := c.Now.Add(-d)
	for _, m := range c.Minutes {
		if !m.Minute.Before(from.Truncate(time.Minute)) {
			sum.Processed += m.Processed
			sum.Failed += m.Failed
		}
	}
	return sum
}

// QueueCountRetention is how long minute counts are kept.
const QueueCountRetention = 7 * 24 * time.Hour

// QueueCounters keeps the counts of every queue a backend holds. Workers
// count in memory and add what they counted every few seconds
// (queue.Client), so a job's ack or retry costs the store nothing more; a
// worker killed at once loses its last seconds of counts. The counts are
// a record for people, never used to decide anything.
type QueueCounters interface {
	// AddQueueCounts adds each queue's counts to the minute that holds the
	// backend's now. A queue absent from the store is counted all the
	// same (its worker counted it).
	AddQueueCounts(ctx context.Context, counts map[string]QueueCount) error
	// ReadQueueCounts reads queue's minutes that began within since of the
	// backend's now, oldest first.
	ReadQueueCounts(ctx context.Context, queue string, since time.Duration) (QueueCounts, error)
	// PruneQueueCounts deletes the minutes older than olderThan
	// (QueueCountRetention); a store whose records expire on their own
	// (Redis) does nothing and returns 0.
	PruneQueueCounts(ctx context.Context, olderThan time.Duration) (int, error)
}
