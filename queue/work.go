package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordd/coordd/backends"
)

// Waits of an idle worker. The backend's WaitQueue returns at the latest
// after idleWait (drainWait while draining, so that jobs other workers
// finish are noticed), and the worker claims again.
const (
	idleWait  = 5 * time.Second
	drainWait = time.Second
	// errorWaitMax bounds the backoff after a failing claim.
	errorWaitMax = 5 * time.Second
	// finishTimeout is the least time an Ack or Retry gets after the
	// handler returned (at most twice that, see finishContext).
	finishTimeout = 10 * time.Second
	// maxReason bounds the error text recorded with a retried job: room
	// for the reason and the 4 KiB of stderr `coordd queue work` adds.
	maxReason = 5 << 10
	// gatherWait bounds how long a claim waits for more handler slots to
	// free up while the queue has a backlog (see gather).
	gatherWait = 2 * time.Millisecond
)

// finishingPerSlot bounds the acks and retries in flight, per handler
// slot. A backend commits a batch of acks while the acks of the next
// claim's jobs gather for the batch after it: with one per slot, the
// handlers of that next claim could not give their slots back until the
// batch before committed, and every claim waited for a commit (measured
// on PostgreSQL in docs/benchmarks.md). Two covers one batch committing
// and one gathering. A job whose ack is on its way is still running for
// the backend, so it still counts against its key's order and the queue's
// limits; a crash then delivers it again, as it would any job whose ack
// it lost.
const finishingPerSlot = 2

// worker is one Work call: a claim loop (loop) that takes free handler
// slots, claims as many jobs, starts a goroutine per job (run, job.go) and,
// when nothing is claimable, ends a drain or waits for work.
type worker struct {
	c      *Client
	queue  string
	vis    time.Duration
	opts   WorkerOptions
	h      Handler
	logf   func(string, ...any)
	stats  *Stats
	tally  *tally
	finish chan struct{} // a handler finished; buffered 1

	// batch is the most jobs one claim takes. slots holds a token per
	// running handler (at most Concurrency), finishing one per ack or
	// retry in flight (at most twice Concurrency, see finishingPerSlot).
	// wg counts the jobs' goroutines.
	batch     int
	slots     chan struct{}
	finishing chan struct{}
	wg        sync.WaitGroup

	// records holds the context the acks and retries share
	// (finishContext).
	records struct {
		mu  sync.Mutex
		cur atomic.Pointer[finishCtx]
	}

	// stop is closed by opts.Stop or by a handler that cannot start.
	stop chan struct{}

	// halt is closed when a handler could not start (ErrCannotStart);
	// haltErr, set first, is what Work returns.
	halt     chan struct{}
	haltOnce sync.Once
	haltErr  error

	// The claim loop's state: errWait is the backoff after a failing
	// claim; full says the last claim got every job it asked for (a
	// backlog); backendReady that the last idle wait ended because the
	// backend saw a job, and streak counts the empty claims in a row
	// since.
	errWait      time.Duration
	full         bool
	backendReady bool
	streak       int
	// pauseReadAt is when the queue's pause was last read (monotonic),
	// paused what it said.
	pauseReadAt time.Time
	paused      *backends.Pause
	// rate is the rate limit the queue's config names (empty: none),
	// read again every configCheckEvery (configReadAt); peek says that
	// the last idle wait ended with no sign of a job, so that the next
	// claim first looks whether one is ready before it spends permits.
	rate         string
	configReadAt time.Time
	peek         bool
}

