package backends

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// The rules of the cron runtime (Crons) that every store follows, written
// once so that the stores agree and their errors read alike: which
// statuses end a run, how a run is named, how much output is kept, how a
// claim is checked and why one is refused, and the parts of the batch
// calls that do not depend on the store.

// MaxRunOutput is the most of a run's output a store keeps: the tail,
// where the error usually is.
const MaxRunOutput = 64 << 10

// OutputTail returns the last MaxRunOutput bytes of out.
func OutputTail(out []byte) []byte {
	if len(out) > MaxRunOutput {
		return out[len(out)-MaxRunOutput:]
	}
	return out
}

// ManualProbes bounds the search for a free scheduled time of a manual
// run, one microsecond at a time from the store's now (see
// Crons.ClaimOccurrence).
const ManualProbes = 1000

// CronFinal reports whether status ends a run: the statuses
// FinishOccurrences records.
func CronFinal(status string) bool {
	switch status {
	case RunSucceeded, RunFailed, RunTimedOut, RunLost, RunSkipped, RunReplaced:
		return true
	}
	return false
}

// NewCronRunID returns a new occurrence's run id: 16 random bytes in hex.
func NewCronRunID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// CheckClaim checks a claim before anything is sent: a task, an owner, an
// attempt from 1, and a lease of at least a microsecond unless the claim
// is a skip.
func CheckClaim(req ClaimRequest) error {
	switch {
	case req.Task == "":
		return errors.New("empty task name")
	case req.Owner == "":
		return errors.New("empty owner")
	case req.Attempt < 1:
		return fmt.Errorf("attempt %d: must be at least 1", req.Attempt)
	case req.Skip == "" && req.Lease < time.Microsecond:
		return fmt.Errorf("lease %v: must be at least 1µs", req.Lease)
	}
	return nil
}

// ClaimError is a claim's error: err, saying which task and attempt.
func ClaimError(req ClaimRequest, err error) error {
	return fmt.Errorf("claim cron %q attempt %d: %w", req.Task, req.Attempt, err)
}

// OccurrenceError is the error of a call on one occurrence (verb: extend,
// finish, reap): err, saying which task and attempt.
func OccurrenceError(verb string, occ Occurrence, err error) error {
	return fmt.Errorf("%s cron %q attempt %d: %w", verb, occ.Task, occ.Attempt, err)
}

// ClaimRefusal is why a store refused a claim without failing: each has
// the sentinel error callers test (Err). The values are stable: a store's
// script may report them as numbers.
type ClaimRefusal int

// The refusals, each with the sentinel its error wraps.
const (
	// ClaimTaskAbsent: the task does not exist (ErrNotFound).
	ClaimTaskAbsent ClaimRefusal = 1 + iota
	// ClaimNextMoved: next_exec is no longer the claimed ScheduledAt
	// (ErrConflict).
	ClaimNextMoved
	// ClaimTaken: the occurrence already exists (ErrConflict).
	ClaimTaken
	// ClaimPreviousNotFailed: attempt-1 of the time has not ended failed,
	// timeout or lost (ErrConflict).
	ClaimPreviousNotFailed
	// ClaimNoManualTime: no free time within ManualProbes microseconds for
	// a manual run (ErrConflict).
	ClaimNoManualTime
	// ClaimRunLive: an Exclusive claim while a run of the task holds a
	// live lease (ErrHeld).
	ClaimRunLive
	// ClaimPaused: the task is paused (ErrPaused).
	ClaimPaused
)

// Err is the refusal of req as an error; ClaimError adds the task and
// attempt.
func (r ClaimRefusal) Err(req ClaimRequest) error {
	switch r {
	case ClaimTaskAbsent:
		return ErrNotFound
	case ClaimNextMoved:
		return fmt.Errorf("next_exec is no longer %s: %w", req.ScheduledAt.UTC().Format(time.RFC3339Nano), ErrConflict)
	case ClaimTaken:
		return fmt.Errorf("occurrence already claimed: %w", ErrConflict)
	case ClaimPreviousNotFailed:
		return fmt.Errorf("attempt %d has not ended unsuccessfully: %w", req.Attempt-1, ErrConflict)
	case ClaimNoManualTime:
		return fmt.Errorf("no free time for a manual run: %w", ErrConflict)
	case ClaimRunLive:
		return fmt.Errorf("a run of the task is still live: %w", ErrHeld)
	case ClaimPaused:
		return ErrPaused
	}
	return fmt.Errorf("claim refused for an unknown reason %d", int(r))
}

