// Package semaphore is the Go API for coordd semaphores: acquire a slot with
// a context, keep its lease alive while work runs, learn through a channel
// when it is lost, and release it.
//
// The backend does the counting (see backends.Semaphores); this package adds
// waiting. Acquire is the loop every waiting caller runs (`sem run`, a cron
// task's semaphore, the Go API):
//
//  1. TryAcquire with the attempt's owner token. The backend grants a slot
//     only by the line's rule: fewer live waiters ahead of the owner than
//     slots free (a caller not yet in line has every waiter ahead of it),
//     so waiters are served first come, first served and a newcomer or a
//     NoWait caller never takes a slot a waiter is entitled to. The grant
//     takes the owner out of the line in the same transaction or script.
//  2. On ErrNoSlot, NoWait gives up; otherwise EnterWait joins the line
//     under the same token (or renews the waiter record, keeping the
//     place). The record is leased (WaiterLease): a waiter that crashed
//     holds the line for at most that long. The first time, Acquire runs
//     the backend's wake-up repair pass (backends.WakeRepairer), so that a
//     waiter never depends on a daemon to wake parked waiters that a
//     releaser who died left asleep.
//  3. WaitSemaphore until it may be the owner's turn, at most a third of
//     the waiter lease (so the record is renewed in time), then 1 again.
//     On its way out (granted, given up, cancelled) Acquire leaves the line.
//
// A backend that can lose its data (backends.LossGuard: Redis, memcached)
// holds its semaphores for the longest lease after a loss, a restart or a
// failover (docs/design.md, "When Redis loses its data"). Acquire treats
// that hold as a wait, not a failure: when the semaphore is missing and the
// backend's marker says it is held (or was until moments ago, and is being
// re-created), or the backend refuses a slot during a hold
// (backends.ErrLossHold), a waiting caller waits for the hold to end and
// takes its slot then, and a NoWait caller gets ErrNotAcquired. A missing
// semaphore on a backend whose marker is missing too may be a loss the
// daemon's leader has not recorded yet: a waiting caller gives it
// LossNoticeWait before it reports the semaphore missing.
//
// A waiting caller also rides out a backend it cannot reach for a moment
// (a restart, a failover, a dropped connection): it tries again, pausing up
// to 2 s, until its wait ends. A NoWait caller reports the error.
//
// A backend without Waiters (memcached) keeps no line: Acquire polls
// TryAcquire every 200 ms, and whoever tries first after a release wins.
//
// A keyed semaphore (`keyed: true`) is acquired with AcquireOptions.Key:
// each key is an instance of its own, with the semaphore's limit and
// max_waiting, its own holders and its own line (backends/instance.go), so
// that "one runs, one waits, the rest are dropped" holds per
// user id or per file. Everything above applies to the instance.
//
// In one process, waiters are woken on release with no lost wake-ups: a
// waiter reads its name's release count *before* it tries to acquire, and
// registers its wake channel only if no release came since (else it tries
// again at once), so a release that lands between a failed try and the
// wait still wakes it (the scheme of a condition variable, as in the
// DBM message queue design). An acquire that gets its slot and a release that finds nobody
// waiting in the process touch no channel and no lock: the uncontended
// pair costs the backend's two round trips and little else. Across processes the backend's WaitSemaphore takes over: a
// blocking pop on each waiter's own list on Redis, a statement parked in
// the server and ended by KILL QUERY on MySQL, a bounded backoff poll on
// SQLite; each wakes the waiter whose turn a release makes.
//
// A lease is trusted only until a deadline on the monotonic clock: the send
// time of the last successful renewal plus the lease, minus a margin. The
// deadline never depends on the host's wall clock or on the backend's clock
// agreeing with it.
package semaphore

