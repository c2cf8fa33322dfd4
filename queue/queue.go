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
	"github.com/coordd/coordd/internal/retry"
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

// Waits of an idle worker. The backend's WaitQueue returns at the latest
// after idleWait (drainWait while draining, so that jobs other workers
// finish are noticed), and the worker claims again.
const (
	idleWait  = 5 * time.Second
	drainWait = time.Second
	// errorWaitMax bounds the backoff after a failing claim.
	errorWaitMax = 5 * time.Second
	// finishTimeout bounds an Ack or Retry after the handler returned.
	finishTimeout = 10 * time.Second
	// maxReason bounds the error text recorded with a retried job.
	maxReason = 2048
	// gatherWait bounds how long a claim waits for more handler slots to
	// free up while the queue has a backlog (see Work).
	gatherWait = 2 * time.Millisecond
)

// Client pushes to and works the queues held by one backend.
type Client struct {
	q   backends.Queues
	adm backends.QueueAdmin // nil when the backend has none

	mu    sync.Mutex
	wakes map[string]chan struct{}
}

// New returns a client for b, which must implement backends.Queues.
func New(b backends.Backend) (*Client, error) {
	q, ok := b.(backends.Queues)
	if !ok {
		return nil, fmt.Errorf("backend %q (%s) cannot hold queues: %w", b.Name(), b.Type(), backends.ErrUnsupported)
	}
	adm, _ := b.(backends.QueueAdmin)
	c := &Client{q: q, adm: adm, wakes: map[string]chan struct{}{}}
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
}

// Push enqueues payload and wakes this process's idle workers of queue. A
// push refused by the queue's unique setting returns the existing job with
// an error wrapping backends.ErrDuplicate; an oversized payload returns
// backends.ErrPayloadTooLarge; a key outside the limits of spec.CheckKey
// returns spec.ErrInvalidKey before the backend is touched.
func (c *Client) Push(ctx context.Context, queue string, payload []byte, opts PushOptions) (backends.Job, error) {
	req := backends.PushRequest{Payload: payload, Key: opts.Key, Delay: opts.Delay}
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
	if c.adm == nil {
		return nil, fmt.Errorf("queue %q: the backend cannot observe queues: %w", queue, backends.ErrUnsupported)
	}
	m, err := c.adm.ObserveQueues(ctx, []string{queue})
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

// Lease is the visibility lease of the job a handler works.
type Lease struct {
	Job backends.Job
	// ClaimedAt is when the claim was sent (monotonic). A child supervisor
	// counts the lease from RenewedAt, which is later once renewed.
	ClaimedAt time.Time
	// Visibility is the queue's visibility timeout, the length of the
	// lease.
	Visibility time.Duration

	mu       sync.Mutex
	deadline time.Time // monotonic: sentAt + visibility - margin
	lost     bool
	onRenew  []func(sentAt time.Time)
}

type leaseKey struct{}

// LeaseOf returns the lease of the job whose handler got ctx, nil outside a
// handler.
func LeaseOf(ctx context.Context) *Lease {
	l, _ := ctx.Value(leaseKey{}).(*Lease)
	return l
}

// OnRenew registers f to be called with the send time of each later
// successful renewal (child.Process.Renewed fits).
func (l *Lease) OnRenew(f func(sentAt time.Time)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.onRenew = append(l.onRenew, f)
}

// Deadline is the monotonic instant until which the lease is trusted.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// RenewedAt is the send time of the claim or of the latest renewal
// (monotonic): a child supervisor started now counts the lease from it.
func (l *Lease) RenewedAt() time.Time {
	return l.Deadline().Add(-(l.Visibility - Margin(l.Visibility)))
}

// Lost reports whether the lease was lost.
func (l *Lease) Lost() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost
}

