package redis

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coordd/coordd/backends"
)

// The leader lease is one hash (holder, term, exp in µs of the server's
// clock) that expires by itself shortly after exp; the term counter is a
// separate key, so resigning (deleting the lease) never loses the term.
func (k keys) leaderLease() string { return k.global("leader:lease") }
func (k keys) leaderTerm() string  { return k.global("leader:term") }

// leaderElectScript is SET NX PX with terms (lua/leader_elect.lua).
var leaderElectScript = luaScript("leader_elect.lua")

// leaderRenewScript extends the lease for exactly one holder and term, and
// only while it is live (lua/leader_renew.lua).
var leaderRenewScript = luaScript("leader_renew.lua")

// leaderResignScript deletes the lease if it is exactly holder's live term
// (lua/leader_resign.lua).
var leaderResignScript = luaScript("leader_resign.lua")

// leaderCurrentScript reads the live lease (read-only;
// lua/leader_current.lua).
var leaderCurrentScript = luaScript("leader_current.lua")

// ElectLeader takes the leader lease when it is free, expired or resigned,
// starting a new term; re-electing the live holder renews its lease and
// keeps its term. Another holder's live lease gives ErrNotLeader. One
// script, one round trip.
func (s *Store) ElectLeader(ctx context.Context, holder string, lease time.Duration) (backends.Term, error) {
	if err := s.writable(); err != nil {
		return backends.Term{}, fmt.Errorf("elect leader: %w", err)
	}
	if holder == "" {
		return backends.Term{}, errors.New("elect leader: empty holder")
	}
	us, err := microsOfLease(lease)
	if err != nil {
		return backends.Term{}, fmt.Errorf("elect leader: %w", err)
	}
	res, err := leaderElectScript.Run(ctx, s.rdb, []string{s.keys.leaderLease(), s.keys.leaderTerm()}, holder, usArg(us)).Slice()
	if err != nil {
		return backends.Term{}, fmt.Errorf("elect leader %q: %w", holder, err)
	}
	if ok, _ := res[0].(int64); ok != 1 {
		other, _ := res[1].(string)
		term, _ := res[2].(int64)
		exp, _ := res[3].(int64)
		return backends.Term{}, fmt.Errorf("elect leader %q: held by %q in term %d until %s: %w",
			holder, other, term, timeOfMicros(exp).Format(time.RFC3339Nano), backends.ErrNotLeader)
	}
	term, _ := res[1].(int64)
	exp, _ := res[2].(int64)
	return backends.Term{Holder: holder, Term: term, ExpiresAt: timeOfMicros(exp)}, nil
}

// RenewLeader extends t's lease to now+lease, only while t's holder still
// holds t's term unexpired (ErrNotLeader otherwise).
func (s *Store) RenewLeader(ctx context.Context, t backends.Term, lease time.Duration) (backends.Term, error) {
	if err := s.writable(); err != nil {
		return backends.Term{}, fmt.Errorf("renew leader: %w", err)
	}
	us, err := microsOfLease(lease)
	if err != nil {
		return backends.Term{}, fmt.Errorf("renew leader: %w", err)
	}
	exp, err := leaderRenewScript.Run(ctx, s.rdb, []string{s.keys.leaderLease()}, t.Holder, usArg(t.Term), usArg(us)).Int64()
	if err == nil && exp == 0 {
		err = backends.ErrNotLeader
	}
	if err != nil {
		return backends.Term{}, fmt.Errorf("renew leader %q term %d: %w", t.Holder, t.Term, err)
	}
	return backends.Term{Holder: t.Holder, Term: t.Term, ExpiresAt: timeOfMicros(exp)}, nil
}

// ResignLeader ends t at once if t's holder still holds t's term, so that
// the next ElectLeader, by anyone, succeeds. Not holding is not an error.
func (s *Store) ResignLeader(ctx context.Context, t backends.Term) error {
	if err := s.writable(); err != nil {
		return fmt.Errorf("resign leader: %w", err)
	}
	if err := leaderResignScript.Run(ctx, s.rdb, []string{s.keys.leaderLease()}, t.Holder, usArg(t.Term)).Err(); err != nil {
		return fmt.Errorf("resign leader %q term %d: %w", t.Holder, t.Term, err)
	}
	return nil
}

// CurrentLeader returns the live lease; ErrNotFound when nobody holds one.
// One read-only script (EVALSHA_RO), so a replica could answer it.
func (s *Store) CurrentLeader(ctx context.Context) (backends.Term, error) {
	res, err := leaderCurrentScript.RunRO(ctx, s.rdb, []string{s.keys.leaderLease()}).Slice()
	if err != nil {
		return backends.Term{}, fmt.Errorf("current leader: %w", err)
	}
	if len(res) != 3 {
		return backends.Term{}, fmt.Errorf("current leader: %w", backends.ErrNotFound)
	}
	holder, _ := res[0].(string)
	term, _ := res[1].(int64)
	exp, _ := res[2].(int64)
	return backends.Term{Holder: holder, Term: term, ExpiresAt: timeOfMicros(exp)}, nil
}
