package backends

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// LossState is what a backend that can lose its data knows about it: a
// marker key it writes once, and the hold on semaphores that a lost marker
// (or, on Redis, a restart or failover that may have lost writes) starts.
type LossState struct {
	// Marked: the marker exists. A backend that holds applied objects but
	// no marker lost its data (a restart without persistence, a flush).
	Marked bool `json:"marked"`
	// HoldUntil is the backend time before which semaphores must not be
	// re-created or granted (zero: no hold). It stays in the marker after
	// the hold ended.
	HoldUntil time.Time `json:"hold_until,omitzero"`
	// Cause says what started the hold: LossCauseLost or LossCauseChanged.
	Cause string `json:"cause,omitempty"`
	// Now is the backend's clock when the state was read.
	Now time.Time `json:"now"`
	// RunID identifies the server process that wrote the marker (Redis
	// run_id); it changes on every restart.
	RunID string `json:"run_id,omitempty"`
	// Changed: the marker names another server process or replication
	// history than the one that answered (Redis: a restart, or a replica
	// promoted), and nobody has handled that yet; MarkLoss does.
	Changed bool `json:"changed,omitempty"`
	// TracksChanges: the backend tells a restart or failover that kept the
	// marker (Redis), and Hold is the hold such a change starts: the
	// longest lease MarkLoss last recorded (negative: none recorded yet).
	TracksChanges bool          `json:"-"`
	Hold          time.Duration `json:"-"`
	// Wrote: this MarkLoss call wrote the marker (it was missing), or
	// handled a change.
	Wrote bool `json:"-"`
}

// What started a hold (LossState.Cause).
const (
	// LossCauseLost: the marker was missing, the data is gone (a restart
	// without persistence, a flush); the semaphores are re-created when
	// the hold ends.
	LossCauseLost = "lost"
	// LossCauseChanged: the server restarted or a replica took over, and
	// the last writes before it may be lost; the semaphores stay, but no
	// slot is granted until the hold ends.
	LossCauseChanged = "changed"
)

// Holding reports whether semaphores must not be re-created yet.
func (l LossState) Holding() bool { return l.HoldUntil.After(l.Now) }

// LossRecreateGrace is how long after a hold ended a semaphore missing from
// the backend still counts as on its way back (the leader re-creates it
// just after the hold, or at its next resync, a minute at most by
// default), rather than as never applied.
const LossRecreateGrace = 90 * time.Second

// MissingHold explains a semaphore missing from the backend named backend
// in this state: a hold in force, or one that ended within
// LossRecreateGrace (the semaphore is being re-created). It returns nil
// when the state does not explain it (no marker, or no recent hold): the
// semaphore was never applied, or a loss was not recorded yet.
func (l LossState) MissingHold(backend string) *LossHoldError {
	if !l.Marked || l.HoldUntil.IsZero() || l.Now.Sub(l.HoldUntil) > LossRecreateGrace {
		return nil
	}
	return &LossHoldError{Backend: backend, Cause: l.Cause, Until: l.HoldUntil, Left: max(l.HoldUntil.Sub(l.Now), 0)}
}

// LossGuard is implemented by backends that can lose their data without an
// error: Redis after a restart without persistence or a FLUSHDB, or a
// failover to a replica that missed writes; memcached after a restart.
// Holders still running then believe they hold a slot, and slots granted
// at once would admit more than the limit, so semaphores are held until
// the longest lease any holder may have had has passed (the rule the
// Redlock page gives for restarted instances): by then every old holder
// has failed to extend and stopped its command.
type LossGuard interface {
	// ObserveLoss reads the marker without changing anything.
	ObserveLoss(ctx context.Context) (LossState, error)
	// MarkLoss writes the marker when it is missing. existed says that the
	// applied inventory lists objects on this backend, so a missing marker
	// means lost data: the marker then records a hold of the given length
	// from backend now. Without existed (a first use) there is no hold.
	// A marker already present is kept, hold and all, unless it names
	// another server (LossState.Changed): that change is then handled
	// (see the backend).
	MarkLoss(ctx context.Context, existed bool, hold time.Duration) (LossState, error)
}

// ErrLossHold: a semaphore is missing, or no slot is granted, because its
// backend lost its data (or may have lost writes) and holds its
// semaphores until the holders from before have stopped. It is temporary:
// waiting callers wait it out.
var ErrLossHold = errors.New("semaphores held after a data loss")

// LossHoldError is ErrLossHold with the hold.
type LossHoldError struct {
	Backend string
	// Cause is LossCauseLost or LossCauseChanged ("" reads as lost).
	Cause string
	// Until is the end of the hold, in backend time (zero: the loss is not
	// recorded yet).
	Until time.Time
	// Left is how long the hold still ran when it was read (0: ended, the
	// semaphore is on its way back).
	Left time.Duration
}

func (e *LossHoldError) Error() string {
	what := "lost its data (restarted empty or flushed)"
	if e.Cause == LossCauseChanged {
		what = "restarted or failed over and may have lost its last writes"
	}
	switch {
	case e.Until.IsZero():
		return fmt.Sprintf("backend %s %s; semaphores return one lease after the loss is recorded", e.Backend, what)
	case e.Left <= 0:
		return fmt.Sprintf("backend %s %s; semaphores are returning (the hold ended at %s)", e.Backend, what, e.Until.Local().Format(time.TimeOnly))
	}
	return fmt.Sprintf("backend %s %s; semaphores return at %s", e.Backend, what, e.Until.Local().Format(time.TimeOnly))
}

func (e *LossHoldError) Unwrap() error { return ErrLossHold }
