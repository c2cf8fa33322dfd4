package redis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/coordd/coordd/backends"
)

var _ backends.LossGuard = (*Store)(nil)

// The data-loss marker ("When Redis loses its data" in docs/design.md).
// One hash, {global}:marker, written on the first apply:
//
//	run_id       the server process that wrote or last checked it (INFO
//	             server); it changes on every restart
//	replid       the server's replication id (INFO replication
//	             master_replid); it changes when a replica is promoted, or
//	             when a server resyncs from another
//	created_at   µs, Redis TIME
//	hold         the longest semaphore lease, µs, recorded by MarkLoss: the
//	             hold a restart or failover starts
//	hold_until   µs; 0: no hold
//	cause        what started the hold: "lost" (the marker was missing)
//	             or "changed" (a restart or failover)
//	changed_at   µs, the last restart or failover noticed
//	raise        set while the counters of semaphores and queues may still
//	             lie below the server's time after a change (raiseCounters)
//
// A missing marker while the inventory lists objects on this Redis is lost
// data: MarkLoss writes a new one that holds the re-creation of semaphores
// for the longest lease. A marker that names another run_id or replid than
// the server that answers is a restart or a failover: the writes the old
// process or primary acknowledged last may not have reached this one (an
// fsync every second, an asynchronous replica), so a fencing number, term
// or job id handed out then may be handed out again, and a slot taken then
// may be free here while its holder runs. The first check that sees the
// change (the check every new connection runs, the leader's every 2 s, an
// apply) handles it in the same script: it records the new server, raises
// the term counter and the cron fencing counters above the server's time
// in µs, marks the semaphore and queue counters for raising
// (raiseCounters, before that connection serves anything) and, unless the
// backend is declared durable, holds every semaphore for the recorded
// longest lease: no slot is granted until then (Store.lossHeld), so that
// holders whose acquire was lost have failed to renew and stopped first.

// marker is the marker's key.
func (k keys) marker() string { return k.global("marker") }

// markerKeys are the keys scriptMarker takes: the marker, and the counters
// of {global} it raises on a change.
func (k keys) markerKeys() []string {
	return []string{k.marker(), k.leaderTerm(), k.cronFencing()}
}

// lossFallbackHold is the hold a change starts when the marker records no
// longest lease (written by a binary from before it did; the leader
// records it within seconds of starting).
const lossFallbackHold = 10 * time.Minute

// scriptMarker reads the server's run_id, replication id and role (INFO)
// and the marker, and acts as ARGV[1] says:
//
//	observe  change nothing
//	check    handle a change (see the file comment); a missing marker is
//	         left missing
//	mark     as check, and write a missing marker (with a hold of ARGV[3]
//	         when ARGV[2] is "1": the inventory lists objects here), and
//	         record ARGV[3] as the longest lease
//
// Nothing is written on a replica.
//
//	KEYS[1] the marker  KEYS[2] the leader term counter
//	KEYS[3] the cron fencing counters (hash: task -> counter)
//	ARGV[1] the mode  ARGV[2] "1" when objects existed  ARGV[3] the
//	longest lease, µs ("" with observe and check)  ARGV[4] "1" when the
//	backend is durable (a change raises counters but holds nothing)
//	ARGV[5] the hold when the marker records no longest lease, µs
//
// Returns {present 0/1, hold_until µs, now µs, run_id in the marker before
// this call ("" when missing), changed 0/1 (the marker named another
// server: handled, or seen with observe or on a replica), cause, wrote 0/1,
// raise token ("" when no counter awaits raising), hold µs recorded}.
var scriptMarker = goredis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local srv = redis.call('INFO', 'server')
local rep = redis.call('INFO', 'replication')
local run_id = string.match(srv, 'run_id:(%w+)') or ''
local replid = string.match(rep, 'master_replid:(%w+)') or ''
local primary = string.match(rep, 'role:(%w+)') ~= 'slave'
local mode = ARGV[1]
local m = redis.call('HMGET', KEYS[1], 'run_id', 'hold_until', 'replid', 'hold', 'cause', 'raise')
if not m[1] then
  if mode ~= 'mark' or not primary then return {0, 0, now, '', 0, '', 0, '', 0} end
  local hu = 0
  if ARGV[2] == '1' then hu = now + tonumber(ARGV[3]) end
  redis.call('HSET', KEYS[1], 'run_id', run_id, 'replid', replid, 'created_at', string.format('%d', now),
    'hold', ARGV[3], 'hold_until', string.format('%d', hu), 'cause', 'lost')
  return {1, hu, now, '', 0, 'lost', 1, '', tonumber(ARGV[3])}