import (
	"context"
	"crypto/rand"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// ErrNotAcquired is returned when no slot was free in time (--no-wait, or
// the wait elapsed; then wrapped as "not acquired: no free slot in 5s").
// It wraps backends.ErrNoSlot. A caller names the semaphore: the text
// says only what happened, so that "sem run: s: not acquired: no free
// slot" reads each fact once.
var ErrNotAcquired = fmt.Errorf("not acquired: %w", backends.ErrNoSlot)

// Client acquires slots of the semaphores held by one backend.
type Client struct {
	sems    backends.Semaphores
	waiters backends.Waiters // nil when the backend has none
	// repairer wakes waiters that a lost release left parked (nil when
	// the backend parks none).
	repairer backends.WakeRepairer
	// loss reads the marker of a backend that can lose its data (nil:
	// it cannot); backend is the backend's name.
	loss    backends.LossGuard
	backend string
	host    string
	pid     int
	// owners makes owner tokens: a random prefix per Client and a counter
	// (unique without a read of the system's random source per acquire).
	ownerPrefix string
	owners      atomic.Uint64

	// releases counts the releases of the names hashed to each bucket
	// (wakeBucket); waiting counts the acquires of this Client that wait.
	// wakes holds the channels of waited-for names, under mu.
	releases [wakeBuckets]atomic.Uint64
	waiting  atomic.Int64
	mu       sync.Mutex
	wakes    map[backends.SemRef]chan struct{}
}

// wakeBuckets spreads names over release counters: a release of another
// name in the same bucket only makes a waiter try once more.
const wakeBuckets = 64

var wakeSeed = maphash.MakeSeed()

// wakeBucket is ref's release counter.
func wakeBucket(ref backends.SemRef) int { return int(maphash.Comparable(wakeSeed, ref) % wakeBuckets) }

// New returns a client for b. host identifies this machine in holder
// records; it must be a valid host id (spec.ErrInvalidHostID otherwise).
func New(b backends.Backend, host string) (*Client, error) {
	if err := spec.CheckHostID(host); err != nil {
		return nil, err
	}
	s := b.Semaphores()
	if s == nil {
		return nil, fmt.Errorf("backend %q (%s) cannot hold semaphores: %w", b.Name(), b.Type(), backends.ErrUnsupported)
	}
	w := s.Waiters()
	r, _ := b.(backends.WakeRepairer)
	lg, _ := b.(backends.LossGuard)
	var p [8]byte
	_, _ = rand.Read(p[:])
	return &Client{sems: s, waiters: w, repairer: r, loss: lg, backend: b.Name(), host: host, pid: os.Getpid(),
		ownerPrefix: hex.EncodeToString(p[:]) + "-", wakes: map[backends.SemRef]chan struct{}{}}, nil
}

// waitChan returns the channel the next release of name closes, or nil
// when a release of name's bucket came since the caller read releases
// (seen): the caller then tries again at once. After a non-nil channel the
// caller calls unwait. The order (count this waiter, then look at the
// releases; a release counts itself, then looks for waiters) is what loses
// no wake-up: either the release sees this waiter, or this waiter sees the
// release.
func (c *Client) waitChan(ref backends.SemRef, bucket int, seen uint64) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.waiting.Add(1)
	if c.releases[bucket].Load() != seen {
		c.waiting.Add(-1)
		return nil
	}
	ch, ok := c.wakes[ref]
	if !ok {
		ch = make(chan struct{})
		c.wakes[ref] = ch
	}
	return ch
}

// unwait ends a wait that waitChan started.
func (c *Client) unwait() { c.waiting.Add(-1) }

// wake wakes every in-process waiter of ref.
func (c *Client) wake(ref backends.SemRef) {
	c.releases[wakeBucket(ref)].Add(1)
	if c.waiting.Load() == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if ch, ok := c.wakes[ref]; ok {
		close(ch)
		delete(c.wakes, ref)
	}
}

// AcquireOptions tune one acquire.
type AcquireOptions struct {
	// Lease is the lease to ask for; it is renewed by KeepAlive.
	Lease time.Duration
	// NoWait fails at once with ErrNotAcquired when no slot is free for a
	// newcomer: a slot that a waiter in line is entitled to is not free.
	NoWait bool
	// Wait bounds the wait; zero waits until ctx ends.
	Wait time.Duration
	// WaitSince is when the wait began, when the caller already waited
	// before Acquire (`sem run` riding out a backend it could not reach):
	// Wait counts from it. Zero: from the call.
	WaitSince time.Time
	// WaiterLease is how long a waiter record outlives a crashed waiter,
	// which holds its place in line (and the slot it is entitled to) until
	// then. Default 30s. A waiter renews its record every third of it.
	WaiterLease time.Duration
	// Key names the instance of a keyed semaphore to acquire; it must be
	// set for a keyed semaphore (backends.ErrKeyRequired otherwise) and
	// empty for any other (backends.ErrNotKeyed). It obeys spec.CheckKey
	// (spec.ErrInvalidKey, before any backend is touched).
	Key string
	// OnLossHold, when not nil, is called while Acquire waits for a
	// data-loss hold (see the package comment), each time what it waits
	// for changes: `sem run` tells a person at a terminal why it waits.
	OnLossHold func(backends.LossHoldError)
}

