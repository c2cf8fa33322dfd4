package backends

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/coordd/coordd/spec"
)

// CronState is what a backend observes of one cron task.
type CronState struct {
	Name string `json:"name"`
	// Def is the task definition as applied (canonical JSON).
	Def      json.RawMessage `json:"def"`
	NextExec time.Time       `json:"next_exec"`
	// Running counts occurrences whose lease has not expired.
	Running int `json:"running"`
	// Paused is the operator's pause (coordd cron pause), nil when none.
	// A task is paused while it has one or while Def says paused: true
	// (IsPaused).
	Paused *CronPause `json:"paused,omitempty"`
}

// IsPaused reports whether the task is paused, by an operator or by its
// applied definition.
func (c *CronState) IsPaused() bool { return c.Paused != nil || DefPaused(c.Def) }

// Pause is an operator's pause of one cron task or queue. It is stored
// beside the object's definition, not in it: an apply rewrites the
// definition and keeps the pause; deleting the object drops it.
type Pause struct {
	// Host is the host id of whoever paused it.
	Host string `json:"host"`
	// At is the backend's time of the pause.
	At     time.Time `json:"at"`
	Reason string    `json:"reason"`
}

// CronPause is a cron task's Pause.
type CronPause = Pause

// MaxPauseReason bounds a pause's reason, in bytes.
const MaxPauseReason = 1024

// DefPaused reports whether an applied definition (spec.CronTask as JSON)
// says paused: true. The backends make the same test in their claims.
func DefPaused(def json.RawMessage) bool {
	var d struct {
		Paused bool `json:"paused"`
	}
	return json.Unmarshal(def, &d) == nil && d.Paused
}

// CheckPause checks a pause before anything is written: a host id
// (spec.CheckHostID) and a reason of at most MaxPauseReason bytes.
func CheckPause(name, host, reason string) error {
	if name == "" {
		return errors.New("empty name")
	}
	if err := spec.CheckHostID(host); err != nil {
		return err
	}
	if len(reason) > MaxPauseReason {
		return fmt.Errorf("reason is %d bytes, at most %d", len(reason), MaxPauseReason)
	}
	if !utf8.ValidString(reason) {
		return errors.New("reason is not valid UTF-8")
	}
	return nil
}

// DueTask is a task whose next_exec is at or before backend now.
type DueTask struct {
	Name     string
	Def      json.RawMessage
	NextExec time.Time
}

// Occurrence is one attempt of one scheduled time of one task. The triple
// (Task, ScheduledAt, Attempt) is unique in the backend: that row, not the
// leader, is what keeps two hosts from starting the same attempt.
type Occurrence struct {
	Task        string    `json:"task"`
	ScheduledAt time.Time `json:"scheduled_at"`
	// Attempt counts from 1; a retry is a new attempt of the same time.
	Attempt int    `json:"attempt"`
	RunID   string `json:"run_id"`
	// Fencing is strictly increasing per task across all runs.
	Fencing   int64     `json:"fencing"`
	Owner     string    `json:"owner"`
	Host      string    `json:"host"`
	Manual    bool      `json:"manual,omitempty"`
	StartedAt time.Time `json:"started_at"`
	ExpiresAt time.Time `json:"expires_at"` // the run lease, backend time
}

// Run statuses.
const (
	RunRunning   = "running"
	RunSucceeded = "succeeded"
	RunFailed    = "failed"
	RunTimedOut  = "timeout"
	RunLost      = "lost"    // its host died mid-run
	RunSkipped   = "skipped" // overlap forbid, catch_up none, semaphore busy
	// RunReplaced: overlap replace stopped the run for the next scheduled
	// time; not retried, not a failure event.
	RunReplaced = "replaced"
)

// RunResult is how an occurrence ended.
type RunResult struct {
	Status   string `json:"status"`
	ExitCode int    `json:"exit_code"`
	Error    string `json:"error,omitempty"`
	// Output is the tail of the run's stdout and stderr (at most 64 KiB).
	Output []byte `json:"-"`
}

// Run is one row of a task's history.
type Run struct {
	Occurrence
	RunResult
	FinishedAt time.Time `json:"finished_at"`
}

