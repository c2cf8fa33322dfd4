package memcached

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// ErrReadOnly is returned by every write on a store opened with
// Options.ReadOnly.
var ErrReadOnly = errors.New("store is opened read-only")

// Timeouts of one request.
const (
	opTimeout    = 2 * time.Second
	maxIdleConns = 16
)

var (
	_ backends.Backend   = (*Store)(nil)
	_ backends.LossGuard = (*Store)(nil)
)

// The areas the store holds (backends.Backend): semaphores only, without a
// line of waiters (doc.go says why).
func (s *Store) Cluster() backends.Cluster       { return nil }
func (s *Store) Semaphores() backends.Semaphores { return s }
func (s *Store) Crons() backends.Crons           { return nil }
func (s *Store) Queues() backends.Queues         { return nil }

// Waiters is nil: memcached keeps no line (backends.Semaphores).
func (s *Store) Waiters() backends.Waiters { return nil }

// Store is one handle on a set of memcached servers under one key prefix.
// It is safe for concurrent use; several Stores may share one prefix, as
// the hosts of a cluster do. It holds semaphores only.
type Store struct {
	name   string
	opts   backends.Options
	keys   keys
	sel    *selector
	mc     *memcache.Client
	trips  atomic.Uint64
	closed atomic.Bool

	statsMu sync.Mutex
	stats   map[string]*statsConn // addr -> the connection `stats` is sent on

	clockMu sync.Mutex
	clocks  map[string]clockSample // addr -> the last `stats` time read there

	hintMu sync.Mutex
	hints  map[string]semHint // semaphore name -> its last read (semaphore.go)

	grantMu sync.Mutex
	grants  map[string]grantCas // name + "\x00" + owner -> its slot key's cas id (semaphore.go)
}

// clockSample is one reading of a server's clock: the server said time
// at some instant after sent (host monotonic clock).
type clockSample struct {
	time int64
	sent time.Time
}

// clockMaxAge is how long a clockSample stands in for a `stats` call.
const clockMaxAge = 10 * time.Second

// estimate is the server's clock at host time now, from a sample:
// time + ceil(now - sent), on the host's monotonic clock. memcached's
// clock V is whole seconds, updated once a second from its own monotonic
// clock M, so V lags floor(M) by up to 1. With the sample's `stats` sent
// at h0 and answered at h1 (h1 - h0 < 1 s, else no sample is kept):
// V(now) <= time + 1 + ceil(now - h0) and V(now) >= time + floor(now - h1) - 1,
// so estimate - 3 <= V(now) <= estimate + 1. An expiry computed from it is
// thus at most 3 s later, or 1 s earlier, than the server's own now + TTL
// at that moment (a fresh `stats` is itself up to a tick early by the time
// the write lands). Clock rate differences (ppm) over clockMaxAge are far
// below a second. The key is written with that absolute expiry, so the
// expires_at reported is always exactly when memcached drops the key: the
// error only lengthens the lease by up to 3 s or shortens it by up to 1 s.
func (c clockSample) estimate(now time.Time) int64 {
	el := now.Sub(c.sent)
	if el <= 0 {
		return c.time
	}
	return c.time + int64((el+time.Second-1)/time.Second)
}

// Open connects to the memcached servers and checks that every one answers
// `stats`. Every key the store writes starts with keyPrefix.
func Open(ctx context.Context, name string, servers []string, keyPrefix string, opts backends.Options) (*Store, error) {
	if len(servers) == 0 {
		return nil, fmt.Errorf("memcached %q: no servers", name)
	}
	if strings.ContainsAny(keyPrefix, " \t\r\n{}") {
		return nil, fmt.Errorf("memcached %q: key_prefix %q holds a space, a control character or a brace", name, keyPrefix)
	}
	sel, err := newSelector(keyPrefix, servers)
	if err != nil {
		return nil, fmt.Errorf("memcached %q: servers %v: %w", name, servers, err)
	}
	mc := memcache.NewFromSelector(sel)
	mc.Timeout, mc.MaxIdleConns = opTimeout, maxIdleConns
	s := &Store{name: name, opts: opts, keys: keys{prefix: keyPrefix}, sel: sel, mc: mc, stats: map[string]*statsConn{}, clocks: map[string]clockSample{}, hints: map[string]semHint{}, grants: map[string]grantCas{}}
	for _, a := range sel.addrs {
		if _, err := s.serverStats(ctx, a); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// Name is the backend's name in the spec.
func (s *Store) Name() string { return s.name }

// Type is spec.TypeMemcached.
func (s *Store) Type() string { return spec.TypeMemcached }

// RoundTrips counts requests sent: one per command (a multi-get of one
// semaphore's keys is one command), one per `stats`.
func (s *Store) RoundTrips() uint64 { return s.trips.Load() }

// Client is the underlying gomemcache client (tests and benchmarks use it
// to reach behind coordd's back).
func (s *Store) Client() *memcache.Client { return s.mc }

// Prefix is the key prefix.
func (s *Store) Prefix() string { return s.keys.prefix }

// Close closes the connections. It is idempotent.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	var errs []error
	for _, c := range s.stats {
		if c.nc != nil {
			errs = append(errs, c.nc.Close())
		}
	}
	s.stats = map[string]*statsConn{}
	return errors.Join(append(errs, s.mc.Close())...)
}

// Now reads the clock of the first server (the `time` of `stats`). It has
// whole-second resolution: that is the clock memcached expires keys by.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	st, err := s.serverStats(ctx, s.sel.addrs[0])
	if err != nil {
		return time.Time{}, err
	}
	return st.now(), nil
}

