package metrics

import (
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"
)

// The listener's connections are capped so that they can never take the
// file descriptors the daemon needs for its own work (a cron command's
// pipes and status socket, the spec files, the backends' connections):
// with only a read header timeout, a client that opened a thousand
// keep-alive connections and left them idle took every descriptor of a
// daemon with the common limit of 1,024.

// connShare is the share of the descriptor limit (RLIMIT_NOFILE) the
// listener may hold: 1/connShare. The cap is at least minConns and at most
// maxConns.
const (
	connShare = 8
	minConns  = 4
	maxConns  = 512
)

// ConnCap is how many connections the listener holds open at once under
// the process's descriptor limit: an eighth of it, between 4 and 512 (128
// under the common limit of 1,024).
func ConnCap() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == 0 {
		return minConns
	}
	return int(min(max(rl.Cur/connShare, minConns), maxConns))
}

// connLimit is a listener that holds at most max connections open. At the
// cap, a new connection closes the one that has been waiting longest for
// a request (a keep-alive connection between requests, or one that sent
// no complete request yet): a client reopens such a connection at no cost,
// and a client holding many of them cannot lock others out. When every
// connection is serving a request, Accept waits for one to end (each is
// bounded by the server's read and write timeouts). The server reports
// each connection's state to track (http.Server.ConnState).
type connLimit struct {
	net.Listener
	max int

	mu     sync.Mutex
	cond   *sync.Cond
	conns  map[net.Conn]*connState
	closed bool
}

type connState struct {
	waiting bool // http.StateNew or http.StateIdle: no request being served
	since   time.Time
}

func newConnLimit(ln net.Listener, max int) *connLimit {
	l := &connLimit{Listener: ln, max: max, conns: map[net.Conn]*connState{}}
	l.cond = sync.NewCond(&l.mu)
	return l
}

// Accept takes the next connection, making room for it at the cap.
func (l *connLimit) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(l.conns) >= l.max && !l.closed {
		if v := l.longestWaiting(); v != nil {
			_ = v.Close() // the server's read fails; ConnState reports it closed
			delete(l.conns, v)
			continue
		}
		l.cond.Wait()
	}
	if l.closed {
		_ = c.Close()
		return nil, net.ErrClosed
	}
	l.conns[c] = &connState{waiting: true, since: time.Now()}
	return c, nil
}

func (l *connLimit) longestWaiting() net.Conn {
	var v net.Conn
	var since time.Time
	for c, s := range l.conns {
		if s.waiting && (v == nil || s.since.Before(since)) {
			v, since = c, s.since
		}
	}
	return v
}

// track is the server's ConnState hook.
func (l *connLimit) track(c net.Conn, s http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch st := l.conns[c]; {
	case s == http.StateClosed || s == http.StateHijacked:
		delete(l.conns, c)
	case st != nil:
		st.waiting, st.since = s == http.StateNew || s == http.StateIdle, time.Now()
	}
	l.cond.Broadcast()
}

// Close closes the listener and ends an Accept waiting for room.
func (l *connLimit) Close() error {
	l.mu.Lock()
	l.closed = true
	l.cond.Broadcast()
	l.mu.Unlock()
	return l.Listener.Close()
}

// open is the number of connections held.
func (l *connLimit) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}
