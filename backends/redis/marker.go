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
// and the marker, and acts as ARGV[1] says (lua/marker.lua).
var scriptMarker = luaScript("marker.lua")

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
// is below it (lua/raise_counter.lua).
var scriptRaiseCounter = luaScript("raise_counter.lua")

// scriptRaiseDone clears the raise token, unless a later change set another
// (lua/raise_done.lua).
var scriptRaiseDone = luaScript("raise_done.lua")

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
