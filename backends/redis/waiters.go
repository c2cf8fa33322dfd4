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

// EnterWait registers req.Owner as a waiter of semaphore name, leased for
// req.Lease in backend time, behind every live waiter, after pruning
// expired waiter records, and records req.Host and req.PID for
// ListWaiters. If it already waits, its lease is renewed and it keeps its
// place. It returns ErrTooManyWaiters when max_waiting live waiters exist,
// ErrNotFound when the semaphore is absent.
func (s *Store) EnterWait(ctx context.Context, ref backends.SemRef, req backends.AcquireRequest) error {
	name := ref.Name
	owner, lease := req.Owner, req.Lease
	if err := s.writable(); err != nil {
		return err
	}
	if err := backends.CheckAcquire(req); err != nil {
		return s.semErr("enter wait", name, err)
	}
	if ref.IsInstance() {
		return s.instEnterWait(ctx, name, ref.Key, req)
	}
	if owner == "" {
		return s.semErr("enter wait", name, errors.New("empty owner"))
	}
	us, err := semMicros(lease)
	if err != nil {
		return s.semErr("enter wait", name, err)
	}
	v, err := semEnterWaitScript.Run(ctx, s.rdb, s.semKeys(name), owner, us, req.Host, req.PID).Int64Slice()
	if err != nil {
		return s.semErr("enter wait", name, err)
	}
	switch v[0] {
	case 0, 1:
		return nil
	case -1:
		return s.semErr("enter wait", name, backends.ErrNotFound)
	case -6:
		return s.semErr("enter wait", name, backends.ErrKeyRequired)
	default:
		return s.semErr("enter wait", name, fmt.Errorf("%d of %d waiting: %w", v[1], v[2], backends.ErrTooManyWaiters))
	}
}

// LeaveWait removes owner's waiter record; absent is not an error.
func (s *Store) LeaveWait(ctx context.Context, ref backends.SemRef, owner string) error {
	name := ref.Name
	if err := s.writable(); err != nil {
		return err
	}
	if ref.IsInstance() {
		return s.instLeaveWait(ctx, name, ref.Key, owner)
	}
	if err := semLeaveWaitScript.Run(ctx, s.rdb, s.semKeys(name), owner).Err(); err != nil {
		return s.semErr("leave wait", name, err)
	}
	return nil
}

// FirstWaiter returns the owner at the head of ref's line: the live
// waiter that entered first, "" when nobody waits. TryAcquire follows the
// line itself; FirstWaiter is for tests and status.
func (s *Store) FirstWaiter(ctx context.Context, ref backends.SemRef) (string, error) {
	if ref.IsInstance() {
		return s.instFirstWaiter(ctx, ref.Name, ref.Key)
	}
	owner, err := semFirstWaiterScript.Run(ctx, s.rdb, s.semKeys(ref.Name)).Text()
	if err != nil {
		return "", s.semErr("first waiter", ref.Name, err)
	}
	return owner, nil
}

// WaitSemaphore returns at once when TryAcquire may succeed for owner (or
// the semaphore is absent, so that TryAcquire reports it); otherwise it
// blocks in BLPOP until a release (or growth, a waiter ahead that leaves, a
// repair) makes it owner's turn and pushes to owner's own wake list,
// maxWait elapses, or the next event comes due: the earliest live lease
// expires, or the record of a waiter ahead of owner expires (it crashed),
// so that neither is missed and nobody polls. It returns nil in those
// cases and ctx's error when ctx ends; the caller retries TryAcquire either
// way. An owner not in line (never registered with EnterWait) blocks on
// the semaphore's shared wake list, which a release pushes to only when
// nobody in line is entitled to the slot.
//
// A cancelled ctx ends the BLPOP at once: the waiter listens on a private
// interrupt list too, and cancellation pushes to it (go-redis only honours
// a context's deadline, not its cancellation, on a blocked read). A wake
// element a cancelled waiter took is given back.
func (s *Store) WaitSemaphore(ctx context.Context, ref backends.SemRef, owner string, maxWait time.Duration) error {
	name := ref.Name
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.writable(); err != nil {
		return err
	}
	if ref.IsInstance() {
		return s.instWait(ctx, name, ref.Key, owner, maxWait)
	}
	start := time.Now()
	keys := s.semKeys(name)
	v, err := semWaitCheckScript.Run(ctx, s.rdb, keys, owner).Int64Slice()
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
		// Wake just after the next event: TryAcquire reclaims an expired
		// lease, and an expired waiter record no longer holds the line.
		d = min(d, time.Duration(v[1])*time.Microsecond+time.Millisecond)
	}
	if d <= 0 {
		return nil
	}
	wake := keys[semKeyWake]
	if len(v) > 2 && v[2] == 1 {
		wake = semWaiterWake(keys, owner)
	}
	return s.semBlock(ctx, name, keys, wake, d)
}

// semBlock runs one BLPOP of at most d on the wake list wake of semaphore
// name. A wake element that a cancelled waiter took from the shared list
// is given back.
func (s *Store) semBlock(ctx context.Context, name string, keys []string, wake string, d time.Duration) error {
	return s.blockOn(ctx, name, wake, d, func(cctx context.Context, interrupt string, took string) {
		give := "0"
		if took == keys[semKeyWake] {
			give = "1"
		}
		_ = semWakeScript.Run(cctx, s.rdb, append(slices.Clip(keys), interrupt), give).Err()
	})
}

// blockOn runs one BLPOP of at most d on the wake list wake, under the hash
// tag of semaphore name. When ctx ends it returns ctx's error, after
// cleanup (nil: delete the interrupt list) got the interrupt list and the
// list an element was taken from ("" when none), if either.
func (s *Store) blockOn(ctx context.Context, name, wake string, d time.Duration, cleanup func(ctx context.Context, interrupt, took string)) error {
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
	res, err := bc.Do(bctx, "BLPOP", interrupt, wake, secs).StringSlice()
	cancel()
	interrupted := !stop()
	if interrupted {
		<-pushed
	}
	if ctx.Err() != nil {
		// A wake element taken from the shared list is given back; one
		// taken from the waiter's own list is not needed: the waiter's
		// LeaveWait wakes whoever's turn it makes.
		took := ""
		if err == nil && len(res) > 0 && res[0] != interrupt {
			took = res[0]
		}
		if interrupted || took != "" {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), semBlockGrace)
			if cleanup != nil {
				cleanup(cctx, interrupt, took)
			} else {
				_ = s.rdb.Del(cctx, interrupt).Err()
			}
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
