package memcached

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/coordd/coordd/backends"
)

// The data-loss marker, as on Redis (backends/redis/marker.go), but one per
// server, because each memcached loses its keys on its own restart. Key
// {srv:<addr>}marker, no expiry, value "v1 <run id> <created s> <hold_until
// s>" (0: no hold). memcached has no run_id: the run id is the server's pid
// and start time from `stats` (time - uptime), which change on a restart.
// Reconcile writes the markers before it applies anything (MarkLoss); a
// marker missing while the inventory lists objects on this backend means a
// server lost its keys, and the marker written then holds the re-creation
// of semaphores for the longest lease.
//
// A marker can also be evicted under memory pressure (run memcached with
// -M so that it is not); that reads as a loss, which is the safe side.

// ObserveLoss reads the markers of every server without changing anything.
// Marked: every server has its marker. HoldUntil: the latest hold. RunID:
// the run ids, comma-separated in server order.
func (s *Store) ObserveLoss(ctx context.Context) (backends.LossState, error) {
	st := backends.LossState{Marked: true}
	var ids []string
	for _, a := range s.sel.addrs {
		m, err := s.serverLoss(ctx, a)
		if err != nil {
			return backends.LossState{}, err
		}
		st.Now = maxTime(st.Now, m.now)
		st.HoldUntil = maxTime(st.HoldUntil, m.holdUntil)
		st.Marked = st.Marked && m.present
		ids = append(ids, m.runID)
	}
	st.RunID = strings.Join(ids, ",")
	return st, nil
}

// MarkLoss writes the marker of every server that lacks one.
func (s *Store) MarkLoss(ctx context.Context, existed bool, hold time.Duration) (backends.LossState, error) {
	if err := s.writable(); err != nil {
		return backends.LossState{}, err
	}
	st := backends.LossState{Marked: true}
	var ids []string
	for _, a := range s.sel.addrs {
		m, err := s.serverLoss(ctx, a)
		if err != nil {
			return backends.LossState{}, err
		}
		if !m.present {
			var until int64
			if existed {
				until = m.now.Unix() + int64((max(hold, 0)+time.Second-1)/time.Second)
			}
			v := fmt.Appendf(nil, "v1 %s %d %d", m.runID, m.now.Unix(), until)
			if err := s.trip(ctx); err != nil {
				return backends.LossState{}, err
			}
			err := s.mc.Add(&memcache.Item{Key: s.keys.marker(a.String()), Value: v})
			switch {
			case err == nil:
				st.Wrote = true
				if until > 0 {
					m.holdUntil = time.Unix(until, 0).UTC()
				}
			case errors.Is(err, memcache.ErrNotStored):
				// A racing reconcile wrote it: read its hold.
				if m, err = s.serverLoss(ctx, a); err != nil {
					return backends.LossState{}, err
				}
			default:
				return backends.LossState{}, fmt.Errorf("memcached %q: write marker on %s: %w", s.name, a, err)
			}
		}
		st.Now = maxTime(st.Now, m.now)
		st.HoldUntil = maxTime(st.HoldUntil, m.holdUntil)
		ids = append(ids, m.runID)
	}
	st.RunID = strings.Join(ids, ",")
	return st, nil
}

type serverMarker struct {
	present   bool
	runID     string // the server's current run id
	now       time.Time
	holdUntil time.Time
}

// serverLoss reads the clock, the run id and the marker of one server.
func (s *Store) serverLoss(ctx context.Context, a net.Addr) (serverMarker, error) {
	stats, err := s.serverStats(ctx, a)
	if err != nil {
		return serverMarker{}, err
	}
	m := serverMarker{runID: stats.runID(), now: stats.now()}
	if err := s.trip(ctx); err != nil {
		return serverMarker{}, err
	}
	it, err := s.mc.Get(s.keys.marker(a.String()))
	if errors.Is(err, memcache.ErrCacheMiss) {
		return m, nil
	}
	if err != nil {
		return serverMarker{}, fmt.Errorf("memcached %q: read marker on %s: %w", s.name, a, err)
	}
	f := strings.Fields(string(it.Value))
	if len(f) != 4 || f[0] != "v1" {
		return serverMarker{}, fmt.Errorf("memcached %q: malformed marker on %s: %q", s.name, a, it.Value)
	}
	until, err := strconv.ParseInt(f[3], 10, 64)
	if err != nil {
		return serverMarker{}, fmt.Errorf("memcached %q: malformed marker on %s: %q", s.name, a, it.Value)
	}
	m.present = true
	if until > 0 {
		m.holdUntil = time.Unix(until, 0).UTC()
	}
	return m, nil
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