func (l *Lease) renewed(sentAt time.Time) {
	l.mu.Lock()
	if d := sentAt.Add(l.Visibility - Margin(l.Visibility)); d.After(l.deadline) {
		l.deadline = d
	}
	fs := append([]func(time.Time){}, l.onRenew...)
	l.mu.Unlock()
	for _, f := range fs {
		f(sentAt)
	}
}

func (l *Lease) markLost() {
	l.mu.Lock()
	l.lost = true
	l.mu.Unlock()
}

// worker is one Work call.
type worker struct {
	c      *Client
	queue  string
	vis    time.Duration
	opts   WorkerOptions
	h      Handler
	logf   func(string, ...any)
	stats  *Stats
	finish chan struct{} // a handler finished; buffered 1

	// halt is closed when a handler could not start (ErrCannotStart);
	// haltErr, set first, is what Work returns.
	halt     chan struct{}
	haltOnce sync.Once
	haltErr  error
}

// stopAll makes Work stop claiming and return err once its handlers are
// done; the first call wins.
func (w *worker) stopAll(err error) {
	w.haltOnce.Do(func() {
		w.haltErr = err
		close(w.halt)
	})
}

// halted returns the error of stopAll, nil when it was not called.
func (w *worker) halted() error {
	select {
	case <-w.halt:
		return w.haltErr
	default:
		return nil
	}
}

// Work claims jobs of queue and runs h on each, Concurrency at a time,
// until ctx ends (it returns ctx's error), opts.Stop is closed (nil), or,
// with Drain, the queue holds no ready, delayed or in-flight job (nil). It
// always waits for the running handlers, and their acks and retries,
// before returning. A handler's slot is free again once the handler has
// returned, while its ack or retry is still on its way (at most
// Concurrency of those are), so that the next claim and the ack's commit
// overlap. It fails when the queue is absent or the backend keeps failing
// in a way that will not pass (the queue was deleted), and when a handler
// returns an error wrapping ErrCannotStart (that error).
func (c *Client) Work(ctx context.Context, queue string, opts WorkerOptions, h Handler) (err error) {
	if h == nil {
		return errors.New("work: nil handler")
	}
	if err := checkOwner(opts.Owner); err != nil {
		return fmt.Errorf("work queue %q: owner: %w", queue, err)
	}
	cfg, err := c.Config(ctx, queue)
	if err != nil {
		return fmt.Errorf("work: %w", err) // err names the queue
	}
	if cfg.VisibilityTimeout <= 0 {
		return fmt.Errorf("work queue %q: visibility timeout %v: must be positive", queue, cfg.VisibilityTimeout)
	}
	conc := max(opts.Concurrency, 1)
	batch := conc
	if opts.Batch > 0 {
		batch = min(opts.Batch, conc)
	}
	w := &worker{c: c, queue: queue, vis: cfg.VisibilityTimeout, opts: opts, h: h, logf: opts.Logf, stats: opts.Stats,
		finish: make(chan struct{}, 1), halt: make(chan struct{})}
	if w.logf == nil {
		w.logf = func(string, ...any) {}
	}
	if w.stats == nil {
		w.stats = &Stats{}
	}
	// stop is closed by opts.Stop (nil blocks for ever) or by a handler
	// that cannot start.
	stop := make(chan struct{})
	workDone := make(chan struct{})
	defer close(workDone)
	go func() {
		select {
		case <-opts.Stop:
		case <-w.halt:
		case <-workDone:
			return
		}
		close(stop)
	}()

	slots := make(chan struct{}, conc)     // one token per running handler
	finishing := make(chan struct{}, conc) // one token per ack or retry in flight
	var wg sync.WaitGroup
	defer func() {
		wg.Wait()
		if herr := w.halted(); herr != nil {
			err = herr
		}
	}()

	errWait := time.Duration(0)
	backendReady := false // the last idle wait ended because the backend saw a job
	streak := 0           // empty claims in a row right after backendReady
	full := false         // the last claim got every job it asked for: a backlog
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// Take one free slot, then as many more as are free, up to batch.
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err() // the deferred wg.Wait waits for the handlers
		case <-stop:
			return nil
		}
		n := 1 + takeFree(slots, batch-1)
		if full && n < batch {
			n += gather(ctx, stop, slots, batch-n)
		}

		if w.halted() != nil {
			return nil // a handler could not start; the deferred func says so
		}
		wake := c.wakeChan(queue) // before the claim: a push after it closes this channel
		sentAt := time.Now()
		jobs, err := c.q.Claim(ctx, queue, newOwner(opts.Owner), n)
		full = err == nil && len(jobs) == n
		for range n - len(jobs) {
			<-slots
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, backends.ErrNotFound) {
				return fmt.Errorf("work queue %q: %w", queue, err)
			}
			errWait = min(max(2*errWait, 100*time.Millisecond), errorWaitMax)
			w.logf("queue %s: claim failed (retrying in %v): %v", queue, errWait, err)
			sleep(ctx, stop, nil, errWait) // the loop head sees ctx and stop
			continue
		}
		errWait = 0
		w.stats.Claimed.Add(int64(len(jobs)))
		for _, j := range jobs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				w.run(ctx, j, sentAt, slots, finishing)
				select {
				case w.finish <- struct{}{}:
				default:
				}
			}()
		}
		if len(jobs) > 0 {
			backendReady, streak = false, 0
			continue
		}

		// Nothing claimable.
		if opts.Drain && len(slots) == 0 {
			st, err := c.observe(ctx, queue)
			switch {
			case err == nil && (st.Ready+st.InFlight == 0 || opts.ReadyOnly && st.ReadyNow() == 0):
				return nil
			case err == nil && opts.DrainWait != nil:
				opts.DrainWait(*st)
			case err != nil && ctx.Err() == nil:
				w.logf("queue %s: observe failed: %v", queue, err)
			}
		}
		if backendReady {
			// The backend said a job may be claimable, yet none was (a job
			// in a partition being moved, say): do not spin on it.
			streak++
			if !sleep(ctx, stop, wake, min(time.Duration(streak)*10*time.Millisecond, time.Second)) {
				continue
			}
		} else {
			streak = 0
		}
		maxWait := idleWait
		if opts.Drain {
			maxWait = drainWait
		}
		backendReady = w.idle(ctx, stop, wake, maxWait)
	}
}

