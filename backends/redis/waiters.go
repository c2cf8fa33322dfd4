package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/coordd/coordd/backends"
)

var _ backends.Waiters = (*Store)(nil)

// Blocking calls (a waiter's BLPOP) hold a connection for as long as they
// block, so they run on a client of their own, created on first use, so
// that waiters never starve the commands of the main pool. At most
// semBlockConns of them block at once per Store; a waiter beyond that
// waits in the process for a connection (until its own timeout, then it
// returns and its caller tries again), never for a pool timeout error.
const (
	semBlockConns = 128
	// semBlockMax caps one BLPOP; the caller simply waits again.
	semBlockMax = time.Hour
	// semBlockGrace is how much longer than its timeout a BLPOP may take
	// before the client gives up on the connection.
	semBlockGrace = 5 * time.Second
)

// EnterWait registers owner as a waiter of semaphore name, leased for lease
// in backend time, behind every live waiter, after pruning expired waiter
// records. If owner already waits, its lease is renewed and it keeps its
// place. It returns ErrTooManyWaiters when max_waiting live waiters exist,
// ErrNotFound when the semaphore is absent.
func (s *Store) EnterWait(ctx context.Context, name, owner string, lease time.Duration) error {
	if err := s.writable(); err != nil {
		return err
	}
	if owner == "" {
		return s.semErr("enter wait", name, errors.New("empty owner"))
	}
	us, err := semMicros(lease)
	if err != nil {
		return s.semErr("enter wait", name, err)
	}
	v, err := semEnterWaitScript.Run(ctx, s.rdb, s.semKeys(name), owner, us).Int64Slice()
	if err != nil {
		return s.semErr("enter wait", name, err)
	}
	switch v[0] {
	case 0, 1:
		return nil
	case -1:
		return s.semErr("enter wait", name, backends.ErrNotFound)
	default:
		return s.semErr("enter wait", name, fmt.Errorf("%d of %d waiting: %w", v[1], v[2], backends.ErrTooManyWaiters))
	}
}

// LeaveWait removes owner's waiter record; absent is not an error.
func (s *Store) LeaveWait(ctx context.Context, name, owner string) error {
	if err := s.writable(); err != nil {
		return err
	}
	if err := semLeaveWaitScript.Run(ctx, s.rdb, s.semKeys(name), owner).Err(); err != nil {
		return s.semErr("leave wait", name, err)
	}
	return nil
}

// FirstWaiter returns the owner at the head of semaphore name's line: the
// live waiter that entered first, "" when nobody waits. A caller serving
// waiters FIFO lets only the head of the line call TryAcquire: as in the
// other backends, TryAcquire itself takes any free token. Among waiters
// blocked in WaitSemaphore, Redis serves BLPOP in the order the clients
// blocked, so a release wakes the longest-blocked waiter first.
func (s *Store) FirstWaiter(ctx context.Context, name string) (string, error) {
	owner, err := semFirstWaiterScript.Run(ctx, s.rdb, s.semKeys(name)).Text()
	if err != nil {
		return "", s.semErr("first waiter", name, err)
	}
	return owner, nil
}

// WaitSemaphore returns at once when TryAcquire may succeed (or the
// semaphore is absent, so that TryAcquire reports it); otherwise it blocks
// in BLPOP on the semaphore's wake list until a release (or growth, or a
// repair) pushes a wake element, maxWait elapses, or the earliest live
// lease expires, whichever comes first, so that an expired lease is always
// noticed without polling. It returns nil in those cases and ctx's error
// when ctx ends; the caller retries TryAcquire either way.
//
// A cancelled ctx ends the BLPOP at once: the waiter listens on a private
// interrupt list too, and cancellation pushes to it (go-redis only honours
// a context's deadline, not its cancellation, on a blocked read). A wake
// element a cancelled waiter took is given back.
func (s *Store) WaitSemaphore(ctx context.Context, name, _ string, maxWait time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.writable(); err != nil {
		return err
	}
	start := time.Now()
	keys := s.semKeys(name)
	v, err := semWaitCheckScript.Run(ctx, s.rdb, keys).Int64Slice()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return s.semErr("wait", name, err)
	}
	if v[0] == 1 {
		return nil
	}
	d := min(maxWait-time.Since(start), semBlockMax)
	if v[1] >= 0 {
		// Wake just after the earliest lease ends: TryAcquire reclaims it.
		d = min(d, time.Duration(v[1])*time.Microsecond+time.Millisecond)
	}
	if d <= 0 {
		return nil
	}
	return s.semBlock(ctx, name, keys, d)
}