// LossNoticeWait is how long a waiting Acquire waits for the loss of a
// semaphore's data to be recorded, when the semaphore and the backend's
// marker are both missing, before it reports the semaphore missing: the
// daemon's leader checks the marker every few seconds.
const LossNoticeWait = 15 * time.Second

// notAcquired is ErrNotAcquired for a reason other than a full semaphore
// (a data-loss hold): errors.Is finds ErrNotAcquired and the reason.
type notAcquired struct {
	cause error
	wait  time.Duration // the wait that elapsed; 0: NoWait
}

func (e *notAcquired) Error() string {
	if e.wait > 0 {
		return fmt.Sprintf("not acquired in %v: %v", e.wait, e.cause)
	}
	return "not acquired: " + e.cause.Error()
}

func (e *notAcquired) Unwrap() []error { return []error{ErrNotAcquired, e.cause} }

// Lease is one held slot.
type Lease struct {
	Name string
	// Key is the instance's key when the semaphore is keyed, else "".
	Key     string
	Slot    int
	Fencing int64
	Owner   string
	// AcquiredAt is when the acquiring request was sent (monotonic). A
	// child supervisor counts the lease from RenewedAt, which is later once
	// renewed.
	AcquiredAt time.Time
	lease      time.Duration
	c          *Client
	ref        backends.SemRef // what the backend calls the semaphore or instance

	mu       sync.Mutex
	deadline time.Time     // monotonic: sentAt + lease - margin
	lost     chan struct{} // made on first use (Lost, markLost)
	isLost   bool
	released bool
}

// Margin is how much of a lease is not trusted: time for the request, and
// for clocks that run at slightly different rates.
func Margin(lease time.Duration) time.Duration {
	return min(lease/10, 2*time.Second)
}

// newOwner returns an owner token no other acquire uses: the Client's
// random prefix and a count.
func (c *Client) newOwner() string {
	return c.ownerPrefix + strconv.FormatUint(c.owners.Add(1), 16)
}

// Acquire takes a slot of name, waiting in line as opts say (see the
// package comment). It returns ErrNotAcquired when none was free in time
// and backends.ErrTooManyWaiters when max_waiting waiters already queue.
func (c *Client) Acquire(ctx context.Context, name string, opts AcquireOptions) (*Lease, error) {
	if opts.Lease <= 0 {
		return nil, errors.New("acquire: lease must be positive")
	}
	ref := backends.SemRef{Name: name, Key: opts.Key}
	if ref.IsInstance() {
		if err := backends.CheckInstanceKey(opts.Key); err != nil {
			return nil, fmt.Errorf("acquire %q: %w", name, err)
		}
	}
	owner := c.newOwner()
	bucket := wakeBucket(ref)
	var deadline <-chan time.Time
	if opts.Wait > 0 {
		wait := opts.Wait
		if !opts.WaitSince.IsZero() {
			wait = max(opts.Wait-time.Since(opts.WaitSince), time.Millisecond)
		}
		t := time.NewTimer(wait)
		defer t.Stop()
		deadline = t.C
	}
	waiterLease := opts.WaiterLease
	if waiterLease <= 0 {
		waiterLease = 30 * time.Second
	}
	registered := false
	var loss lossWait
	var outage time.Duration // the next pause while the backend cannot be reached
	defer func() {
		if registered {
			lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = c.waiters.LeaveWait(lctx, ref, owner)
		}
	}()
	for {
		seen := c.releases[bucket].Load() // before the try: a release after it wakes this caller
		sentAt := time.Now()
		g, err := c.sems.TryAcquire(ctx, ref, backends.AcquireRequest{Owner: owner, Host: c.host, PID: c.pid, Lease: opts.Lease})
		if err == nil {
			return &Lease{
				Name: name, Key: opts.Key, Slot: g.Slot, Fencing: g.Fencing, Owner: owner, AcquiredAt: sentAt, lease: opts.Lease, c: c,
				ref: ref, deadline: sentAt.Add(opts.Lease - Margin(opts.Lease)),
			}, nil
		}
		if !errors.Is(err, backends.ErrNoSlot) {
			if c.rideOut(ctx, err, opts, deadline, &outage) {
				continue
			}
			if werr := loss.wait(ctx, c, err, opts, deadline); werr == err {
				return nil, fmt.Errorf("acquire %s: %w", ref, err)
			} else if werr != nil {
				return nil, werr
			}
			continue
		}
		if opts.NoWait {
			return nil, ErrNotAcquired
		}
		if c.waiters != nil {
			// Registering (and renewing) the waiter record enforces
			// max_waiting; a crashed waiter's record expires on its own.
			if err := c.enterWait(ctx, ref, owner, waiterLease); err != nil {
				if full := waitersFull(err); full != nil {
					return nil, fmt.Errorf("not acquired: %w", full)
				}
				if c.rideOut(ctx, err, opts, deadline, &outage) {
					continue
				}
				return nil, fmt.Errorf("wait for %s: %w", ref, err)
			}
			if !registered {
				registered = true
				c.repairWakeups(ctx, ref)
			}
		}
		wake := c.waitChan(ref, bucket, seen)
		if wake == nil {
			continue // a release came since the try
		}
		err = c.waitOnce(ctx, ref, owner, wake, deadline, waiterLease/3)
		c.unwait()
		if errors.Is(err, ErrNotAcquired) {
			return nil, fmt.Errorf("%w in %v", ErrNotAcquired, opts.Wait)
		}
		if err != nil && c.rideOut(ctx, err, opts, deadline, &outage) {
			continue
		}
		if err != nil {
			return nil, err
		}
		outage = 0
	}
}