// nowFor reads the clock of the server that holds tag's keys with `stats`
// (one round trip, always fresh).
func (s *Store) nowFor(ctx context.Context, tag string) (int64, error) {
	st, err := s.serverStats(ctx, s.sel.pickTag(tag))
	if err != nil {
		return 0, err
	}
	return st.time, nil
}

// clockFor is the clock of the server that holds tag's keys for computing
// an expiry: a `stats` reading at most clockMaxAge old advanced by the
// host's monotonic clock (see clockSample.estimate), else a fresh `stats`.
// Expiries are written as absolute server times, so a key always ends at
// exactly the time reported for it; the estimate only makes a lease up
// to 3 s longer (or 1 s shorter) than asked, as a bound.
func (s *Store) clockFor(ctx context.Context, tag string) (int64, error) {
	addr := s.sel.pickTag(tag).String()
	now := time.Now()
	s.clockMu.Lock()
	c, ok := s.clocks[addr]
	s.clockMu.Unlock()
	if ok && now.Sub(c.sent) >= 0 && now.Sub(c.sent) < clockMaxAge {
		return c.estimate(now), nil
	}
	return s.nowFor(ctx, tag)
}

// forgetClock drops the clock sample of the server holding tag's keys
// (after a connection error: the server may have restarted with another
// clock).
func (s *Store) forgetClock(tag string) {
	s.clockMu.Lock()
	delete(s.clocks, s.sel.pickTag(tag).String())
	s.clockMu.Unlock()
}

// writable refuses writes on a read-only store.
func (s *Store) writable() error {
	if s.opts.ReadOnly {
		return ErrReadOnly
	}
	return nil
}

// trip counts one round trip and refuses to start one after ctx ended
// (gomemcache takes no context; its own timeout bounds each call).
func (s *Store) trip(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.trips.Add(1)
	return nil
}

// serverStats is what coordd reads of `stats`.
type serverStats struct {
	time    int64 // server clock, unix seconds
	pid     int64
	uptime  int64
	started int64 // time - uptime: when this server process started
}

func (st serverStats) now() time.Time { return time.Unix(st.time, 0).UTC() }

// runID names the server process: memcached has no run_id, so pid and
// start time stand for one (both change on a restart; a pid reused by a
// later process would also need the same start second).
func (st serverStats) runID() string { return fmt.Sprintf("pid:%d:started:%d", st.pid, st.started) }

// statsConn is a plain TCP connection of the store's own that `stats` is
// sent on: gomemcache does not expose `stats`.
type statsConn struct {
	mu sync.Mutex
	nc net.Conn
	rd *bufio.Reader
	// gen names the current connection (a new value on every dial, 0
	// while there is none). A cas id read after this connection was
	// dialled, and used on it without a redial in between, was issued by
	// the server process at its other end: a restarted memcached reuses
	// cas ids, but cannot take over a TCP connection.
	gen atomic.Uint64
}

// connGens numbers the store's own connections.
var connGens atomic.Uint64