// ClaimRequest asks to start (or skip) one attempt.
type ClaimRequest struct {
	Task string
	// ScheduledAt is the due next_exec being claimed. For attempt 1 of a
	// scheduled run the claim is a compare-and-swap on it.
	ScheduledAt time.Time
	// Next is next_exec after this claim (attempt 1, not manual).
	Next    time.Time
	Attempt int
	Owner   string
	Host    string
	Lease   time.Duration
	// Manual: `coordd cron run`. No compare-and-swap; ScheduledAt is
	// ignored and the backend's now is used.
	Manual bool
	// Skip, when not empty, records the occurrence as skipped with this
	// reason (and still advances next_exec) instead of starting it.
	Skip string
	// Exclusive (overlap forbid): the claim is made only while no
	// occurrence of the task holds a live run lease, checked in the same
	// transaction or script as the claim; otherwise it is ErrHeld and
	// nothing is written. Ignored with Skip.
	Exclusive bool
}

// ClaimResult is the outcome of one request of ClaimOccurrences: the
// occurrence, or the error ClaimOccurrence would have returned.
type ClaimResult struct {
	Occurrence Occurrence
	Err        error
}

// Extension asks to renew one run lease (ExtendOccurrences).
type Extension struct {
	Occurrence Occurrence
	Lease      time.Duration
}

// ExtendResult is the outcome of one Extension: the new expiry, or the
// error that renewing it alone would have returned.
type ExtendResult struct {
	ExpiresAt time.Time
	Err       error
}

// Finish is one result to record (FinishOccurrences).
type Finish struct {
	Occurrence Occurrence
	Result     RunResult
}