// takeFree takes up to n more slots that are free now, without waiting,
// and returns how many it took.
func takeFree(slots chan<- struct{}, n int) int {
	for k := 0; k < n; k++ {
		select {
		case slots <- struct{}{}:
		default:
			return k
		}
	}
	return n
}

// gather waits, at most gatherWait, for up to n more slots, and returns
// how many it took. Work calls it when the queue has a backlog (the last
// claim was full) and fewer slots than a batch are free: the handlers of
// one claim tend to finish together, and one claim of a whole batch costs
// the backend about what a claim of one job does (a transaction and its
// commit), so a claim as soon as one slot frees would split the batches
// into ever smaller claims. An idle worker does not get here: its slots
// are all free, and its first claim takes them at once.
func gather(ctx context.Context, stop <-chan struct{}, slots chan<- struct{}, n int) int {
	t := time.NewTimer(gatherWait)
	defer t.Stop()
	for k := 0; k < n; k++ {
		select {
		case slots <- struct{}{}:
		case <-t.C:
			return k
		case <-ctx.Done():
			return k
		case <-stop:
			return k
		}
	}
	return n
}

// sleep waits d, or until ctx ends, stop or wake is closed; it reports
// whether d elapsed.
func sleep(ctx context.Context, stop, wake <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
	case <-stop:
	case <-wake:
	}
	return false
}

