package queue

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// ErrLeaseLost is the cause of a handler's cancelled context when the job's
// visibility lease was lost. It wraps backends.ErrLost.
var ErrLeaseLost = fmt.Errorf("job lease lost: %w", backends.ErrLost)

// ErrCannotStart, wrapped in a handler's error, says that the handler could
// not even start on its job, for a reason that is the worker's, not the
// job's: its command is missing or not executable. Retrying would spend
// the attempts of every job the worker claims and send them to the dead
// set, so Work instead puts the job back as it was (Queues.ReturnJob: ready
// at once, its attempt not counted), stops claiming, waits for the other
// running handlers and returns the handler's error.
var ErrCannotStart = errors.New("the handler cannot start")

// Client pushes to and works the queues held by one backend.
type Client struct {
	q backends.Queues
	// rl is the backend's rate limits (nil: it holds none), for a queue
	// whose config names one.
	rl backends.RateLimits

	mu    sync.Mutex
	wakes map[string]chan struct{}
}

// New returns a client for b, which must hold queues (b.Queues()).
func New(b backends.Backend) (*Client, error) {
	q := b.Queues()
	if q == nil {
		return nil, fmt.Errorf("backend %q (%s) cannot hold queues: %w", b.Name(), b.Type(), backends.ErrUnsupported)
	}
	c := &Client{q: q, rl: backends.RateLimitsOf(b), wakes: map[string]chan struct{}{}}
	return c, nil
}

// wakeChan returns the channel the next push to queue closes.
func (c *Client) wakeChan(queue string) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch, ok := c.wakes[queue]
	if !ok {
		ch = make(chan struct{})
		c.wakes[queue] = ch
	}
	return ch
}

// wake wakes every idle in-process worker of queue.
func (c *Client) wake(queue string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ch, ok := c.wakes[queue]; ok {
		close(ch)
		delete(c.wakes, queue)
	}
}

// PushOptions tune one push.
type PushOptions struct {
	// Key: the jobs of one key run one at a time, in push order (claim
	// partition; see backends.Queues.Claim). When the queue has unique set,
	// it is also the deduplication key.
	Key string
	// Delay makes the job claimable only after this long.
	Delay time.Duration
	// Priority, between spec.MinPriority and spec.MaxPriority (0: the
	// default): among ready jobs a higher priority is claimed first; it
	// never overtakes an older job of its key.
	Priority int
}

// Push enqueues payload and wakes this process's idle workers of queue. A
// push refused by the queue's unique setting returns the existing job with
// an error wrapping backends.ErrDuplicate; an oversized payload returns
// backends.ErrPayloadTooLarge; a key outside the limits of spec.CheckKey
// returns spec.ErrInvalidKey, and a priority out of range
// spec.ErrInvalidPriority, before the backend is touched.
func (c *Client) Push(ctx context.Context, queue string, payload []byte, opts PushOptions) (backends.Job, error) {
	req := backends.PushRequest{Payload: payload, Key: opts.Key, Delay: opts.Delay, Priority: opts.Priority}
	if err := backends.CheckPush(req); err != nil {
		return backends.Job{}, fmt.Errorf("push to queue %q: %w", queue, err)
	}
	j, err := c.q.Push(ctx, queue, req)
	if err != nil {
		return j, err
	}
	if opts.Delay <= 0 {
		c.wake(queue)
	}
	return j, nil
}

// Config reads the applied config of queue (backends.ErrNotFound when it
// is absent).
func (c *Client) Config(ctx context.Context, queue string) (backends.QueueConfig, error) {
	st, err := c.observe(ctx, queue)
	if err != nil {
		return backends.QueueConfig{}, err
	}
	return st.Config, nil
}

func (c *Client) observe(ctx context.Context, queue string) (*backends.QueueState, error) {
	m, err := c.q.ObserveQueues(ctx, []string{queue})
	if err != nil {
		return nil, err
	}
	st := m[queue]
	if st == nil {
		return nil, fmt.Errorf("queue %q: %w", queue, backends.ErrNotFound)
	}
	return st, nil
}

// Handler works one job. Returning nil acks the job; an error retries it
// (the backend applies retry_backoff, and moves it to the dead set once its
// attempts are used up). ctx is cancelled with cause ErrLeaseLost when the
// job's lease is lost, and when Work's context ends.
type Handler func(ctx context.Context, j backends.Job) error

// Stats counts what a worker did. Fields are updated atomically while Work
// runs.
type Stats struct {
	Claimed, Acked, Retried atomic.Int64
	// Lost counts jobs whose lease was lost: not acked nor retried by this
	// worker, since the job belongs to its next owner.
	Lost atomic.Int64
	// Returned counts jobs put back unworked, their attempt not counted
	// (ErrCannotStart).
	Returned atomic.Int64
}

// WorkerOptions tune Work.
type WorkerOptions struct {
	// Concurrency is how many handlers run at once; default 1.
	Concurrency int
	// Batch is the most jobs one claim takes, at most Concurrency; 0 (the
	// default) means Concurrency: a claim takes as many jobs as there are
	// free handler slots. A claim never takes more jobs than there are
	// free slots, so every job it takes starts at once and no lease runs
	// while a job waits in a buffer. While the queue has a backlog (the
	// last claim got all it asked for), a claim waits up to 2 ms for more
	// slots to free up, so that claims take whole batches rather than a
	// job per freed slot; an idle worker claims at once. Set 1 to claim
	// one job at a time (several workers then share a backlog job by job).
	Batch int
	// Drain makes Work return nil once the queue holds no job that is
	// ready, delayed or in flight (dead jobs do not count).
	Drain bool
	// ReadyOnly, with Drain, returns once no job is ready now and this
	// worker's handlers have returned: it waits neither for delayed jobs
	// (a delayed push, a retry in its backoff) nor for other workers'.
	ReadyOnly bool
	// DrainWait, when not nil, is called with the queue's state each time
	// Drain finds jobs it still waits for (about once a second): for a
	// person to see why the worker has not exited.
	DrainWait func(st backends.QueueState)
	// Owner prefixes the random owner token of each claim; it helps to read
	// the store. Tokens are unique regardless. It is empty, a host id
	// (spec.CheckHostID), or a host id, ":" and a pid, so that every token
	// fits the backends' owner columns.
	Owner string
	// Stop, when closed, stops claiming; Work returns nil once the running
	// handlers have returned and their jobs were acked or retried. Their
	// contexts are not cancelled.
	Stop <-chan struct{}
	// Logf, when not nil, receives what the worker cannot return: a lost
	// lease, a failing claim, ack or retry.
	Logf func(format string, args ...any)
	// Stats, when not nil, is updated as jobs finish.
	Stats *Stats
}

// Margin is how much of a visibility lease is not trusted: time for the
// request, and for clocks that run at slightly different rates.
func Margin(visibility time.Duration) time.Duration {
	return min(visibility/10, 2*time.Second)
}

// checkOwner checks WorkerOptions.Owner: empty, a host id, or a host id,
// ":" and a pid.
func checkOwner(o string) error {
	if o == "" {
		return nil
	}
	host, pid, hasPID := strings.Cut(o, ":")
	if err := spec.CheckHostID(host); err != nil {
		return err
	}
	if _, err := strconv.ParseUint(pid, 10, 32); hasPID && err != nil {
		return fmt.Errorf("%q: after the host id comes \":\" and a pid", o)
	}
	return nil
}

func newOwner(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	if prefix == "" {
		return hex.EncodeToString(b[:])
	}
	return prefix + ":" + hex.EncodeToString(b[:])
}
