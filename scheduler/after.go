package scheduler

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// Tasks that run after others (spec.CronTask.After) have no schedule: on
// each sweep the leader arms them. For such a task B:
//
//   - B's floor is the latest of: when the leader first saw B's after list
//     (a kept notice, so that declaring after does not answer last week's
//     successes), and the latest scheduled time in B's newest runs;
//   - for each parent, the earliest success that finished after the floor;
//   - when every parent has one, B is due at the latest of those finishing
//     times: SetNextExec moves B's next_exec from none to that time, and
//     the occurrence claim that follows is the usual compare-and-swap, so
//     the time runs once however many leaders arm it;
//   - each armed time is also recorded as a notice, which fences a second
//     arming of a time B already ran whose run its history no longer
//     shows (history_limit trimmed it after a later retry).
//
// A single parent thus triggers B once per success; several parents
// trigger B once each time all of them have succeeded since B's last
// trigger. B stays armed while a run of its own holds it back (overlap
// forbid) or it is paused, and no further time is armed meanwhile.
const (
	// afterFirstPage is how many runs of a parent a trigger reads first;
	// each further read takes four times as many, up to the whole history.
	afterFirstPage = 4
	// afterOwnRuns is how many of B's newest runs give its latest
	// scheduled time.
	afterOwnRuns = 4
	// afterFenceLoops bounds the fenced times one task skips in one pass.
	afterFenceLoops = 8
)

// afterDeclared is the kept notice of when the leader first saw task
// name's after list.
func afterDeclared(name string, after []string) string {
	sum := sha256.Sum256([]byte(strings.Join(after, "\x00")))
	return backends.NoticeKeep + "after/" + name + "/" + hex.EncodeToString(sum[:8])
}

// afterArmed is the notice of time at armed for task name.
func afterArmed(name string, at time.Time) string {
	return "after/" + name + "/" + strconv.FormatInt(at.UnixMicro(), 10)
}

// triggerAfter arms the tasks of backend bn that run after others and
// whose parents all succeeded since their last trigger.
func (s *Scheduler) triggerAfter(ctx context.Context, bn string, cb *cronBackend) {
	if s.cfg.After == nil || s.cfg.Notices == nil {
		return
	}
	names := s.cfg.After(bn)
	if len(names) == 0 {
		return
	}
	states, err := cb.ObserveCrons(ctx, names)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("reading the tasks that run after others failed", "backend", bn, "error", err)
		}
		return
	}
	slices.Sort(names)
	var tasks []*task
	var parents []string
	for _, name := range names {
		st := states[name]
		if st == nil {
			continue
		}
		t, err := parseTask(name, st.Def)
		if err != nil || len(t.def.After) == 0 {
			continue // not applied, or applied with a schedule
		}
		tasks = append(tasks, t)
		for _, p := range t.def.After {
			if states[p] == nil && !slices.Contains(parents, p) {
				parents = append(parents, p)
			}
		}
	}
	if len(parents) > 0 {
		more, err := cb.ObserveCrons(ctx, parents)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("reading the tasks that others run after failed", "backend", bn, "error", err)
			}
			return
		}
		maps.Copy(states, more)
	}
	ordered := inOrder(states)
	for _, t := range tasks {
		if !s.leading() {
			return
		}
		if err := s.triggerOne(ctx, cb, t, states[t.name].NextExec, ordered); err != nil && ctx.Err() == nil {
			s.log.Warn("arming a task that runs after others failed", "task", t.name, "error", err)
		}
	}
}

// inOrder reports, for each applied task of states, whether its runs
// finish in the order they start (overlap forbid or replace): the history
// of such a parent is read only back to the floor.
func inOrder(states map[string]*backends.CronState) map[string]bool {
	out := make(map[string]bool, len(states))
	for name, st := range states {
		if st == nil {
			continue
		}
		if pt, err := parseTask(name, st.Def); err == nil && pt.def.Overlap != spec.OverlapAllow {
			out[name] = true
		}
	}
	return out
}

