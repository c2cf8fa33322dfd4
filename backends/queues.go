package backends

import (
	"context"
	"time"
)

// QueueConfig is a queue as the runtime enforces it.
type QueueConfig struct {
	Name              string        `json:"name"`
	Partitions        int           `json:"partitions"`
	VisibilityTimeout time.Duration `json:"visibility_timeout"`
	MaxAttempts       int           `json:"max_attempts"`
	RetryBackoff      time.Duration `json:"retry_backoff"`
	Timeout           time.Duration `json:"timeout,omitempty"`
	Unique            string        `json:"unique"`
	MaxPayload        int64         `json:"max_payload"`
	Claim             string        `json:"claim"`
	// RateLimit names the rate limit (on the same backend) whose permits
	// the queue's workers take before they claim; empty: none.
	RateLimit string `json:"rate_limit,omitempty"`
}

// QueueState is what a backend observes of one queue.
type QueueState struct {
	Config QueueConfig `json:"config"`
	// PartitionsPresent counts partition lock rows (or lists) present.
	PartitionsPresent int `json:"partitions_present"`
	// Ready counts the jobs waiting to be claimed, the Delayed ones
	// included; ReadyNow is what the CLI and /metrics call ready.
	Ready    int64 `json:"ready"`
	InFlight int64 `json:"in_flight"`
	Dead     int64 `json:"dead"`
	// Delayed counts ready jobs whose available_at is in the future.
	Delayed int64 `json:"delayed"`
	// OldestReady is the enqueue time of the oldest ready job (zero: none).
	OldestReady time.Time `json:"oldest_ready"`
	// NextDelayed is when the first Delayed job becomes available (zero:
	// none), for `queue work --drain` to say what it waits for.
	NextDelayed time.Time `json:"next_delayed,omitempty"`
	// Stranded counts jobs in partitions at or above Config.Partitions.
	Stranded int64 `json:"stranded"`
	// Paused is the operator's pause (coordd queue pause), nil when none.
	Paused *Pause `json:"paused,omitempty"`
}

// Jobs is the number of jobs a queue holds in any state.
func (q *QueueState) Jobs() int64 { return q.Ready + q.InFlight + q.Dead }

// ReadyNow counts the ready jobs that are available now: Ready without the
// Delayed ones (a delayed push, a retry in its backoff). A job waiting
// behind an earlier job of its key counts here too. coordd status, queue
// stats and coordd_queue_ready all report this number.
func (q *QueueState) ReadyNow() int64 { return q.Ready - q.Delayed }

// PayloadLimiter is implemented by a backend whose server bounds one job's
// payload below spec.MaxPayloadCap whatever coordd does (MySQL's
// max_allowed_packet, Redis's proto-max-bulk-len). Plan checks each queue's
// max_payload against it, so that a queue never promises to take payloads
// that every push would fail to store. A backend without it takes any
// payload up to spec.MaxPayloadCap.
type PayloadLimiter interface {
	// MaxPayload is the largest payload, in bytes, that a push stores and
	// a claim reads back with the server configured as it is now.
	MaxPayload(ctx context.Context) (int64, error)
}

// Job is one queued job.
type Job struct {
	ID        int64  `json:"id"`
	Queue     string `json:"queue"`
	Partition int    `json:"partition"`
	Payload   []byte `json:"-"`
	// Key picks the partition and is the unique key when the queue has
	// unique set.
	Key string `json:"key,omitempty"`
	// Priority orders the claims of ready jobs: higher first (Claim).
	Priority    int       `json:"priority,omitempty"`
	Attempt     int       `json:"attempt"`
	EnqueuedAt  time.Time `json:"enqueued_at"`
	AvailableAt time.Time `json:"available_at"`
	Owner       string    `json:"-"`          // set while claimed
	ExpiresAt   time.Time `json:"expires_at"` // visibility deadline while claimed
	LastError   string    `json:"last_error,omitempty"`
}

// PushRequest enqueues one job.
type PushRequest struct {
	Payload []byte
	// Key: jobs with one key run one at a time in push order (see
	// Queues.Claim); empty spreads jobs over the partitions. With unique, a
	// second push of a key returns the existing job and ErrDuplicate.
	Key   string
	Delay time.Duration
	// Priority, between spec.MinPriority and spec.MaxPriority (0: the
	// default): among the claimable jobs, a higher priority is claimed
	// first (Claim).
	Priority int
}