// lossWait is what Acquire keeps across its tries about data-loss holds.
type lossWait struct {
	unrecorded time.Time // when the semaphore was first found missing with no marker
	told       string    // the last hold given to OnLossHold
}

// wait waits out the data-loss hold that explains err, from TryAcquire
// (see the package comment), and returns nil for Acquire to try again; or
// it returns the error Acquire gives up with: err itself when no hold
// explains it, ErrNotAcquired for the hold (NoWait, or the wait elapsed),
// or ctx's error.
func (w *lossWait) wait(ctx context.Context, c *Client, err error, opts AcquireOptions, deadline <-chan time.Time) error {
	hold := c.lossHold(ctx, err)
	switch {
	case hold == nil:
		return err
	case hold.Until.IsZero() && opts.NoWait:
		return err
	case hold.Until.IsZero() && w.unrecorded.IsZero():
		w.unrecorded = time.Now()
	case hold.Until.IsZero() && time.Since(w.unrecorded) > LossNoticeWait:
		return err
	case opts.NoWait:
		return &notAcquired{cause: hold}
	}
	if msg := hold.Error(); msg != w.told && opts.OnLossHold != nil {
		w.told = msg
		opts.OnLossHold(*hold)
	}
	if err := sleepHold(ctx, hold, deadline); err != nil {
		if errors.Is(err, ErrNotAcquired) {
			return &notAcquired{cause: hold, wait: opts.Wait}
		}
		return err
	}
	return nil
}

// lossHold is the data-loss hold that explains err, from TryAcquire, or
// nil: a hold the backend reported (backends.ErrLossHold), or a semaphore
// missing from a backend whose marker says it is held or being re-created
// after a hold. A missing semaphore whose marker is missing too gives a
// hold with a zero Until: a loss not recorded yet, or a semaphore never
// applied, which Acquire tells apart by waiting LossNoticeWait.
func (c *Client) lossHold(ctx context.Context, err error) *backends.LossHoldError {
	if h, ok := errors.AsType[*backends.LossHoldError](err); ok {
		return h
	}
	if c.loss == nil || !errors.Is(err, backends.ErrNotFound) {
		return nil
	}
	st, oerr := c.loss.ObserveLoss(ctx)
	switch {
	case oerr != nil:
		return nil
	case !st.Marked:
		return &backends.LossHoldError{Backend: c.backend, Cause: backends.LossCauseLost}
	}
	return st.MissingHold(c.backend)
}