// idle blocks until an in-process push (wake), a backend wake-up, a local
// handler finishing (while draining), stop, ctx's end, or maxWait. It
// reports whether the backend ended the wait before maxWait.
func (w *worker) idle(ctx context.Context, stop, wake <-chan struct{}, maxWait time.Duration) bool {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- w.c.q.WaitQueue(wctx, w.queue, maxWait) }()
	var finish <-chan struct{}
	if w.opts.Drain {
		finish = w.finish
	}
	select {
	case <-wake:
	case <-finish:
	case <-stop:
	case <-ctx.Done():
	case err := <-done:
		if err != nil && ctx.Err() == nil {
			w.logf("queue %s: wait failed: %v", w.queue, err)
			sleep(ctx, stop, wake, time.Second)
			return false
		}
		return err == nil && time.Since(start) < maxWait
	}
	cancel()
	<-done
	return false
}

// run works one claimed job: it runs the handler while renewing the lease,
// then acks or retries the job unless the lease was lost. It gives the
// job's handler slot (a token of slots) back as soon as the handler has
// returned and it holds a token of finishing for the ack or retry, so that
// the worker claims the next jobs while the backend records this one (an
// ack waits for a commit, which the backend's group commit then shares
// with the next claim's). The finishing tokens bound the acks and retries
// in flight to the concurrency.
func (w *worker) run(ctx context.Context, j backends.Job, sentAt time.Time, slots, finishing chan struct{}) {
	l := &Lease{Job: j, ClaimedAt: sentAt, Visibility: w.vis, deadline: sentAt.Add(w.vis - Margin(w.vis))}
	hctx, cancel := context.WithCancelCause(context.WithValue(ctx, leaseKey{}, l))
	defer cancel(nil)

	if herr := w.halted(); herr != nil {
		// Claimed while another handler found that none can start.
		finishing <- struct{}{}
		<-slots
		defer func() { <-finishing }()
		w.giveBack(ctx, j, herr)
		return
	}

	// A claim that hung in a stalled backend leaves the handler little of
	// its lease, and a command under it would be stopped at once: renew
	// first, so that the handler starts with a fresh lease.
	if left := time.Until(l.Deadline()); left < w.vis/2 && left > 0 {
		if w.renew(ctx, l) {
			<-slots
			w.stats.Lost.Add(1)
			w.logf("queue %s: job %d: lease lost before its handler started; left to its next owner", w.queue, j.ID)
			return
		}
	}
	// Renewals go on after ctx ends, as long as the handler runs.
	kctx, stopKeep := context.WithCancel(context.WithoutCancel(ctx))
	keepDone := make(chan struct{})
	go func() {
		defer close(keepDone)
		if w.keep(kctx, l) {
			cancel(ErrLeaseLost)
		}
	}()
	err := w.h(hctx, j)
	stopKeep()
	<-keepDone

	cannotStart := errors.Is(err, ErrCannotStart)
	if cannotStart {
		// Stop claiming before this slot frees up: the job goes back
		// ready, and this worker must not take it (or any job) again.
		w.stopAll(fmt.Errorf("queue %s: job %d: %w", w.queue, j.ID, err))
	}
	if l.Lost() {
		<-slots
		w.stats.Lost.Add(1)
		w.logf("queue %s: job %d: lease lost while working it; left to its next owner", w.queue, j.ID)
		return
	}
	finishing <- struct{}{}
	<-slots
	defer func() { <-finishing }()
	if cannotStart {
		w.giveBack(ctx, j, err)
		return
	}
	w.record(ctx, j, err)
}

// giveBack returns a job no handler could start on to the queue, its
// attempt not counted (Queues.ReturnJob).
func (w *worker) giveBack(ctx context.Context, j backends.Job, why error) {
	ferr := retry.Final(context.WithoutCancel(ctx), retry.Budget, func(ctx context.Context) error {
		fctx, cancel := context.WithTimeout(ctx, finishTimeout)
		defer cancel()
		return w.c.q.ReturnJob(fctx, j)
	}, nil)
	switch {
	case ferr == nil:
		w.stats.Returned.Add(1)
		w.logf("queue %s: job %d returned to the queue unworked, attempt %d not counted: %v", w.queue, j.ID, j.Attempt, why)
		w.c.wake(w.queue)
	case errors.Is(ferr, backends.ErrLost):
		w.stats.Lost.Add(1)
		w.logf("queue %s: job %d could not be started (%v), and its lease was lost before it was returned: %v", w.queue, j.ID, why, ferr)
	default:
		w.logf("queue %s: job %d could not be started (%v); returning it failed too (it will run again after its visibility timeout, this attempt counted): %v", w.queue, j.ID, why, ferr)
	}
}