// Queues is the queues a backend holds: reconcile's view (observe, put,
// delete), the runtime's (push, claim, ack, retry, wait), and the dead
// set, as a whole and one job at a time (the dashboard's view; the
// conformance groups QueueDeadJob and QueueDeadRead check it).
type Queues interface {
	// ObserveQueues observes many queues; absent ones are missing from the map.
	ObserveQueues(ctx context.Context, names []string) (map[string]*QueueState, error)
	// PutQueue creates or updates the queue and its partitions. Jobs in
	// partitions that no longer exist move into the remaining ones in the
	// same transaction, so none is lost. It returns how many moved.
	PutQueue(ctx context.Context, cfg QueueConfig) (moved int64, err error)
	// DeleteQueue removes the queue; with jobs left it returns ErrHasJobs
	// unless force. Absent is not an error.
	DeleteQueue(ctx context.Context, name string, force bool) error

	// Push enqueues a job (ErrPayloadTooLarge, ErrNotFound; ErrDuplicate
	// with the existing job). It first runs CheckPush: a key outside
	// spec.CheckKey is spec.ErrInvalidKey, with nothing written.
	Push(ctx context.Context, queue string, req PushRequest) (Job, error)
	// PushOnce is Push at most once per once key and queue: the push and
	// the record of its key are one transaction or script, so a caller
	// that pushes again after a crash or a lost reply (a cron task's
	// retry) gets the job of the first push (its id; pushed false), even
	// when that job ran and is gone. Records are kept for
	// PushOnceRetention (PrunePushOnce). A push that finds a duplicate
	// (ErrDuplicate) records the duplicate's id.
	PushOnce(ctx context.Context, queue, once string, req PushRequest) (job Job, pushed bool, err error)
	// PrunePushOnce deletes the once records older than olderThan of
	// backend time and returns how many; a store that drops them by
	// itself (Redis) deletes none.
	PrunePushOnce(ctx context.Context, olderThan time.Duration) (int, error)
	// Claim takes up to max claimable jobs, the highest priority first and
	// within one priority the oldest (lowest id: push order) first,
	// whatever their partition, and returns them in that order, each
	// leased to owner for the queue's visibility timeout and counted as an
	// attempt. A job whose visibility
	// expired is ready again; one whose attempts are used up moves to the
	// dead set instead. No job and no error when none is claimable.
	//
	// A ready job is claimable once its available_at has passed, except a
	// job with a key (claim partition), which is claimable only while no
	// job of its key is in flight and no ready job of its key (delayed ones
	// included) is older: the jobs of one key run one at a time, in push
	// order, and a claim takes at most one of them; a job of higher
	// priority never overtakes an older job of its key. A job keeps its
	// priority through retries, expired leases, returns and requeues. A
	// retried job keeps its id, so the next job of its key waits through its backoff; an expired
	// lease keeps the key until a claim sweeps it, and the job then comes
	// first; a dead job no longer holds its key. MySQL's claim skip_locked
	// orders nothing else: it takes available jobs in (priority,
	// available_at, id) order and ignores keys.
	Claim(ctx context.Context, queue, owner string, max int) ([]Job, error)
	// Ack deletes a finished job if j.Owner still holds it (ErrLost).
	Ack(ctx context.Context, j Job) error
	// Retry returns a failed job to the queue after the queue's
	// retry_backoff, or moves it to the dead set when its attempts are used
	// up, if j.Owner still holds it (ErrLost). The reason is added to the
	// job's attempt errors (AttemptError, the newest MaxAttemptErrors)
	// with the backend's time and the worker named by j.Owner.
	Retry(ctx context.Context, j Job, reason string) error
	// ExtendJob renews j.Owner's visibility lease (ErrLost).
	ExtendJob(ctx context.Context, j Job) (time.Time, error)
	// ReturnJob puts a job j.Owner still holds (ErrLost) back as ready now,
	// in its place in its partition, with the attempt its claim counted
	// taken back and last_error kept: the job was never tried (a worker
	// whose command cannot start). A job never goes to the dead set here.
	ReturnJob(ctx context.Context, j Job) error
	// WaitQueue blocks until a job may be ready, max elapsed or ctx ended.
	WaitQueue(ctx context.Context, queue string, max time.Duration) error
	// Dead lists dead jobs, oldest first.
	Dead(ctx context.Context, queue string, limit int) ([]Job, error)
	// RequeueDead makes every dead job ready again with attempts reset.
	RequeueDead(ctx context.Context, queue string) (int64, error)
	// PurgeDead deletes every dead job.
	PurgeDead(ctx context.Context, queue string) (int64, error)

	// RequeueDeadJob makes dead job id of queue ready now with its
	// attempts reset and its last_error kept, as RequeueDead does to each
	// dead job, and wakes an idle worker. ErrNotFound when the queue has
	// no dead job with that id (never pushed, acked, ready, in flight, or
	// already requeued or purged): nothing changes then.
	RequeueDeadJob(ctx context.Context, queue string, id int64) error
	// PurgeDeadJob deletes dead job id of queue; ErrNotFound as above.
	PurgeDeadJob(ctx context.Context, queue string, id int64) error
	// DeadPage lists up to limit dead jobs of queue in Dead's order
	// (oldest first), skipping the first offset; each carries at most cut
	// bytes of its payload and of its last error, so that a page costs the
	// same whatever the payloads weigh (max_payload may be 64 MiB). No
	// queue: no job.
	DeadPage(ctx context.Context, queue string, offset, limit, cut int) ([]PartialJob, error)
	// DeadJob reads dead job id of queue with at most cut bytes of its
	// payload and of its last error. ErrNotFound when the queue has no dead
	// job with that id (as RequeueDeadJob).
	DeadJob(ctx context.Context, queue string, id int64, cut int) (PartialJob, error)

	// JobsPage lists one page of queue's jobs in p.State (the queue
	// browser), each with at most p.Cut bytes of its payload and of its
	// last error, cut by the server: ready jobs in push order (id), delayed
	// ones by the time they become available then id, running ones by
	// lease deadline then id, dead ones in Dead's order. With p.Key, only
	// that key's jobs. No queue: no job. An unknown state is an error. A
	// delayed job whose time has come is ready on the SQL stores; Redis
	// lists it as delayed until a claim moves it to its ready set.
	JobsPage(ctx context.Context, queue string, p JobPage) ([]PartialJob, error)
	// JobByID reads job id of queue in whatever state it is, with its
	// payload and last error cut at cut bytes. ErrNotFound when the queue
	// holds no job with that id (never pushed, acked, purged, canceled).
	JobByID(ctx context.Context, queue string, id int64, cut int) (PartialJob, string, error)
	// CancelJob deletes ready or delayed job id of queue: an operator's
	// decision that it must not run. ErrNotFound when the queue has no
	// ready or delayed job with that id (in flight, dead, absent): nothing
	// changes then. The next job of its key becomes claimable.
	CancelJob(ctx context.Context, queue string, id int64) error
	// PauseQueue records an operator's pause of queue name by host (a
	// host id) for reason, at backend now: workers stop claiming its jobs
	// (see QueuePaused). A queue already paused keeps that first pause,
	// returned with changed false. An absent queue is ErrNotFound. An
	// apply keeps the pause; deleting the queue drops it.
	PauseQueue(ctx context.Context, name, host, reason string) (p Pause, changed bool, err error)
	// ResumeQueue removes the pause of queue name and returns it (nil:
	// there was none). An absent queue is ErrNotFound.
	ResumeQueue(ctx context.Context, name string) (*Pause, error)
	// QueuePaused reads queue name's pause (nil: none) in one cheap read,
	// which workers make before they claim. An absent queue is
	// ErrNotFound.
	QueuePaused(ctx context.Context, name string) (*Pause, error)
	// RunJobNow makes delayed job id of queue (a delayed push, a retry in
	// its backoff) available now, keeping its attempts and its place in
	// its key's order, and wakes an idle worker. ErrNotFound when the
	// queue has no delayed job with that id.
	RunJobNow(ctx context.Context, queue string, id int64) error

	// QueueCounters: processed and failed counts per minute.
	QueueCounters
}

// Job states, as the queue browser lists them (Queues.JobsPage).
const (
	JobReady   = "ready"   // available now (or waiting behind an earlier job of its key)
	JobDelayed = "delayed" // available later: a delayed push, a retry in its backoff
	JobRunning = "running" // claimed by a worker
	JobDead    = "dead"    // attempts used up
)

// JobStates lists the states in the order the browser shows them.
var JobStates = []string{JobReady, JobDelayed, JobRunning, JobDead}

// JobPage asks for one page of a queue's jobs (Queues.JobsPage).
type JobPage struct {
	State string
	// Key, when not empty, keeps only that key's jobs.
	Key           string
	Offset, Limit int
	// Cut bounds the bytes of each job's payload and last error.
	Cut int
}
