package redis

import (
	"context"
	"fmt"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/coordd/coordd/backends"
)

var _ backends.LossGuard = (*Store)(nil)

// The data-loss marker (issue 5, "Redis lost its data"). One hash,
// {global}:marker, written once: run_id (the server process that wrote or
// last saw it), created_at, hold_until (µs, Redis TIME; 0: none) and, after
// a restart that kept the data, restarted_at. Reconcile writes it before
// it applies anything (MarkLoss); when it is missing while the inventory
// lists objects on this Redis, the data was lost, and the marker it writes
// then holds the re-creation of semaphore tokens for the longest lease.

// markerKey is the marker's key.
func (k keys) marker() string { return k.global("marker") }

// scriptMarkLoss writes the marker when it is missing.
//
//	KEYS[1]  the marker hash
//	ARGV[1]  the server's run_id
//	ARGV[2]  "1" when the inventory lists objects on this Redis
//	ARGV[3]  the hold in µs (used with ARGV[2] = "1")
//
// Returns {hold_until µs, now µs, run_id in the marker before this call or
// "" when it was missing}. A marker that exists keeps its hold; a new
// run_id is recorded with restarted_at (a restart that kept the data).
var scriptMarkLoss = goredis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local m = redis.call('HMGET', KEYS[1], 'run_id', 'hold_until')
if m[1] then
  if m[1] ~= ARGV[1] then
    redis.call('HSET', KEYS[1], 'run_id', ARGV[1], 'restarted_at', now)
  end
  return {tonumber(m[2] or '0'), now, m[1]}
end
local hold = 0
if ARGV[2] == '1' then hold = now + tonumber(ARGV[3]) end
redis.call('HSET', KEYS[1], 'run_id', ARGV[1], 'created_at', now, 'hold_until', hold)
return {hold, now, ''}
`)

// scriptObserveLoss reads the marker and the clock.
//
//	KEYS[1]  the marker hash
//
// Returns {present 0/1, hold_until µs, now µs, run_id or ""}.
var scriptObserveLoss = goredis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local m = redis.call('HMGET', KEYS[1], 'run_id', 'hold_until')
if not m[1] then return {0, 0, now, ''} end
return {1, tonumber(m[2] or '0'), now, m[1]}
`)

// ObserveLoss reads the marker without changing anything.
func (s *Store) ObserveLoss(ctx context.Context) (backends.LossState, error) {
	v, err := scriptObserveLoss.Run(ctx, s.rdb, []string{s.keys.marker()}).Slice()
	if err != nil {
		return backends.LossState{}, fmt.Errorf("redis %q: observe marker: %w", s.name, err)
	}
	st := backends.LossState{Marked: toInt(v[0]) == 1, Now: fromMicros(toInt(v[2])), RunID: toString(v[3])}
	if h := toInt(v[1]); h > 0 {
		st.HoldUntil = fromMicros(h)
	}
	return st, nil
}

// MarkLoss writes the marker when it is missing (see backends.LossGuard).
func (s *Store) MarkLoss(ctx context.Context, existed bool, hold time.Duration) (backends.LossState, error) {
	if err := s.writable(); err != nil {
		return backends.LossState{}, err
	}
	runID, err := s.runID(ctx)
	if err != nil {
		return backends.LossState{}, err
	}
	flag := "0"
	if existed {
		flag = "1"
	}
	v, err := scriptMarkLoss.Run(ctx, s.rdb, []string{s.keys.marker()}, runID, flag, max(hold, 0).Microseconds()).Slice()
	if err != nil {
		return backends.LossState{}, fmt.Errorf("redis %q: write marker: %w", s.name, err)
	}
	st := backends.LossState{Marked: true, Now: fromMicros(toInt(v[1])), RunID: runID, Wrote: toString(v[2]) == ""}
	if h := toInt(v[0]); h > 0 {
		st.HoldUntil = fromMicros(h)
	}
	return st, nil
}

// runID reads the server's run_id from INFO server.
func (s *Store) runID(ctx context.Context) (string, error) {
	info, err := s.rdb.Info(ctx, "server").Result()
	if err != nil {
		return "", fmt.Errorf("redis %q: info server: %w", s.name, err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("redis %q: info server has no run_id", s.name)
}