// semBlock runs one BLPOP of at most d on the wake list.
func (s *Store) semBlock(ctx context.Context, name string, keys []string, d time.Duration) error {
	bc, done, err := s.sems.blocker(ctx, s, d)
	if err != nil || bc == nil {
		return err
	}
	defer done()

	var id [8]byte
	_, _ = rand.Read(id[:])
	interrupt := s.keys.semInterrupt(name, hex.EncodeToString(id[:]))
	pushed := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(pushed)
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), semBlockGrace)
		defer cancel()
		pipe := s.rdb.Pipeline()
		pipe.RPush(pctx, interrupt, "1")
		pipe.PExpire(pctx, interrupt, time.Minute) // in case the waiter is gone
		_, _ = pipe.Exec(pctx)
	})
	// The BLPOP's own context has no cancellation (the interrupt does
	// that), only a deadline past its timeout in case the server hangs.
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d+semBlockGrace)
	secs := strconv.FormatFloat(max(d.Seconds(), 0.001), 'f', 3, 64)
	res, err := bc.Do(bctx, "BLPOP", interrupt, keys[semKeyWake], secs).StringSlice()
	cancel()
	interrupted := !stop()
	if interrupted {
		<-pushed
	}
	if ctx.Err() != nil {
		tookWake := err == nil && len(res) > 0 && res[0] == keys[semKeyWake]
		if interrupted || tookWake {
			give := "0"
			if tookWake {
				give = "1"
			}
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), semBlockGrace)
			_ = semWakeScript.Run(cctx, s.rdb, append(slices.Clip(keys), interrupt), give).Err()
			cancel()
		}
		return ctx.Err()
	}
	if err != nil && !errors.Is(err, goredis.Nil) {
		return s.semErr("wait", name, err)
	}
	return nil
}

// blocker returns the blocking client once one of its connections is free
// for this caller, and the function that gives the turn back. It returns a
// nil client (and no error) when d passed first, ctx's error when ctx ended.
func (st *semState) blocker(ctx context.Context, s *Store, d time.Duration) (*goredis.Client, func(), error) {
	st.mu.Lock()
	if st.closed || s.closed.Load() {
		st.mu.Unlock()
		return nil, nil, s.semErr("wait", "", goredis.ErrClosed)
	}
	if st.block == nil {
		o := *s.rdb.Options()
		o.PoolSize = semBlockConns
		o.MinIdleConns = 0
		o.MaxActiveConns = semBlockConns
		o.ReadTimeout = semBlockMax + 2*semBlockGrace // the BLPOP's context deadline is shorter
		st.block = goredis.NewClient(&o)
		st.block.AddHook(tripCounter{&s.trips})
		st.turns = make(chan struct{}, semBlockConns)
	}
	bc, turns := st.block, st.turns
	st.mu.Unlock()
	done := func() { <-turns }
	select {
	case turns <- struct{}{}:
		return bc, done, nil
	default:
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case turns <- struct{}{}:
		return bc, done, nil
	case <-t.C:
		return nil, nil, nil
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
}

// blocked counts the waiters holding a blocking connection.
func (st *semState) blocked() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.turns)
}

// close closes the blocking client. Store.Close calls it; it is idempotent.
func (st *semState) close() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed || st.block == nil {
		st.closed = true
		return nil
	}
	st.closed = true
	return st.block.Close()
}