// triggerOne arms t if its parents call for it; armed is its next_exec
// and ordered tells the parents whose runs finish in order (inOrder).
func (s *Scheduler) triggerOne(ctx context.Context, cb *cronBackend, t *task, armed time.Time, ordered map[string]bool) error {
	last, err := latestScheduled(ctx, cb, t.name)
	if err != nil {
		return err
	}
	if !armed.IsZero() {
		// Waiting for its claim. A time that a run of the task already
		// answered (a second arming) is cleared instead, or its refused
		// claim would keep it due.
		if !last.Before(armed) {
			if _, err := cb.SetNextExec(ctx, t.name, armed, time.Time{}); err != nil {
				return err
			}
		}
		return nil
	}
	since, err := s.afterSince(ctx, t)
	if err != nil {
		return err
	}
	floor := later(since, last)
	for range afterFenceLoops {
		at, ok, err := parentsSucceeded(ctx, cb, t, floor, ordered)
		if err != nil || !ok {
			return err
		}
		fence := afterArmed(t.name, at)
		marked, err := s.cfg.Notices.NoticesMarked(ctx, []string{fence})
		if err != nil {
			return err
		}
		if _, done := marked[fence]; done {
			floor = at // armed before: look for a later trigger
			continue
		}
		set, err := cb.SetNextExec(ctx, t.name, time.Time{}, at)
		if err != nil || !set {
			return err // another leader armed it first
		}
		if _, err := s.cfg.Notices.MarkNotice(ctx, fence); err != nil {
			return err
		}
		s.log.Info("triggered", "task", t.name, "after", t.def.After, "scheduled_at", at)
		return nil
	}
	return nil
}

// afterSince is when the leader first saw t's after list (backend time of
// the cluster store), recorded once and remembered here.
func (s *Scheduler) afterSince(ctx context.Context, t *task) (time.Time, error) {
	id := afterDeclared(t.name, t.def.After)
	if at, ok := s.afterSeen[id]; ok {
		return at, nil
	}
	at, err := s.cfg.Notices.MarkNotice(ctx, id)
	if err != nil {
		return time.Time{}, err
	}
	s.afterSeen[id] = at
	return at, nil
}

// latestScheduled is the latest scheduled time among task's newest runs
// (zero: none).
func latestScheduled(ctx context.Context, cb *cronBackend, task string) (time.Time, error) {
	runs, err := cb.History(ctx, task, afterOwnRuns)
	if err != nil {
		return time.Time{}, err
	}
	var last time.Time
	for _, r := range runs {
		last = later(last, r.ScheduledAt)
	}
	return last, nil
}

// parentsSucceeded returns, when every parent of t has a success that
// finished after floor, the latest of the earliest such successes.
func parentsSucceeded(ctx context.Context, cb *cronBackend, t *task, floor time.Time, ordered map[string]bool) (time.Time, bool, error) {
	var at time.Time
	for _, p := range t.def.After {
		first, ok, err := firstSuccessAfter(ctx, cb, p, floor, ordered[p])
		if err != nil || !ok {
			return time.Time{}, false, err
		}
		at = later(at, first)
	}
	return at, true, nil
}

// firstSuccessAfter is the earliest finishing time, after floor, of a
// succeeded run of task. History is newest first by start; a task whose
// runs never overlap (ordered: overlap forbid or replace) finishes them in
// that order, so the read stops at the first run that ended by floor. One
// whose runs may overlap is read whole.
func firstSuccessAfter(ctx context.Context, cb *cronBackend, task string, floor time.Time, ordered bool) (time.Time, bool, error) {
	whole := !ordered
	n := afterFirstPage
	if whole {
		n = 0
	}
	for {
		runs, err := cb.History(ctx, task, n)
		if err != nil {
			return time.Time{}, false, err
		}
		var first time.Time
		stopped := false
		for _, r := range runs {
			if r.Status == backends.RunRunning {
				continue
			}
			if !r.FinishedAt.After(floor) {
				if !whole {
					stopped = true
					break
				}
				continue
			}
			if r.Status == backends.RunSucceeded && (first.IsZero() || r.FinishedAt.Before(first)) {
				first = r.FinishedAt
			}
		}
		if stopped || n == 0 || len(runs) < n {
			return first, !first.IsZero(), nil
		}
		n *= 4
		if n > 1024 {
			n = 0
		}
	}
}

// later is the later of two times.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