end
local hu = tonumber(m[2] or '0') or 0
local hold = tonumber(m[4] or '')
local cause = m[5] or ''
local changed = m[1] ~= run_id or (m[3] ~= false and m[3] ~= replid)
if mode == 'observe' or not primary then
  return {1, hu, now, m[1], changed and 1 or 0, cause, 0, m[6] or '', hold or -1}
end
if mode == 'mark' and ARGV[3] ~= m[4] then
  redis.call('HSET', KEYS[1], 'hold', ARGV[3])
  hold = tonumber(ARGV[3])
end
if not changed then
  if not m[3] then redis.call('HSET', KEYS[1], 'replid', replid) end
  return {1, hu, now, m[1], 0, cause, 0, m[6] or '', hold or -1}
end
local raise = string.format('%d', now)
redis.call('HSET', KEYS[1], 'run_id', run_id, 'replid', replid, 'changed_at', raise, 'raise', raise)
local term = redis.call('GET', KEYS[2])
if term and tonumber(term) < now then redis.call('SET', KEYS[2], raise) end
local f = redis.call('HGETALL', KEYS[3])
for i = 1, #f, 2 do
  if (tonumber(f[i + 1]) or 0) < now then redis.call('HSET', KEYS[3], f[i], raise) end
end
if ARGV[4] ~= '1' then
  local h = hold or tonumber(ARGV[5])
  if now + h > hu then
    hu = now + h
    cause = 'changed'
    redis.call('HSET', KEYS[1], 'hold_until', string.format('%d', hu), 'cause', cause)
  end
end
return {1, hu, now, m[1], 1, cause, 1, raise, hold or -1}
`)

// markerState is scriptMarker's reply.
type markerState struct {
	backends.LossState
	raise string        // the raise token, "" when none is pending
	hold  time.Duration // the recorded longest lease; -1: none recorded
}

// runMarker runs scriptMarker on c (the Store's client, or a connection
// that is being set up) and remembers a hold that grants no slot.
func (s *Store) runMarker(ctx context.Context, c goredis.Scripter, mode string, existed bool, hold time.Duration) (markerState, error) {
	flag, durable, h := "0", "0", ""
	if existed {
		flag = "1"
	}
	if s.opts.Durable {
		durable = "1"
	}
	if mode == "mark" {
		h = strconv.FormatInt(max(hold, 0).Microseconds(), 10)
	}
	v, err := scriptMarker.Run(ctx, c, s.keys.markerKeys(), mode, flag, h, durable, lossFallbackHold.Microseconds()).Slice()
	if err != nil {
		return markerState{}, fmt.Errorf("redis %q: marker: %w", s.name, err)
	}
	if len(v) != 9 {
		return markerState{}, fmt.Errorf("redis %q: marker: malformed reply %v", s.name, v)
	}
	st := markerState{LossState: backends.LossState{
		Marked: toInt(v[0]) == 1, Now: fromMicros(toInt(v[2])), RunID: toString(v[3]),
		Changed: toInt(v[4]) == 1, Cause: toString(v[5]), Wrote: toInt(v[6]) == 1,
		TracksChanges: true,
	}, raise: toString(v[7]), hold: -1}
	if hu := toInt(v[1]); hu > 0 {
		st.HoldUntil = fromMicros(hu)
	}
	if us := toInt(v[8]); us >= 0 {
		st.hold = time.Duration(us) * time.Microsecond
		st.LossState.Hold = st.hold
	}
	s.loss.learn(s.name, st.LossState)
	return st, nil
}

// ObserveLoss reads the marker and the server without changing anything.
// Changed says that the marker names another server than the one that
// answered, and nobody has handled that yet.
func (s *Store) ObserveLoss(ctx context.Context) (backends.LossState, error) {
	st, err := s.runMarker(ctx, s.rdb, "observe", false, 0)
	return st.LossState, err
}

// MarkLoss writes the marker when it is missing, records hold as the
// longest lease, and handles a restart or failover that the marker shows
// (see the file comment).
func (s *Store) MarkLoss(ctx context.Context, existed bool, hold time.Duration) (backends.LossState, error) {
	if err := s.writable(); err != nil {
		return backends.LossState{}, err
	}
	st, err := s.runMarker(ctx, s.rdb, "mark", existed, hold)
	if err != nil {
		return backends.LossState{}, err
	}
	if st.raise != "" {
		if err := s.raiseCounters(ctx, s.rdb, st.raise); err != nil {
			return backends.LossState{}, err
		}
	}
	return st.LossState, nil
}

// checkServer is go-redis's OnConnect: before a new connection serves
// anything, it checks that the server is the one the marker names, and
// handles a restart or failover (see the file comment). A store opened
// read-only only looks.
func (s *Store) checkServer(ctx context.Context, cn *goredis.Conn) error {
	mode := "check"
	if s.opts.ReadOnly {
		mode = "observe"
	}
	st, err := s.runMarker(ctx, cn, mode, false, 0)
	if err != nil {
		return err
	}
	if st.raise != "" && !s.opts.ReadOnly {
		return s.raiseCounters(ctx, cn, st.raise)
	}
	return nil
}

// counterScanner is what raiseCounters needs of a client or a connection.
type counterScanner interface {
	goredis.Scripter
	Scan(ctx context.Context, cursor uint64, match string, count int64) *goredis.ScanCmd
}

// scriptRaiseCounter raises one counter to the server's time in µs when it
// is below it; an armed semaphore counter (negative: see the one-slot
// semaphores in semaphore_scripts.go) stays armed.
//
//	KEYS[1] the counter  ARGV[1] "sem" for a semaphore's fencing counter
//
// Returns 1 when it raised the counter.
var scriptRaiseCounter = goredis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local v = tonumber(redis.call('GET', KEYS[1]) or '')
if not v then return 0 end
if ARGV[1] == 'sem' and v < 0 then
  if v + ` + semFenceBias + ` < now then
    redis.call('SET', KEYS[1], string.format('%d', now - ` + semFenceBias + `))
    return 1
  end
  return 0
end
if v < now then
  redis.call('SET', KEYS[1], string.format('%d', now))
  return 1
end
return 0
`)

