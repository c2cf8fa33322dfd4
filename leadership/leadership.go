package leadership

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/internal/repeatlog"
	"github.com/coordd/coordd/spec"
	"github.com/hashicorp/go-hclog"
)

// Config configures an Elector.
type Config struct {
	// Leader is the cluster backend's leader lease.
	Leader backends.Leader
	// Host identifies this host; the holder id adds the pid and a random
	// suffix. It must be a valid host id (spec.CheckHostID).
	Host string
	// Lease is the leader lease (cluster.leader_lease).
	Lease time.Duration
	Log   hclog.Logger
}

// Elector campaigns for and holds the leader lease.
type Elector struct {
	leader backends.Leader
	// clock reads the backend's clock when the Leader is also a Backend;
	// nil otherwise (followers then poll every campaignEvery).
	clock  func(context.Context) (time.Time, error)
	holder string
	lease  time.Duration
	margin time.Duration
	log    hclog.Logger
	// repeats says a failure that repeats through an outage once a
	// minute, and its end.
	repeats *repeatlog.Limiter

	// offset is the backend clock minus this host's, measured at offsetAt
	// (monotonic; zero: not measured). Only Run's goroutine uses them.
	offset   time.Duration
	offsetAt time.Time

	mu         sync.Mutex
	term       backends.Term
	held       bool      // Run believes it holds term
	trustUntil time.Time // monotonic
	subs       []chan bool
}

// Margin is the part of the lease a leader does not trust.
func Margin(lease time.Duration) time.Duration { return min(lease/5, time.Second) }

