package backends

import "fmt"

// DeadJobOutcome is what RequeueDeadJob or PurgeDeadJob returns once its write changed n
// jobs (verb: requeue or purge): err with context, ErrNotFound when n is 0,
// else nil. The backends share it so that the errors read alike.
func DeadJobOutcome(verb, queue string, id, n int64, err error) error {
	switch {
	case err != nil:
		return fmt.Errorf("%s dead job %d of queue %q: %w", verb, id, queue, err)
	case n == 0:
		return fmt.Errorf("queue %q has no dead job %d: %w", queue, id, ErrNotFound)
	}
	return nil
}

// PartialJob is a job read with its payload and last error cut at a
// length; the cut may fall inside a UTF-8 sequence. PayloadSize is the
// length of the whole payload.
type PartialJob struct {
	Job
	PayloadSize int64
	// Errors are the job's failed attempts, oldest first, the newest
	// MaxAttemptErrors of them: filled by the reads of one job (JobByID,
	// DeadJob), not by pages.
	Errors []AttemptError
}

// Truncated reports whether the payload was cut.
func (j PartialJob) Truncated() bool { return int64(len(j.Payload)) < j.PayloadSize }

// JobOutcome is what CancelJob or RunJobNow returns once its write changed
// n jobs (verb: cancel or run now; what: "ready or delayed", "delayed"):
// err with context, ErrNotFound when n is 0, else nil.
func JobOutcome(verb, what, queue string, id, n int64, err error) error {
	switch {
	case err != nil:
		return fmt.Errorf("%s job %d of queue %q: %w", verb, id, queue, err)
	case n == 0:
		return fmt.Errorf("queue %q has no %s job %d: %w", queue, what, id, ErrNotFound)
	}
	return nil
}

// CheckJobState reports an unknown JobPage state.
func CheckJobState(state string) error {
	for _, s := range JobStates {
		if s == state {
			return nil
		}
	}
	return fmt.Errorf("unknown job state %q: one of ready, delayed, running, dead", state)
}