// errStopped ends the claim loop without an error: stop was closed, a
// handler could not start (Work then returns its error), or a drain found
// nothing left.
var errStopped = errors.New("stopped")

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
// returned, while its ack or retry is still on its way (at most twice
// Concurrency of those are), so that the next claims and the ack's commit
// overlap. It fails when the queue is absent or the backend keeps failing
// in a way that will not pass (the queue was deleted), and when a handler
// returns an error wrapping ErrCannotStart (that error).
func (c *Client) Work(ctx context.Context, queue string, opts WorkerOptions, h Handler) (err error) {
	w, err := c.newWorker(ctx, queue, opts, h)
	if err != nil {
		return err
	}
	defer w.tally.start()() // after the handlers, their acks and retries
	defer w.watchStop()()
	defer func() {
		w.wg.Wait()
		if f := w.records.cur.Load(); f != nil {
			f.cancel() // no ack or retry is left to use it
		}
		if herr := w.halted(); herr != nil {
			err = herr
		}
	}()
	if err := w.loop(ctx); !errors.Is(err, errStopped) {
		return err
	}
	return nil
}

// newWorker checks Work's arguments and reads the queue's visibility
// timeout.
func (c *Client) newWorker(ctx context.Context, queue string, opts WorkerOptions, h Handler) (*worker, error) {
	if h == nil {
		return nil, errors.New("work: nil handler")
	}
	if err := checkOwner(opts.Owner); err != nil {
		return nil, fmt.Errorf("work queue %q: owner: %w", queue, err)
	}
	cfg, err := c.Config(ctx, queue)
	if err != nil {
		return nil, fmt.Errorf("work: %w", err) // err names the queue
	}
	if cfg.VisibilityTimeout <= 0 {
		return nil, fmt.Errorf("work queue %q: visibility timeout %v: must be positive", queue, cfg.VisibilityTimeout)
	}
	conc := max(opts.Concurrency, 1)
	batch := conc
	if opts.Batch > 0 {
		batch = min(opts.Batch, conc)
	}
	w := &worker{c: c, queue: queue, vis: cfg.VisibilityTimeout, opts: opts, h: h, logf: opts.Logf, stats: opts.Stats,
		finish: make(chan struct{}, 1), halt: make(chan struct{}), stop: make(chan struct{}),
		batch: batch, slots: make(chan struct{}, conc), finishing: make(chan struct{}, finishingPerSlot*conc)}
	if w.logf == nil {
		w.logf = func(string, ...any) {}
	}
	if w.stats == nil {
		w.stats = &Stats{}
	}
	w.tally = &tally{q: c.q, queue: queue, logf: w.logf}
	// The first claim of a limited queue looks before it spends a permit.
	w.rate, w.configReadAt, w.peek = cfg.RateLimit, time.Now(), true
	return w, nil
}

// watchStop closes w.stop when opts.Stop is closed (nil blocks for ever)
// or a handler cannot start, until the function it returns is called.
func (w *worker) watchStop() (done func()) {
	workDone := make(chan struct{})
	go func() {
		select {
		case <-w.opts.Stop:
		case <-w.halt:
		case <-workDone:
			return
		}
		close(w.stop)
	}()
	return func() { close(workDone) }
}