// Crons is the cron tasks a backend holds: reconcile's view (observe,
// put, delete), operators' pause, and the scheduler's runtime (claim,
// extend, finish, reap, history).
//
// A paused task keeps its definition and its next_exec, which stays at the
// first time missed while paused: once resumed, the missed times follow
// the task's catch_up rule, as after a downtime. ClaimOccurrence refuses a
// paused task's scheduled claims and retries in the claim itself.
type Crons interface {
	// ObserveCrons observes many tasks; absent ones are missing from the map.
	ObserveCrons(ctx context.Context, names []string) (map[string]*CronState, error)
	// PutCron stores the definition. When resetNext is true (a new task, a
	// schedule or timezone change, a repair) it also sets next_exec. An
	// operator's pause of the task is kept.
	PutCron(ctx context.Context, name string, def json.RawMessage, next time.Time, resetNext bool) error
	// SetNextExec sets task name's next_exec to to (zero: none) if it is
	// from (zero: none), in one conditional write, and reports whether it
	// did; an absent task is not set (false). The scheduler arms a task
	// that runs after others with it, and clears a time that an earlier
	// run already answered, without touching the definition that an
	// apply may be rewriting.
	SetNextExec(ctx context.Context, name string, from, to time.Time) (bool, error)
	// DeleteCron removes the task, and an operator's pause of it with it.
	// Running occurrences keep their rows and finish; absent is not an
	// error.
	DeleteCron(ctx context.Context, name string) error

	// PauseCron records an operator's pause of task name by host (a host
	// id) for reason, at backend now. A task already paused by an operator
	// keeps that first pause, which is returned with changed false. An
	// absent task is ErrNotFound.
	PauseCron(ctx context.Context, name, host, reason string) (p CronPause, changed bool, err error)
	// ResumeCron removes the operator's pause of task name and returns it
	// (nil: there was none). paused: true in the definition is the spec's
	// and stays. An absent task is ErrNotFound.
	ResumeCron(ctx context.Context, name string) (*CronPause, error)

	// DueTasks lists tasks whose next_exec is at or before backend now,
	// earliest first, and the earliest next_exec of the others (zero when
	// none) so that the scheduler can sleep until then. Paused tasks are
	// not listed (their next_exec may still count as the earliest: a
	// scheduler then wakes once for nothing).
	DueTasks(ctx context.Context, limit int) (due []DueTask, nextAt time.Time, err error)
	// ClaimOccurrence records the occurrence leased to Owner and bumps the
	// task's fencing counter, atomically:
	//
	//   - attempt 1 of a scheduled run moves next_exec from ScheduledAt to
	//     Next (a compare-and-swap: ErrConflict when it moved);
	//   - attempt > 1 (of a scheduled or, with Manual, a manual run)
	//     requires attempt-1 of the same ScheduledAt to have ended failed,
	//     timeout or lost (ErrConflict otherwise) and leaves next_exec alone;
	//   - attempt 1 of a manual run is scheduled at backend now, moved
	//     forward by a microsecond at a time past any existing attempt 1 or
	//     the pending next_exec it would collide with, and leaves next_exec
	//     alone.
	//
	// While the task is paused (PauseCron, or paused: true in its stored
	// definition), every claim but attempt 1 of a manual run (a scheduled
	// run, a skip, a retry) is ErrPaused and writes nothing, next_exec
	// included: the pause is read in the same transaction or script as the
	// claim. A manual run is an operator's own decision and is not refused.
	//
	// With Skip the occurrence is recorded as skipped and finished, without
	// a lease, and the task's history is trimmed. An existing occurrence
	// with the same key is ErrConflict (another host claimed it first); an
	// absent task is ErrNotFound; with Exclusive, a live run of the task
	// is ErrHeld.
	ClaimOccurrence(ctx context.Context, req ClaimRequest) (Occurrence, error)
	// ClaimOccurrences makes many claims in one round trip and one commit
	// (a burst of due tasks must not pay one store write per task). Each
	// request, except a manual one (ErrUnsupported: those are claimed one
	// at a time), follows ClaimOccurrence's rules and gets the result
	// ClaimOccurrence would have given, the requests being decided in the
	// order given, atomically each; concurrent claimers, batched or not,
	// never claim one occurrence twice. The returned slice has one result
	// per request. A non-nil error is about the call as a whole: no claim
	// may be relied on (as with a ClaimOccurrence whose answer was lost,
	// one that was made anyway is reaped when its run lease expires).
	ClaimOccurrences(ctx context.Context, reqs []ClaimRequest) ([]ClaimResult, error)
	// ExtendOccurrences renews many run leases in one round trip: each
	// extension renews its Owner's run lease to backend now + Lease
	// (ErrLost when Owner no longer holds the run), with one result per
	// extension; a non-nil error is about the call as a whole (no lease
	// may be taken as renewed). ExtendOne renews one.
	ExtendOccurrences(ctx context.Context, exts []Extension) ([]ExtendResult, error)
	// FinishOccurrences records many results in as few round trips and
	// commits as the backend allows: each result is recorded only if its
	// occurrence's Owner still holds the run (ErrLost otherwise), and the
	// task's history is trimmed to its history_limit. It returns one
	// error per finish (nil: recorded); a non-nil error is about the call
	// as a whole (no result may be taken as recorded). FinishOne records
	// one.
	FinishOccurrences(ctx context.Context, fins []Finish) ([]error, error)
	// ExpiredOccurrences lists running occurrences whose run lease expired:
	// their host was lost.
	ExpiredOccurrences(ctx context.Context, limit int) ([]Occurrence, error)
	// ReapOccurrence marks an expired running occurrence as lost, only if it
	// is still running and expired (ErrConflict otherwise).
	ReapOccurrence(ctx context.Context, occ Occurrence) error
	// Running lists task's occurrences whose run lease is live.
	Running(ctx context.Context, task string) ([]Occurrence, error)
	// History lists task's runs, newest first.
	History(ctx context.Context, task string, limit int) ([]Run, error)
	// PendingRetries lists, across all tasks, the latest attempt of each
	// (task, scheduled_at) when it ended failed, timeout or lost and no
	// higher attempt exists, earliest finished first, up to limit
	// (non-positive: all), without output. Manual runs are included. The
	// caller decides from the task's max_attempts, retry_backoff and
	// on_host_loss whether to claim attempt+1. A run trimmed away by
	// history_limit is no longer listed.
	PendingRetries(ctx context.Context, limit int) ([]Run, error)
}