// scriptRaiseDone clears the raise token, unless a later change set
// another.
//
//	KEYS[1] the marker  ARGV[1] the token
var scriptRaiseDone = goredis.NewScript(`
if redis.call('HGET', KEYS[1], 'raise') == ARGV[1] then redis.call('HDEL', KEYS[1], 'raise') end
return 0
`)

// raiseCounters raises every semaphore fencing counter and every queue id
// counter of the prefix above the server's time in µs (SCAN, then one
// script per counter, each in its own hash slot), then clears the raise
// token. Every process that sees the token does it before it uses the
// connection, so no fencing number or job id is handed out below the
// server's time after a change; doing it twice is harmless.
func (s *Store) raiseCounters(ctx context.Context, c counterScanner, token string) error {
	for _, kind := range []struct{ match, arg string }{
		{globEscape(s.keys.prefix) + "{sem:*}:fencing", "sem"},
		{globEscape(s.keys.prefix) + "{queue:*}:ids", "plain"},
	} {
		var cursor uint64
		for {
			keys, next, err := c.Scan(ctx, cursor, kind.match, 1000).Result()
			if err != nil {
				return fmt.Errorf("redis %q: scan counters: %w", s.name, err)
			}
			for _, k := range keys {
				if err := scriptRaiseCounter.Run(ctx, c, []string{k}, kind.arg).Err(); err != nil {
					return fmt.Errorf("redis %q: raise counter %s: %w", s.name, k, err)
				}
			}
			if cursor = next; cursor == 0 {
				break
			}
		}
	}
	if err := scriptRaiseDone.Run(ctx, c, []string{s.keys.marker()}, token).Err(); err != nil {
		return fmt.Errorf("redis %q: marker: %w", s.name, err)
	}
	return nil
}

// globEscape escapes the glob characters of a key prefix for SCAN MATCH.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// lossHold is what a Store knows of a hold that grants no slot (cause
// changed): the semaphores exist, but a slot taken before a restart or
// failover may be free here while its holder runs. held is on every
// acquire's path: without a hold it is one atomic load.
type lossHold struct {
	// end is the end of the hold on this host's monotonic clock, as
	// nanoseconds since lossEpoch (0: none yet).
	end atomic.Int64
	mu  sync.Mutex
	err backends.LossHoldError
}

// lossEpoch anchors lossHold.end on the monotonic clock.
var lossEpoch = time.Now()

// learn takes note of a marker reading.
func (h *lossHold) learn(backend string, st backends.LossState) {
	if st.Cause != backends.LossCauseChanged || !st.Holding() {
		return
	}
	end := int64(time.Since(lossEpoch) + st.HoldUntil.Sub(st.Now))
	h.mu.Lock()
	defer h.mu.Unlock()
	if end > h.end.Load() {
		h.err = backends.LossHoldError{Backend: backend, Cause: st.Cause, Until: st.HoldUntil}
		h.end.Store(end)
	}
}

// held returns the hold in force, or nil.
func (h *lossHold) held() error {
	left := time.Duration(h.end.Load()) - time.Since(lossEpoch)
	if left <= 0 {
		return nil
	}
	h.mu.Lock()
	e := h.err
	h.mu.Unlock()
	e.Left = left
	return &e
}