// Refused reports whether a claim's error is the claim being refused
// (ErrConflict, ErrNotFound, ErrHeld, ErrPaused), rather than the store
// failing.
func Refused(err error) bool {
	return errors.Is(err, ErrConflict) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrHeld) || errors.Is(err, ErrPaused)
}

// ClaimsError is the error of a ClaimOccurrences call as a whole: err,
// saying how many claims it was making.
func ClaimsError(n int, err error) error {
	return fmt.Errorf("claim %d cron occurrences: %w", n, err)
}

// ClaimBatch is what every store's ClaimOccurrences shares: each request
// is checked (CheckClaim), a manual one is refused with ErrUnsupported
// (manual runs are claimed one at a time, by ClaimOccurrence), and claim
// makes the others, in the order given, in one call; their results go
// back in place. claim is not called when no request is left; its error
// (a ClaimsError) fails the whole call.
func ClaimBatch(reqs []ClaimRequest, claim func([]ClaimRequest) ([]ClaimResult, error)) ([]ClaimResult, error) {
	out := make([]ClaimResult, len(reqs))
	var batch []ClaimRequest
	var at []int // index in reqs of each batch request
	for i, req := range reqs {
		err := CheckClaim(req)
		if err == nil && req.Manual {
			err = fmt.Errorf("manual runs are claimed one at a time: %w", ErrUnsupported)
		}
		if err != nil {
			out[i].Err = ClaimError(req, err)
			continue
		}
		batch, at = append(batch, req), append(at, i)
	}
	if len(batch) == 0 {
		return out, nil
	}
	res, err := claim(batch)
	if err != nil {
		return nil, err
	}
	if len(res) != len(batch) {
		return nil, fmt.Errorf("claim %d cron occurrences: %d results", len(batch), len(res))
	}
	for j, r := range res {
		out[at[j]] = r
	}
	return out, nil
}

// ErrNotExpired is ReapOccurrence's refusal: the occurrence is not running
// with an expired lease (finished, extended or reaped meanwhile).
var ErrNotExpired = fmt.Errorf("not running with an expired lease: %w", ErrConflict)

// CheckFinish refuses a result whose status does not end a run.
func CheckFinish(f Finish) error {
	if !CronFinal(f.Result.Status) {
		return fmt.Errorf("finish cron %q: status %q does not end a run", f.Occurrence.Task, f.Result.Status)
	}
	return nil
}

// CheckExtension refuses an extension whose lease is under a microsecond.
func CheckExtension(e Extension) error {
	if e.Lease < time.Microsecond {
		return fmt.Errorf("extend cron %q: lease %v: must be at least 1µs", e.Occurrence.Task, e.Lease)
	}
	return nil
}

// ExtendOne renews one run lease through c's ExtendOccurrences: the
// contract has only the batch call, so one renewal follows its rules.
func ExtendOne(ctx context.Context, c interface {
	ExtendOccurrences(context.Context, []Extension) ([]ExtendResult, error)
}, occ Occurrence, lease time.Duration) (time.Time, error) {
	res, err := c.ExtendOccurrences(ctx, []Extension{{Occurrence: occ, Lease: lease}})
	if err != nil {
		return time.Time{}, OccurrenceError("extend", occ, err)
	}
	return res[0].ExpiresAt, res[0].Err
}

// FinishOne records one result through c's FinishOccurrences: the
// contract has only the batch call, so one result follows its rules.
func FinishOne(ctx context.Context, c interface {
	FinishOccurrences(context.Context, []Finish) ([]error, error)
}, occ Occurrence, res RunResult) error {
	errs, err := c.FinishOccurrences(ctx, []Finish{{Occurrence: occ, Result: res}})
	if err != nil {
		return OccurrenceError("finish", occ, err)
	}
	return errs[0]
}

// CheckSetNextExec checks a SetNextExec request before anything is
// written: a task name, and two different times (a store that counts
// changed rows would report a write of the same time as no match).
func CheckSetNextExec(name string, from, to time.Time) error {
	if name == "" {
		return errors.New("set next_exec: empty name")
	}
	if from.Equal(to) {
		return fmt.Errorf("set next_exec of cron %q: from and to are both %v", name, from)
	}
	return nil
}