// record acks j (the handler returned nil) or retries it (err).
func (w *worker) record(ctx context.Context, j backends.Job, err error) {
	fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer fcancel()
	if err == nil {
		ferr := w.c.q.Ack(fctx, j)
		switch {
		case ferr == nil:
			w.stats.Acked.Add(1)
			if j.Key != "" {
				w.c.wake(w.queue) // the next job of its key may start
			}
		case errors.Is(ferr, backends.ErrLost):
			w.stats.Lost.Add(1)
			w.logf("queue %s: job %d done, but its lease was lost before the ack: %v", w.queue, j.ID, ferr)
		default:
			w.logf("queue %s: job %d done, but the ack failed (it will run again after its visibility timeout): %v", w.queue, j.ID, ferr)
		}
		return
	}
	reason := err.Error()
	if len(reason) > maxReason {
		reason = reason[:maxReason]
	}
	ferr := w.c.q.Retry(fctx, j, reason)
	switch {
	case ferr == nil:
		w.stats.Retried.Add(1)
		w.logf("queue %s: job %d attempt %d failed: %s", w.queue, j.ID, j.Attempt, reason)
		w.c.wake(w.queue) // with no retry_backoff the job is ready at once
	case errors.Is(ferr, backends.ErrLost):
		w.stats.Lost.Add(1)
		w.logf("queue %s: job %d failed (%s), and its lease was lost before the retry: %v", w.queue, j.ID, reason, ferr)
	default:
		w.logf("queue %s: job %d failed (%s); the retry failed too (it will run again after its visibility timeout): %v", w.queue, j.ID, reason, ferr)
	}
}

// keep renews l about every visibility/3 until ctx ends. It reports true
// when the lease was lost: an extend found another owner, or the deadline
// passed without a successful renewal.
func (w *worker) keep(ctx context.Context, l *Lease) bool {
	every := max(w.vis/3, 10*time.Millisecond)
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
		err := w.extend(ctx, l)
		switch {
		case err == nil:
			t.Reset(every)
		case errors.Is(err, backends.ErrLost):
			return true
		case ctx.Err() != nil:
			return false
		case !time.Now().Before(l.Deadline()):
			l.markLost()
			return true
		default:
			w.logf("queue %s: job %d: renewing the lease failed (retrying): %v", w.queue, l.Job.ID, err)
			t.Reset(max(every/4, 10*time.Millisecond))
		}
	}
}

// extend renews l once, within its trust window.
func (w *worker) extend(ctx context.Context, l *Lease) error {
	sentAt := time.Now()
	ectx, cancel := context.WithDeadline(ctx, l.Deadline())
	_, err := w.c.q.ExtendJob(ectx, l.Job)
	cancel()
	switch {
	case err == nil:
		l.renewed(sentAt)
	case errors.Is(err, backends.ErrLost):
		l.markLost()
	}
	return err
}

// renew renews l once before its handler starts. It reports true when
// the lease is lost: taken by another owner, or out of its trust window.
func (w *worker) renew(ctx context.Context, l *Lease) bool {
	if err := w.extend(ctx, l); err != nil && !errors.Is(err, backends.ErrLost) {
		w.logf("queue %s: job %d: renewing the lease before the start failed: %v", w.queue, l.Job.ID, err)
	}
	if !time.Now().Before(l.Deadline()) {
		l.markLost()
	}
	return l.Lost()
}
