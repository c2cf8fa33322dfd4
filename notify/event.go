package notify

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// Event kinds.
const (
	KindCronFailed  = "cron.failed"  // the last attempt of a scheduled time exited non-zero
	KindCronTimeout = "cron.timeout" // it ran past its timeout
	KindCronLost    = "cron.lost"    // its host died and no attempt follows
	KindCronMissed  = "cron.missed"  // a scheduled time did not start within missed_after, or was skipped as missed
	KindJobDead     = "queue.dead"   // a job moved to the dead set
)

// OutputLimit bounds the output tail an event carries.
const OutputLimit = 4 << 10

// Event is one failure, as the webhook receives it (JSON) and the hook
// command reads it (COORDD_EVENT, COORDD_EVENT_*). Times are the
// backend's.
type Event struct {
	// ID is the same on every host and every delivery of the event: a
	// receiver that may see one twice (a leader died while delivering it)
	// drops the second by it.
	ID     string `json:"id"`
	Kind   string `json:"kind"`
	Object string `json:"object"` // "cron.NAME" or "queue.NAME"
	// At is when it happened: the run's end, the time of death, the time
	// a missed time became missed.
	At time.Time `json:"at"`
	// Notifier is the host that delivers the event.
	Notifier string `json:"notifier"`

	Task        string     `json:"task,omitempty"`
	ScheduledAt *time.Time `json:"scheduled_at,omitempty"`
	Attempt     int        `json:"attempt,omitempty"`
	Status      string     `json:"status,omitempty"`
	ExitCode    *int       `json:"exit_code,omitempty"`
	// Error is a run's error or a skip's reason, or a dead job's last
	// error (with its stderr tail).
	Error string `json:"error,omitempty"`
	// Output is the run's output tail (at most OutputLimit bytes, valid
	// UTF-8).
	Output string `json:"output,omitempty"`
	// Host ran the command (a cron run).
	Host  string `json:"host,omitempty"`
	RunID string `json:"run_id,omitempty"`

	Queue string `json:"queue,omitempty"`
	JobID int64  `json:"job_id,omitempty"`
	Key   string `json:"key,omitempty"`
}

// micros formats a time for an event id: µs since the epoch, which every
// backend keeps exactly.
func micros(t time.Time) string { return strconv.FormatInt(t.UnixMicro(), 10) }

// cronEvents finds the failure events in a task's recent history: the
// last attempt of a scheduled time that failed, timed out or was lost with
// no attempt to follow, and times skipped because they were missed. runs
// is newest first.
func cronEvents(t *spec.CronTask, runs []backends.Run) []Event {
	latest := map[int64]int{} // scheduled_at µs -> highest attempt seen
	for _, r := range runs {
		k := r.ScheduledAt.UnixMicro()
		latest[k] = max(latest[k], r.Attempt)
	}
	var out []Event
	for _, r := range runs {
		var kind string
		switch r.Status {
		case backends.RunFailed:
			kind = KindCronFailed
		case backends.RunTimedOut:
			kind = KindCronTimeout
		case backends.RunLost:
			kind = KindCronLost
		case backends.RunSkipped:
			if missedSkip(r.Error) {
				out = append(out, missedEvent(t, r.ScheduledAt, r.FinishedAt, r.Error))
			}
			continue
		default:
			continue
		}
		if latest[r.ScheduledAt.UnixMicro()] != r.Attempt || t.Retryable(r.Status == backends.RunLost, r.Attempt) {
			continue // another attempt follows, or came already
		}
		sched := r.ScheduledAt
		code := r.ExitCode
		ev := Event{
			ID:   "cron/" + t.Name + "/" + micros(r.ScheduledAt) + "/" + strconv.Itoa(r.Attempt),
			Kind: kind, Object: "cron." + t.Name, At: r.FinishedAt,
			Task: t.Name, ScheduledAt: &sched, Attempt: r.Attempt, Status: r.Status, ExitCode: &code,
			Error: r.Error, Output: tail(r.Output), Host: r.Host, RunID: r.RunID,
		}
		if r.Manual {
			ev.ID = "cron/" + t.Name + "/manual/" + r.RunID
		}
		out = append(out, ev)
	}
	return out
}

