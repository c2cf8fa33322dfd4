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
	"github.com/hashicorp/go-hclog"
)

// Config configures an Elector.
type Config struct {
	// Leader is the cluster backend's leader lease.
	Leader backends.Leader
	// Host identifies this host; the holder id adds the pid and a random
	// suffix.
	Host string
	// Lease is the leader lease (cluster.leader_lease).
	Lease time.Duration
	Log   hclog.Logger
}

// Elector campaigns for and holds the leader lease.
type Elector struct {
	leader backends.Leader
	holder string
	lease  time.Duration
	margin time.Duration
	log    hclog.Logger

	mu         sync.Mutex
	term       backends.Term
	held       bool      // Run believes it holds term
	trustUntil time.Time // monotonic
	subs       []chan bool
}

// Margin is the part of the lease a leader does not trust.
func Margin(lease time.Duration) time.Duration { return min(lease/5, time.Second) }

// New returns an elector; Run starts it.
func New(cfg Config) *Elector {
	if cfg.Lease <= 0 {
		cfg.Lease = 4 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = hclog.NewNullLogger()
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	host := cfg.Host
	if host == "" {
		host = "unknown"
	}
	return &Elector{
		leader: cfg.Leader,
		holder: fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b[:])),
		lease:  cfg.Lease,
		margin: Margin(cfg.Lease),
		log:    cfg.Log,
	}
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

func (e *Elector) campaignEvery() time.Duration { return max(e.lease/8, 100*time.Millisecond) }
func (e *Elector) renewEvery() time.Duration    { return e.lease / 3 }
func (e *Elector) retryEvery() time.Duration    { return max(e.lease/10, 50*time.Millisecond) }

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
		cctx, cancel := context.WithTimeout(ctx, e.lease)
		sent := time.Now()
		t, err := e.leader.ElectLeader(cctx, e.holder, e.lease)
		cancel()
		switch {
		case err == nil:
			e.gain(t, sent)
			return e.renewEvery()
		case errors.Is(err, backends.ErrNotLeader), ctx.Err() != nil:
		default:
			e.log.Warn("campaign failed", "error", err)
		}
		return e.campaignEvery()
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
