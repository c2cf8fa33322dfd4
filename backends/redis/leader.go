package redis

import (
	"context"
	"errors"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/coordd/coordd/backends"
)

var _ backends.Leader = (*Store)(nil)

// The leader lease is one hash (holder, term, exp in µs of the server's
// clock) that expires by itself shortly after exp; the term counter is a
// separate key, so resigning (deleting the lease) never loses the term.
func (k keys) leaderLease() string { return k.global("leader:lease") }
func (k keys) leaderTerm() string  { return k.global("leader:term") }

// leaderElectScript is SET NX PX with terms: it takes the lease when
// nobody holds it unexpired, starting a new term, and renews it (same
// term) when holder already holds it. A missing term counter (a fresh
// store, a flush, a restart without persistence) is first set to the
// server's TIME in µs, so the new term is above every term handed out
// before: terms grow by one per election, far slower than the clock.
//
// The lease's expiry is kept in the hash, in µs, and compared with TIME;
// the key's own expiry (PEXPIREAT, milliseconds, rounded up) only cleans it
// away.
//
//	KEYS[1] the lease (hash: holder, term, exp)
//	KEYS[2] the term counter
//	ARGV[1] holder
//	ARGV[2] lease in µs
//
// Returns {1, term, exp µs} when holder holds the lease, or {0, holder,
// term, exp µs} of the live lease of another holder.
var leaderElectScript = goredis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local exp = now + tonumber(ARGV[2])
local cur = redis.call('HMGET', KEYS[1], 'holder', 'term', 'exp')
local term
if cur[1] and (tonumber(cur[3]) or 0) > now then
  if cur[1] ~= ARGV[1] then
    return {0, cur[1], tonumber(cur[2]), (tonumber(cur[3]) or 0)}
  end
  term = tonumber(cur[2])
else
  if redis.call('EXISTS', KEYS[2]) == 0 then
    redis.call('SET', KEYS[2], string.format('%d', now))
  end
  term = redis.call('INCR', KEYS[2])
end
redis.call('HSET', KEYS[1], 'holder', ARGV[1], 'term', string.format('%d', term), 'exp', string.format('%d', exp))
redis.call('PEXPIREAT', KEYS[1], string.format('%d', math.floor(exp / 1000) + 1))
return {1, term, exp}
`)

// leaderRenewScript extends the lease for exactly one holder and term, and
// only while it is live: a holder whose term ended (even if the same
// holder string took the lease again under a new term) is refused.
//
//	KEYS[1] the lease
//	ARGV[1] holder, ARGV[2] term, ARGV[3] lease in µs
//
// Returns the new exp in µs, or 0 when the term is not live.
var leaderRenewScript = goredis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local cur = redis.call('HMGET', KEYS[1], 'holder', 'term', 'exp')
if cur[1] ~= ARGV[1] or cur[2] ~= ARGV[2] or (tonumber(cur[3]) or 0) <= now then
  return 0
end
local exp = now + tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 'exp', string.format('%d', exp))
redis.call('PEXPIREAT', KEYS[1], string.format('%d', math.floor(exp / 1000) + 1))
return exp
`)

// leaderResignScript deletes the lease if it is exactly holder's live
// term; the term counter stays, so the next election continues above it.
//
//	KEYS[1] the lease
//	ARGV[1] holder, ARGV[2] term
//
// Returns 1 when it resigned, 0 when the term was not live.
var leaderResignScript = goredis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local cur = redis.call('HMGET', KEYS[1], 'holder', 'term', 'exp')
if cur[1] ~= ARGV[1] or cur[2] ~= ARGV[2] or (tonumber(cur[3]) or 0) <= now then
  return 0
end
return redis.call('DEL', KEYS[1])
`)

// leaderCurrentScript reads the live lease (read-only).
//
//	KEYS[1] the lease
//
// Returns {holder, term, exp µs}, or an empty array when nobody holds a
// live lease.
var leaderCurrentScript = goredis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local cur = redis.call('HMGET', KEYS[1], 'holder', 'term', 'exp')
if not cur[1] or (tonumber(cur[3]) or 0) <= now then
  return {}
end
return {cur[1], tonumber(cur[2]), (tonumber(cur[3]) or 0)}
`)

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