// loop claims jobs and starts their handlers until ctx ends (ctx's
// error), the worker is stopped or a drain ends (errStopped), or a claim
// fails for good.
func (w *worker) loop(ctx context.Context) error {
	for {
		select {
		case <-w.stop:
			return errStopped
		default:
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := w.whilePaused(ctx); err != nil {
			return err
		}
		n, err := w.takeSlots(ctx)
		if err != nil {
			return err // the deferred wg.Wait waits for the handlers
		}
		if w.halted() != nil {
			return errStopped // a handler could not start; Work says so
		}
		if w.rateLimit(ctx) != "" {
			if n, err = w.permits(ctx, n); err != nil || n == 0 {
				if err != nil {
					return err
				}
				continue // the loop head sees ctx and stop
			}
		}
		wake := w.c.wakeChan(w.queue) // before the claim: a push after it closes this channel
		jobs, sentAt, err := w.claim(ctx, n)
		if err != nil {
			if err := w.claimFailed(ctx, err); err != nil {
				return err
			}
			continue // the loop head sees ctx and stop
		}
		w.start(ctx, jobs, sentAt)
		if len(jobs) > 0 {
			w.backendReady, w.streak = false, 0
			continue
		}
		if err := w.nothingClaimable(ctx, wake); err != nil {
			return err
		}
	}
}

// pauseCheckEvery is how often a worker reads its queue's pause: an
// operator's pause (coordd queue pause) stops every worker's claims within
// about this long, and a resume restarts them as fast.
const pauseCheckEvery = time.Second

// whilePaused returns once the queue is not paused, reading its pause at
// most every pauseCheckEvery; while it is paused the worker claims
// nothing and its running jobs go on. It ends with ctx's error,
// errStopped, or an error for a queue that no longer exists. A failed
// read lets the claim go on: the claim says what is wrong.
func (w *worker) whilePaused(ctx context.Context) error {
	for {
		if time.Since(w.pauseReadAt) < pauseCheckEvery && w.paused == nil {
			return nil
		}
		p, err := w.c.q.QueuePaused(ctx, w.queue)
		w.pauseReadAt = time.Now()
		switch {
		case errors.Is(err, backends.ErrNotFound):
			return fmt.Errorf("work queue %q: %w", w.queue, err)
		case err != nil:
			return nil
		case p == nil:
			if w.paused != nil {
				w.logf("queue %s: resumed; claiming again", w.queue)
			}
			w.paused = nil
			return nil
		}
		if w.paused == nil {
			w.logf("queue %s: paused by %s at %s (%s); claiming nothing until it is resumed", w.queue, p.Host, p.At.UTC().Format(time.RFC3339), p.Reason)
		}
		w.paused = p
		if !sleep(ctx, w.stop, nil, pauseCheckEvery) {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return errStopped
		}
	}
}

// takeSlots waits for one free handler slot, then takes as many more as
// are free, up to a batch; while the queue has a backlog it waits a
// little for more (gather). It returns how many it took.
func (w *worker) takeSlots(ctx context.Context) (int, error) {
	select {
	case w.slots <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-w.stop:
		return 0, errStopped
	}
	n := 1 + takeFree(w.slots, w.batch-1)
	if w.full && n < w.batch {
		n += gather(ctx, w.stop, w.slots, w.batch-n)
	}
	return n, nil
}

// claim claims up to n jobs with a new owner token and gives back the
// slots of those it did not get. sentAt is when the claim was sent: the
// jobs' leases count from it.
func (w *worker) claim(ctx context.Context, n int) (jobs []backends.Job, sentAt time.Time, err error) {
	sentAt = time.Now()
	jobs, err = w.c.q.Claim(ctx, w.queue, newOwner(w.opts.Owner), n)
	w.full = err == nil && len(jobs) == n
	for range n - len(jobs) {
		<-w.slots
	}
	if err == nil {
		w.errWait = 0
		w.stats.Claimed.Add(int64(len(jobs)))
	}
	return jobs, sentAt, err
}

// claimFailed ends Work when ctx ended or the queue is gone; any other
// failure is logged and the claim is tried again after a backoff that
// doubles up to errorWaitMax.
func (w *worker) claimFailed(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, backends.ErrNotFound) {
		return fmt.Errorf("work queue %q: %w", w.queue, err)
	}
	w.errWait = min(max(2*w.errWait, 100*time.Millisecond), errorWaitMax)
	w.logf("queue %s: claim failed (retrying in %v): %v", w.queue, w.errWait, err)
	sleep(ctx, w.stop, nil, w.errWait)
	return nil
}

// start runs each claimed job in a goroutine of its own, in the slot
// taken for it.
func (w *worker) start(ctx context.Context, jobs []backends.Job, sentAt time.Time) {
	for _, j := range jobs {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			w.run(ctx, j, sentAt)
			select {
			case w.finish <- struct{}{}:
			default:
			}
		}()
	}
}