// rideOut reports whether Acquire should try again after err, which says
// the backend could not be reached or dropped the connection (a restart, a
// failover, a network blip): a waiting caller rides that out within its
// wait, pausing 100 ms, then twice as long each time up to 2 s (*pause), as
// it would wait for a busy slot; a NoWait caller does not. It returns false
// at once for any other error, and once ctx or the wait ended (the caller
// then reports err).
func (c *Client) rideOut(ctx context.Context, err error, opts AcquireOptions, deadline <-chan time.Time, pause *time.Duration) bool {
	if opts.NoWait || ctx.Err() != nil || !Unreachable(err) {
		return false
	}
	*pause = min(max(*pause*2, 100*time.Millisecond), 2*time.Second)
	t := time.NewTimer(*pause)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-deadline:
	case <-ctx.Done():
	}
	return false
}

// Unreachable reports whether err says that the backend could not be
// reached, dropped the connection, is still starting up (Redis LOADING) or
// is a replica now (Redis READONLY, MASTERDOWN: a failover under way; the
// client drops such a connection and dials the address again), rather
// than refusing the request.
func Unreachable(err error) bool {
	if ne, ok := errors.AsType[net.Error](err); ok && ne != nil {
		return true
	}
	for _, e := range []error{io.EOF, io.ErrUnexpectedEOF, syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.EPIPE, driver.ErrBadConn} {
		if errors.Is(err, e) {
			return true
		}
	}
	msg := err.Error()
	for _, code := range []string{"LOADING ", "READONLY ", "MASTERDOWN "} {
		if strings.Contains(msg, code) {
			return true
		}
	}
	return false
}

// sleepHold waits while hold runs: until it ends (then a little more, for
// the leader to re-create the semaphores), at most 2 s before the caller
// looks again; ErrNotAcquired at the deadline.
func sleepHold(ctx context.Context, hold *backends.LossHoldError, deadline <-chan time.Time) error {
	d := 250 * time.Millisecond
	if hold.Left > 0 {
		d = min(hold.Left+20*time.Millisecond, 2*time.Second)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-deadline:
		return ErrNotAcquired
	case <-ctx.Done():
		return ctx.Err()
	}
}

// enterWait joins (or renews) the line as owner, naming this host and
// pid so that operators see who waits in the line.
func (c *Client) enterWait(ctx context.Context, ref backends.SemRef, owner string, lease time.Duration) error {
	return c.waiters.EnterWait(ctx, ref, backends.AcquireRequest{Owner: owner, Host: c.host, PID: c.pid, Lease: lease})
}

// waitersFull is the part of a backend's max_waiting refusal that says
// what happened ("2 of 2 waiting: max_waiting reached"), without the
// backend's operation, name and owner token around it, or nil when err is
// not such a refusal.
func waitersFull(err error) error {
	if !errors.Is(err, backends.ErrTooManyWaiters) {
		return nil
	}
	for e := err; e != nil; e = errors.Unwrap(e) {
		if inner := errors.Unwrap(e); inner == backends.ErrTooManyWaiters {
			return e
		}
	}
	return backends.ErrTooManyWaiters
}

// repairWakeups runs the backend's wake-up repair pass for ref, when it
// has one: a waiter must not depend on a daemon to be woken after a
// releaser died between its release and its wake-up. A failure only leaves
// parked waiters to the end of their sleep, so it is not returned.
func (c *Client) repairWakeups(ctx context.Context, ref backends.SemRef) {
	if c.repairer == nil {
		return
	}
	_, _ = c.repairer.RepairWakeups(ctx, []backends.SemRef{ref})
}

// waitOnce blocks until an in-process release, a backend wake-up, the
// deadline (ErrNotAcquired), ctx's end, or max.
func (c *Client) waitOnce(ctx context.Context, ref backends.SemRef, owner string, wake <-chan struct{}, deadline <-chan time.Time, max time.Duration) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		if c.waiters != nil {
			done <- c.waiters.WaitSemaphore(wctx, ref, owner, max)
			return
		}
		// Without a backend wake-up, poll at a gentle bounded rate.
		t := time.NewTimer(min(max, 200*time.Millisecond))
		defer t.Stop()
		select {
		case <-t.C:
			done <- nil
		case <-wctx.Done():
			done <- wctx.Err()
		}
	}()
	// The backend's wait is always over when waitOnce returns: it may hold
	// state for owner (a session-mode wait holds a connection) that the
	// caller's next TryAcquire or LeaveWait must find settled.
	stop := func() { cancel(); <-done }
	select {
	case <-wake:
		stop()
		return nil
	case err := <-done:
		if err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("wait for %s: %w", ref, err)
		}
		return ctx.Err()
	case <-deadline:
		stop()
		return ErrNotAcquired
	case <-ctx.Done():
		stop()
		return ctx.Err()
	}
}