// New returns an elector; Run starts it. An invalid cfg.Host is
// spec.ErrInvalidHostID: the holder id is stored, listed and printed.
func New(cfg Config) (*Elector, error) {
	if err := spec.CheckHostID(cfg.Host); err != nil {
		return nil, fmt.Errorf("leadership: %w", err)
	}
	if cfg.Lease <= 0 {
		cfg.Lease = 4 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = hclog.NewNullLogger()
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	e := &Elector{
		leader:  cfg.Leader,
		holder:  fmt.Sprintf("%s/%d/%s", cfg.Host, os.Getpid(), hex.EncodeToString(b[:])),
		lease:   cfg.Lease,
		margin:  Margin(cfg.Lease),
		log:     cfg.Log,
		repeats: repeatlog.New(cfg.Log, repeatlog.DefaultWindow),
	}
	if c, ok := cfg.Leader.(interface {
		Now(context.Context) (time.Time, error)
	}); ok {
		e.clock = c.Now
	}
	return e, nil
}

// Holder is the holder id this elector campaigns with.
func (e *Elector) Holder() string { return e.holder }

// Leading returns the current term and true while this elector holds the
// lease and is inside its trust window.
func (e *Elector) Leading() (backends.Term, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.held && time.Now().Before(e.trustUntil) {
		return e.term, true
	}
	return backends.Term{}, false
}

// Subscribe returns a channel that receives true when leadership is gained
// and false when it is lost. It is buffered and only the latest state is
// kept: a slow reader may miss intermediate flips but always sees the last.
func (e *Elector) Subscribe() <-chan bool {
	ch := make(chan bool, 1)
	e.mu.Lock()
	e.subs = append(e.subs, ch)
	e.mu.Unlock()
	return ch
}

// publish sends v to every subscriber without blocking, replacing a value
// not yet read.
func (e *Elector) publish(v bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ch := range e.subs {
		select {
		case ch <- v:
		default:
			select {
			case <-ch:
			default:
			}
			select {
			case ch <- v:
			default:
			}
		}
	}
}

// Timing of the loop; see the package doc.
func (e *Elector) campaignEvery() time.Duration { return max(e.lease/8, 100*time.Millisecond) }
func (e *Elector) renewEvery() time.Duration    { return e.lease / 2 }
func (e *Elector) retryEvery() time.Duration    { return max(e.lease/10, 50*time.Millisecond) }
func (e *Elector) watchMax() time.Duration      { return e.lease / 2 }
func (e *Elector) watchMin() time.Duration      { return max(e.lease/200, 10*time.Millisecond) }

// wakeMargin is how long after the predicted expiry of another holder's
// lease a follower reads it again: timer lateness and the error of the
// clock offset (half a round trip) are far below it.
const wakeMargin = 20 * time.Millisecond

// offsetEvery is how often a follower measures the backend clock's offset
// again (one Now each time); clock rates differ by far less than wakeMargin
// over this span.
const offsetEvery = 10 * time.Minute

// gain records a successful election sent at sent.
func (e *Elector) gain(t backends.Term, sent time.Time) {
	e.mu.Lock()
	e.term, e.held, e.trustUntil = t, true, sent.Add(e.lease-e.margin)
	e.mu.Unlock()
	e.log.Info("gained leadership", "term", t.Term, "holder", t.Holder)
	e.publish(true)
}

// renewed moves the trust window after a renewal sent at sent.
func (e *Elector) renewed(t backends.Term, sent time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.term = t
	if u := sent.Add(e.lease - e.margin); u.After(e.trustUntil) {
		e.trustUntil = u
	}
}

// stepDown forgets the term and tells subscribers.
func (e *Elector) stepDown(why string, err error) {
	e.mu.Lock()
	t := e.term
	e.held, e.term, e.trustUntil = false, backends.Term{}, time.Time{}
	e.mu.Unlock()
	e.log.Warn("lost leadership", "term", t.Term, "reason", why, "error", err)
	e.publish(false)
}

func (e *Elector) state() (backends.Term, bool, time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.term, e.held, e.trustUntil
}

// Run campaigns and renews until ctx ends, then resigns the term it holds
// so that another host takes over at once.
func (e *Elector) Run(ctx context.Context) {
	defer e.resign(ctx)
	for {
		wait := e.step(ctx)
		if ctx.Err() != nil {
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// step makes one election or renewal and returns how long to sleep.
func (e *Elector) step(ctx context.Context) time.Duration {
	term, held, trustUntil := e.state()
	if !held {
		return e.follow(ctx)
	}
	// A renewal that has not answered by the end of the trust window is
	// useless: bound it there.
	rctx, cancel := context.WithDeadline(ctx, trustUntil)
	sent := time.Now()
	t, err := e.leader.RenewLeader(rctx, term, e.lease)
	cancel()
	switch {
	case err == nil:
		e.renewed(t, sent)
		return e.renewEvery()
	case ctx.Err() != nil:
		return 0
	case errors.Is(err, backends.ErrNotLeader):
		e.stepDown("another holder or term has the lease", err)
		return e.campaignEvery()
	}
	if left := time.Until(trustUntil); left > 0 {
		e.log.Warn("renewing the leader lease failed; retrying until the trust window closes", "term", term.Term, "left", left.Round(time.Millisecond), "error", err)
		return min(e.retryEvery(), left)
	}
	e.stepDown("renewals failed until the trust window closed", err)
	return 0
}

// follow is a follower's step. It reads the lease: when nobody holds it
// (or this holder still does) it campaigns at once; otherwise it sleeps
// until just after that lease would expire, as the backend's clock says
// (read through the measured offset), but never longer than watchMax, so
// that a lease ended early by ResignLeader is taken within lease/2 too.
// An idle follower thus reads the lease about twice per lease, and takes
// over from a dead leader about wakeMargin after its lease expires.
func (e *Elector) follow(ctx context.Context) time.Duration {
	cctx, cancel := context.WithTimeout(ctx, e.lease)
	defer cancel()
	cur, err := e.leader.CurrentLeader(cctx)
	if err == nil || errors.Is(err, backends.ErrNotFound) {
		e.repeats.Recovered("read", "reading the leader lease works again")
	}
	switch {
	case errors.Is(err, backends.ErrNotFound), err == nil && cur.Holder == e.holder:
		return e.campaign(cctx)
	case err != nil:
		if ctx.Err() == nil {
			e.repeats.Warn("read", "reading the leader lease failed", "error", err)
		}
		return e.campaignEvery()
	}
	now, ok := e.backendNow(cctx)
	if !ok {
		return e.campaignEvery()
	}
	left := cur.ExpiresAt.Sub(now)
	if left <= 0 {
		// The backend says live, the estimate says expired: measure the
		// offset again before trusting it.
		e.offsetAt = time.Time{}
		return e.watchMin()
	}
	return min(max(left+wakeMargin, e.watchMin()), e.watchMax())
}

// campaign tries to take the lease.
func (e *Elector) campaign(ctx context.Context) time.Duration {
	sent := time.Now()
	t, err := e.leader.ElectLeader(ctx, e.holder, e.lease)
	switch {
	case err == nil:
		e.repeats.Recovered("campaign", "campaigning works again")
		e.gain(t, sent)
		return e.renewEvery()
	case errors.Is(err, backends.ErrNotLeader):
		// Another follower won: its lease is fresh.
		e.repeats.Recovered("campaign", "campaigning works again")
		return e.watchMax()
	case ctx.Err() == nil:
		e.repeats.Warn("campaign", "campaign failed", "error", err)
	}
	return e.campaignEvery()
}

// backendNow estimates the backend's clock from this host's and the
// offset, measuring the offset first when it is unknown or old. It
// reports false when the backend has no clock or the measurement failed.
func (e *Elector) backendNow(ctx context.Context) (time.Time, bool) {
	if e.clock == nil {
		return time.Time{}, false
	}
	if e.offsetAt.IsZero() || time.Since(e.offsetAt) > offsetEvery {
		sent := time.Now()
		bt, err := e.clock(ctx)
		recv := time.Now()
		if err != nil {
			return time.Time{}, false
		}
		e.offset = bt.Sub(sent.Add(recv.Sub(sent) / 2))
		e.offsetAt = recv
	}
	return time.Now().Add(e.offset), true
}

// resign ends the held term with a bounded context.
func (e *Elector) resign(ctx context.Context) {
	term, held, _ := e.state()
	if !held {
		return
	}
	e.mu.Lock()
	e.held, e.term, e.trustUntil = false, backends.Term{}, time.Time{}
	e.mu.Unlock()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(e.lease, 2*time.Second))
	defer cancel()
	if err := e.leader.ResignLeader(rctx, term); err != nil {
		e.log.Warn("resign failed; the lease expires by itself", "term", term.Term, "error", err)
	} else {
		e.log.Info("resigned leadership", "term", term.Term)
	}
	e.publish(false)
}