// serverStats sends `stats` to addr over the store's own connection,
// dialling (again) as needed.
func (s *Store) serverStats(ctx context.Context, addr net.Addr) (serverStats, error) {
	if err := s.trip(ctx); err != nil {
		return serverStats{}, err
	}
	s.statsMu.Lock()
	if s.closed.Load() {
		s.statsMu.Unlock()
		return serverStats{}, fmt.Errorf("memcached %q: store is closed", s.name)
	}
	c := s.stats[addr.String()]
	if c == nil {
		c = &statsConn{}
		s.stats[addr.String()] = c
	}
	s.statsMu.Unlock()

	c.mu.Lock()
	defer c.mu.Unlock()
	var st serverStats
	var err error
	// `stats` is safe to repeat: once more on a fresh connection when the
	// kept one failed (the server restarted, or closed it as idle).
	for try := range 2 {
		reused := c.nc != nil
		sent := time.Now()
		if st, err = c.query(ctx, addr); err == nil {
			s.clockMu.Lock()
			if time.Since(sent) < time.Second {
				s.clocks[addr.String()] = clockSample{time: st.time, sent: sent}
			} else {
				delete(s.clocks, addr.String()) // too slow to bound the estimate
			}
			s.clockMu.Unlock()
			return st, nil
		}
		c.drop()
		s.clockMu.Lock()
		delete(s.clocks, addr.String())
		s.clockMu.Unlock()
		if !reused || try > 0 || ctx.Err() != nil {
			break
		}
	}
	return serverStats{}, fmt.Errorf("memcached %q: stats on %s: %w", s.name, addr, err)
}

// drop closes the connection (c.mu held).
func (c *statsConn) drop() {
	if c.nc != nil {
		_ = c.nc.Close()
		c.nc, c.rd = nil, nil
	}
	c.gen.Store(0)
}

// ownConn is the store's own connection to addr (nil when closed).
func (s *Store) ownConn(addr net.Addr) *statsConn {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	if s.closed.Load() {
		return nil
	}
	return s.stats[addr.String()]
}

// ownGen is the gen of the store's own connection to addr (0: none up).
func (s *Store) ownGen(addr net.Addr) uint64 {
	if c := s.ownConn(addr); c != nil {
		return c.gen.Load()
	}
	return 0
}

// errOwnConn: the own connection was not (any more) the one named, or is
// busy; nothing was sent.
var errOwnConn = errors.New("own connection changed or busy")

// casExpire sends `cas key 0 -1 0 casID` (expire the key if its cas id is
// still casID) on the own connection to addr, only if that connection is
// still the one of gen. It returns the reply line (STORED, EXISTS,
// NOT_FOUND), errOwnConn when nothing was sent, or the I/O error (the
// connection is then dropped, and whether the server applied the cas is
// unknown).
func (s *Store) casExpire(ctx context.Context, addr net.Addr, gen uint64, key string, casID uint64) (string, error) {
	c := s.ownConn(addr)
	if c == nil || gen == 0 || !c.mu.TryLock() {
		return "", errOwnConn
	}
	defer c.mu.Unlock()
	if c.nc == nil || c.gen.Load() != gen {
		return "", errOwnConn
	}
	if err := s.trip(ctx); err != nil {
		return "", err
	}
	deadline := time.Now().Add(opTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	line, err := func() (string, error) {
		if err := c.nc.SetDeadline(deadline); err != nil {
			return "", err
		}
		if _, err := fmt.Fprintf(c.nc, "cas %s 0 -1 0 %d\r\n\r\n", key, casID); err != nil {
			return "", err
		}
		line, err := c.rd.ReadString('\n')
		if err != nil {
			return "", err
		}
		return strings.TrimRight(line, "\r\n"), nil
	}()
	if err != nil {
		c.drop()
		return "", err
	}
	if line != "STORED" && line != "EXISTS" && line != "NOT_FOUND" {
		c.drop() // not sure where the connection stands
	}
	return line, nil
}

func (c *statsConn) query(ctx context.Context, addr net.Addr) (serverStats, error) {
	deadline := time.Now().Add(opTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if c.nc == nil {
		d := net.Dialer{Deadline: deadline}
		nc, err := d.DialContext(ctx, addr.Network(), addr.String())
		if err != nil {
			return serverStats{}, err
		}
		c.nc, c.rd = nc, bufio.NewReader(nc)
		c.gen.Store(connGens.Add(1))
	}
	if err := c.nc.SetDeadline(deadline); err != nil {
		return serverStats{}, err
	}
	if _, err := c.nc.Write([]byte("stats\r\n")); err != nil {
		return serverStats{}, err
	}
	var st serverStats
	var seen int
	for {
		line, err := c.rd.ReadString('\n')
		if err != nil {
			return serverStats{}, err
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "END" {
			break
		}
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "STAT" {
			return serverStats{}, fmt.Errorf("unexpected stats line %q", line)
		}
		var dst *int64
		switch f[1] {
		case "time":
			dst = &st.time
		case "pid":
			dst = &st.pid
		case "uptime":
			dst = &st.uptime
		default:
			continue
		}
		n, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			return serverStats{}, fmt.Errorf("stats %s: %w", f[1], err)
		}
		*dst = n
		seen++
	}
	if seen != 3 {
		return serverStats{}, errors.New("stats lacks time, pid or uptime")
	}
	st.started = st.time - st.uptime
	return st, nil
}