// Lost is closed when the lease is lost: an extend found another owner, or
// the deadline passed without a successful renewal.
func (l *Lease) Lost() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lostChan()
}

// lostChan is Lost's channel, made on first use (l.mu held): most leases
// are released without anybody asking.
func (l *Lease) lostChan() chan struct{} {
	if l.lost == nil {
		l.lost = make(chan struct{})
		if l.isLost {
			close(l.lost)
		}
	}
	return l.lost
}

// Deadline is the monotonic instant until which the lease is trusted.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// RenewedAt is the send time of the acquire or of the latest extend
// (monotonic): a child supervisor started now counts the lease from it.
func (l *Lease) RenewedAt() time.Time {
	return l.Deadline().Add(-(l.lease - Margin(l.lease)))
}

func (l *Lease) markLost() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.isLost {
		l.isLost = true
		if l.lost != nil {
			close(l.lost)
		}
	}
}

// Extend renews the lease once. It returns backends.ErrLost (and closes
// Lost) when the slot is no longer this lease's.
func (l *Lease) Extend(ctx context.Context) error {
	sentAt := time.Now()
	_, err := l.c.sems.Extend(ctx, l.ref, l.Owner, l.lease)
	if err != nil {
		if errors.Is(err, backends.ErrLost) {
			l.markLost()
		}
		return l.opErr("extend", err)
	}
	l.mu.Lock()
	if d := sentAt.Add(l.lease - Margin(l.lease)); d.After(l.deadline) {
		l.deadline = d
	}
	l.mu.Unlock()
	return nil
}

// KeepAlive renews the lease about every lease/3 until ctx ends or the
// lease is lost. onRenew, when not nil, gets the send time of each
// successful renewal (a child supervisor moves its kill deadline with it).
// Renew only while the work is really alive: a stuck worker whose timer keeps
// renewing holds its slot for ever.
func (l *Lease) KeepAlive(ctx context.Context, onRenew func(sentAt time.Time)) {
	every := max(l.lease/3, 10*time.Millisecond)
	t := time.NewTimer(every)
	defer t.Stop()
	lost := l.Lost()
	for {
		select {
		case <-ctx.Done():
			return
		case <-lost:
			return
		case <-t.C:
		}
		sentAt := time.Now()
		err := l.Extend(ctx)
		switch {
		case err == nil:
			if onRenew != nil {
				onRenew(sentAt)
			}
			t.Reset(every)
		case errors.Is(err, backends.ErrLost):
			return
		case time.Now().After(l.Deadline()):
			l.markLost()
			return
		default:
			// A transient error: retry sooner, while the deadline allows.
			t.Reset(max(every/4, 10*time.Millisecond))
		}
	}
}

// Release frees the slot and wakes this process's waiters. It returns
// backends.ErrLost when the lease had already been lost. After any other
// error the slot may still be held: Release may be called again (see
// internal/retry); once it succeeded or found the lease lost, further calls
// return nil.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return nil
	}
	l.mu.Unlock()
	err := l.c.sems.Release(ctx, l.ref, l.Owner)
	l.c.wake(l.ref)
	if err == nil || errors.Is(err, backends.ErrLost) {
		l.mu.Lock()
		l.released = true
		l.mu.Unlock()
	}
	if err != nil {
		if errors.Is(err, backends.ErrLost) {
			l.markLost()
		}
		return l.opErr("release", err)
	}
	return nil
}

// opErr names the operation and the semaphore in err, unless the backend
// did already (`release "s": lease lost`): each reads once.
func (l *Lease) opErr(op string, err error) error {
	if msg := err.Error(); strings.Contains(msg, op) && strings.Contains(msg, strconv.Quote(l.Name)) {
		return err
	}
	return fmt.Errorf("%s %s: %w", op, l.ref, err)
}
