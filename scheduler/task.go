package scheduler

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/internal/child"
	"github.com/coordd/coordd/semaphore"
	"github.com/coordd/coordd/spec"
)

// task is a parsed applied definition.
type task struct {
	name  string
	def   spec.CronTask
	sched spec.Schedule
}

func parseTask(name string, raw json.RawMessage) (*task, error) {
	t := &task{name: name}
	if err := json.Unmarshal(raw, &t.def); err != nil {
		return nil, fmt.Errorf("cron %q: applied definition: %w", name, err)
	}
	t.def.Name = name
	if t.def.RunLease <= 0 {
		t.def.RunLease = defaultRunLease
	}
	if t.def.MaxAttempts < 1 {
		t.def.MaxAttempts = 1
	}
	sched, err := spec.TaskSchedule(&t.def)
	if err != nil {
		return nil, fmt.Errorf("cron %q: applied schedule: %w", name, err)
	}
	t.sched = sched
	return t, nil
}

// retryable reports whether r, the latest attempt of its scheduled time,
// which ended failed, timed out or lost, gets another attempt
// (spec.CronTask.Retryable).
func (t *task) retryable(r backends.Run) bool {
	return t.def.Retryable(r.Status == backends.RunLost, r.Attempt)
}

// scheduledAtLayout is the format of COORDD_SCHEDULED_AT: RFC 3339 in UTC
// with exactly six fractional digits. Every backend keeps scheduled times
// to the microsecond, so the value is exact and has one width everywhere
// (a manual run's time comes from the backend's clock: milliseconds on
// SQLite, microseconds on MySQL and Redis).
const scheduledAtLayout = "2006-01-02T15:04:05.000000Z07:00"

// env is the child's environment for occ. With a semaphore, slot is the
// slot it holds: COORDD_FENCING_TOKEN is then the slot's number, the one a
// resource guarded by the semaphore compares with those of `sem run`
// holders, and the task's own number is COORDD_TASK_FENCING_TOKEN.
func env(t *task, occ backends.Occurrence, slot *semaphore.Lease) []string {
	keys := make([]string, 0, len(t.def.Env))
	for k := range t.def.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]string, 0, len(keys)+8)
	for _, k := range keys {
		out = append(out, k+"="+t.def.Env[k])
	}
	taskFencing := strconv.FormatInt(occ.Fencing, 10)
	out = append(out,
		child.VarTask+"="+t.name,
		child.VarScheduledAt+"="+occ.ScheduledAt.UTC().Format(scheduledAtLayout),
		child.VarAttempt+"="+strconv.Itoa(occ.Attempt),
		child.VarRunID+"="+occ.RunID,
		child.VarTaskFencingToken+"="+taskFencing,
	)
	if slot == nil {
		return append(out, child.VarFencingToken+"="+taskFencing)
	}
	return append(out,
		child.VarSemaphore+"="+t.def.Semaphore,
		child.VarSlot+"="+strconv.Itoa(slot.Slot),
		child.VarFencingToken+"="+strconv.FormatInt(slot.Fencing, 10),
	)
}