// nothingClaimable follows an empty claim: a drain whose handlers are done
// ends if the queue holds nothing it waits for (errStopped); otherwise the
// worker waits for work (idle), after a growing pause when the backend
// said a job was there yet none could be claimed.
func (w *worker) nothingClaimable(ctx context.Context, wake <-chan struct{}) error {
	if w.opts.Drain && len(w.slots) == 0 && w.drained(ctx) {
		return errStopped
	}
	if w.backendReady {
		// The backend said a job may be claimable, yet none was (a job
		// in a partition being moved, say): do not spin on it.
		w.streak++
		if !sleep(ctx, w.stop, wake, min(time.Duration(w.streak)*10*time.Millisecond, time.Second)) {
			return nil
		}
	} else {
		w.streak = 0
	}
	maxWait := idleWait
	if w.opts.Drain {
		maxWait = drainWait
	}
	w.backendReady = w.idle(ctx, w.stop, wake, maxWait)
	w.peek = !w.backendReady
	return nil
}

// configCheckEvery is how often a worker reads its queue's config for its
// rate_limit: one that apply adds or removes reaches running workers
// within about this long.
const configCheckEvery = 5 * time.Second

// rateLimit is the rate limit the queue's config names, read again every
// configCheckEvery (a failed read keeps the last one).
func (w *worker) rateLimit(ctx context.Context) string {
	if time.Since(w.configReadAt) >= configCheckEvery {
		w.configReadAt = time.Now()
		if cfg, err := w.c.Config(ctx, w.queue); err == nil {
			if cfg.RateLimit != w.rate {
				w.logf("queue %s: rate limit %q (was %q)", w.queue, cfg.RateLimit, w.rate)
			}
			w.rate = cfg.RateLimit
		}
	}
	return w.rate
}

// permits takes up to n permits of the queue's rate limit for the n
// handler slots taken, before the claim: a job is never claimed before it
// may start, so no lease runs while it waits for a permit. It gives back
// the slots it got no permit for and returns how many are left (0: none
// was due, after waiting until the next one is, or no job is ready). A
// permit whose claim then finds no job is spent: a limited queue runs at
// most at its rate. After an idle wait that saw no job, it first reads the
// queue and spends nothing when no job is ready.
func (w *worker) permits(ctx context.Context, n int) (int, error) {
	giveBack := func(k int) {
		for range k {
			<-w.slots
		}
	}
	if w.c.rl == nil {
		giveBack(n)
		return 0, fmt.Errorf("work queue %q: its rate limit %q: %w", w.queue, w.rate, backends.ErrUnsupported)
	}
	if w.peek {
		wake := w.c.wakeChan(w.queue)
		m, err := w.c.q.ObserveQueues(ctx, []string{w.queue})
		if st := m[w.queue]; err == nil && st != nil && st.ReadyNow() == 0 {
			giveBack(n)
			return 0, w.nothingClaimable(ctx, wake)
		}
		w.peek = false
	}
	p, err := w.c.rl.TakePermit(ctx, w.rate, "", n)
	switch {
	case err != nil:
		giveBack(n)
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		// A limit not yet applied (apply creates it before the queue's
		// new config, so only for a moment) or a backend that failed:
		// try again after the claim's backoff.
		w.errWait = min(max(2*w.errWait, 100*time.Millisecond), errorWaitMax)
		w.logf("queue %s: taking a permit of rate limit %s failed (retrying in %v): %v", w.queue, w.rate, w.errWait, err)
		sleep(ctx, w.stop, nil, w.errWait)
		return 0, nil
	case !p.Allowed:
		giveBack(n)
		sleep(ctx, w.stop, nil, p.RetryAfter)
		return 0, nil
	}
	giveBack(n - p.Granted)
	return p.Granted, nil
}

// drained reports whether the queue holds no job a drain waits for: none
// ready, delayed or in flight (ReadyOnly: none ready now). Otherwise it
// tells opts.DrainWait what is left.
func (w *worker) drained(ctx context.Context) bool {
	st, err := w.c.observe(ctx, w.queue)
	switch {
	case err == nil && (st.Ready+st.InFlight == 0 || w.opts.ReadyOnly && st.ReadyNow() == 0):
		return true
	case err == nil && w.opts.DrainWait != nil:
		w.opts.DrainWait(*st)
	case err != nil && ctx.Err() == nil:
		w.logf("queue %s: observe failed: %v", w.queue, err)
	}
	return false
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