// missedSkip reports whether a skip's reason says the time was missed
// (starting_deadline, catch_up) rather than declined by policy (overlap
// forbid, a busy semaphore).
func missedSkip(reason string) bool {
	return strings.HasPrefix(reason, "missed") || strings.HasPrefix(reason, "catch_up")
}

// missedEvent is the event of scheduled time at of t, missed at when.
// Its id is the time's alone, so that the time seen overdue and then
// skipped as missed is one event.
func missedEvent(t *spec.CronTask, at, when time.Time, why string) Event {
	sched := at
	return Event{
		ID:   "cron/" + t.Name + "/" + micros(at) + "/missed",
		Kind: KindCronMissed, Object: "cron." + t.Name, At: when,
		Task: t.Name, ScheduledAt: &sched, Status: backends.RunSkipped, Error: why,
	}
}

// overdueEvent is the event of a task whose next time has not started
// missed_after after it (every host down, a pause forgotten, a stuck
// scheduler); ok is false while it is not overdue.
func overdueEvent(t *spec.CronTask, st *backends.CronState, now time.Time) (Event, bool) {
	h := t.OnFailure
	if st == nil || st.NextExec.IsZero() || h == nil || h.MissedAfter <= 0 {
		return Event{}, false
	}
	late := now.Sub(st.NextExec)
	if late <= h.MissedAfter {
		return Event{}, false
	}
	why := fmt.Sprintf("not started %s after its time", late.Round(time.Second))
	if st.IsPaused() {
		why += " (the task is paused)"
	}
	return missedEvent(t, st.NextExec, st.NextExec.Add(h.MissedAfter), why), true
}

// deadEvent is the event of a job in the dead set; its time of death is
// AvailableAt.
func deadEvent(q *spec.Queue, j backends.Job) Event {
	return Event{
		ID:   "queue/" + q.Name + "/" + strconv.FormatInt(j.ID, 10) + "/" + micros(j.AvailableAt),
		Kind: KindJobDead, Object: "queue." + q.Name, At: j.AvailableAt,
		Queue: q.Name, JobID: j.ID, Key: j.Key, Attempt: j.Attempt, Error: j.LastError,
	}
}

// tail is the end of out, at most OutputLimit bytes, cut at a rune
// boundary and with invalid UTF-8 replaced.
func tail(out []byte) string {
	if len(out) > OutputLimit {
		out = out[len(out)-OutputLimit:]
		for i := 0; i < 4 && len(out) > 0 && out[0]&0xC0 == 0x80; i++ {
			out = out[1:]
		}
	}
	return strings.ToValidUTF8(string(out), "\uFFFD")
}

// collect reads the events of one object from its backend.
func collect(ctx context.Context, b backends.Backend, o Object, now time.Time, historyDepth int) ([]Event, error) {
	switch {
	case o.Task != nil:
		c := b.Crons()
		if c == nil {
			return nil, fmt.Errorf("backend %q holds no cron tasks", b.Name())
		}
		runs, err := c.History(ctx, o.Task.Name, historyDepth)
		if err != nil {
			return nil, err
		}
		evs := cronEvents(o.Task, runs)
		states, err := c.ObserveCrons(ctx, []string{o.Task.Name})
		if err != nil {
			return nil, err
		}
		if ev, ok := overdueEvent(o.Task, states[o.Task.Name], now); ok {
			evs = append(evs, ev)
		}
		return evs, nil
	case o.Queue != nil:
		q := b.Queues()
		if q == nil {
			return nil, fmt.Errorf("backend %q holds no queues", b.Name())
		}
		// The newest dead jobs: the dead set is read oldest first, and an
		// operator may leave thousands in it.
		states, err := q.ObserveQueues(ctx, []string{o.Queue.Name})
		if err != nil {
			return nil, err
		}
		st := states[o.Queue.Name]
		if st == nil || st.Dead == 0 {
			return nil, nil
		}
		dead, err := q.DeadPage(ctx, o.Queue.Name, int(max(0, st.Dead-int64(historyDepth))), historyDepth, OutputLimit+1024)
		if err != nil {
			return nil, err
		}
		evs := make([]Event, 0, len(dead))
		for _, j := range dead {
			evs = append(evs, deadEvent(o.Queue, j.Job))
		}
		return evs, nil
	}
	return nil, nil
}
