package backends

import (
	"context"
	"fmt"
)

// DeadJobs acts on one dead job of a queue, where Queues.RequeueDead and
// PurgeDead act on all of them: the dashboard's buttons on a dead job's
// page. Every backend that holds queues implements it (the conformance
// group QueueDeadJob checks it).
type DeadJobs interface {
	// RequeueDeadJob makes dead job id of queue ready now with its
	// attempts reset and its last_error kept, as RequeueDead does to each
	// dead job, and wakes an idle worker. ErrNotFound when the queue has
	// no dead job with that id (never pushed, acked, ready, in flight, or
	// already requeued or purged): nothing changes then.
	RequeueDeadJob(ctx context.Context, queue string, id int64) error
	// PurgeDeadJob deletes dead job id of queue; ErrNotFound as above.
	PurgeDeadJob(ctx context.Context, queue string, id int64) error
}

// DeadJobOutcome is what a DeadJobs call returns once its write changed n
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

// DeadJobReader reads a queue's dead set a page at a time, and one dead
// job, with each payload and last error cut by the backend at a given
// length: what the dashboard reads, so that a page costs the same whatever
// the payloads weigh (max_payload may be 64 MiB). Every backend that holds
// queues implements it (the conformance group QueueDeadRead checks it).
type DeadJobReader interface {
	// DeadPage lists up to limit dead jobs of queue in Dead's order
	// (oldest first), skipping the first offset; each carries at most cut
	// bytes of its payload and of its last error. No queue: no job.
	DeadPage(ctx context.Context, queue string, offset, limit, cut int) ([]PartialJob, error)
	// DeadJob reads dead job id of queue with at most cut bytes of its
	// payload and of its last error. ErrNotFound when the queue has no dead
	// job with that id (as DeadJobs).
	DeadJob(ctx context.Context, queue string, id int64, cut int) (PartialJob, error)
}

// PartialJob is a job read with its payload and last error cut at a
// length; the cut may fall inside a UTF-8 sequence. PayloadSize is the
// length of the whole payload.
type PartialJob struct {
	Job
	PayloadSize int64
}

// Truncated reports whether the payload was cut.
func (j PartialJob) Truncated() bool { return int64(len(j.Payload)) < j.PayloadSize }
