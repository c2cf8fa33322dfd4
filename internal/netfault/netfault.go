// Package netfault is a TCP proxy for tests that breaks the network between
// some clients and a server the way networks break: a partition that holds
// bytes while connections stay open, added latency, a slow link, connection
// resets, and bytes lost in one direction only. It knows nothing of the
// protocol it carries, so it serves MySQL, Redis, memcached and PostgreSQL
// alike.
//
// Every connection is tagged with its owner when it is accepted (a callback
// decides, for instance from the process that opened it; see
// SocketOwner), and a fault is set per owner: the rest of the clients
// through the same proxy keep a healthy link. Held bytes are never dropped:
// like TCP retransmitting through a partition, they arrive, in order, once
// the fault is cleared. So a fault never corrupts a stream; it only delays
// it, or ends it with a reset.
package netfault

import (
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// Kind is a kind of fault.
type Kind string

const (
	// None is a healthy link.
	None Kind = ""
	// Blackhole stops bytes both ways; connections stay open (a partition).
	Blackhole Kind = "blackhole"
	// Latency delays each chunk by Fault.Latency +- Fault.Jitter, in order.
	Latency Kind = "latency"
	// Slow passes at most Fault.BytesPerSec each way.
	Slow Kind = "slow"
	// Reset resets the owner's open connections when set, and every new
	// one while it lasts.
	Reset Kind = "reset"
	// LoseUp stops the bytes from client to server (requests vanish).
	LoseUp Kind = "lose-up"
	// LoseDown stops the bytes from server to client (work is done, the
	// replies vanish).
	LoseDown Kind = "lose-down"
)

// Fault is what one owner's links suffer.
type Fault struct {
	Kind            Kind
	Latency, Jitter time.Duration
	BytesPerSec     int
}

// holds reports whether f stops the bytes going up (client to server) or
// down.
func (f Fault) holds(up bool) bool {
	return f.Kind == Blackhole || (up && f.Kind == LoseUp) || (!up && f.Kind == LoseDown)
}

// Proxy forwards connections accepted on its address to an upstream
// address, through the faults set for their owners.
type Proxy struct {
	ln    net.Listener
	owner func(net.Conn) string

	mu       sync.Mutex
	upstream string
	faults   map[string]Fault
	changed  chan struct{} // closed and replaced whenever faults change
	links    map[*link]struct{}
	closed   bool
	wg       sync.WaitGroup
}

// Listen starts a proxy on addr (e.g. "127.0.0.1:0") to upstream. owner
// tags each accepted connection; nil tags every one "".
func Listen(addr, upstream string, owner func(net.Conn) string) (*Proxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	if owner == nil {
		owner = func(net.Conn) string { return "" }
	}
	p := &Proxy{ln: ln, owner: owner, upstream: upstream, faults: map[string]Fault{}, changed: make(chan struct{}), links: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients connect to.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetUpstream points new connections at addr; open ones keep their server,
// as they do when a proxy or a virtual address moves to another server.
func (p *Proxy) SetUpstream(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.upstream = addr
}

// Set gives owner's links fault f (None heals them). A Reset resets the
// owner's open connections at once.
func (p *Proxy) Set(owner string, f Fault) {
	p.mu.Lock()
	if f.Kind == None {
		delete(p.faults, owner)
	} else {
		p.faults[owner] = f
	}
	close(p.changed)
	p.changed = make(chan struct{})
	var reset []*link
	if f.Kind == Reset {
		for l := range p.links {
			if l.owner == owner {
				reset = append(reset, l)
			}
		}
	}
	p.mu.Unlock()
	for _, l := range reset {
		l.reset()
	}
}

// Links counts owner's open connections.
func (p *Proxy) Links(owner string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for l := range p.links {
		if l.owner == owner {
			n++
		}
	}
	return n
}

// Close stops accepting, closes every connection and waits for the
// proxy's goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	err := p.ln.Close()
	for _, l := range links {
		l.close()
	}
	p.wg.Wait()
	return err
}

// state is owner's fault and the channel closed at its next change.
func (p *Proxy) state(owner string) (Fault, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.faults[owner], p.changed
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.serve(c)
		}()
	}
}

// serve tags c, connects it upstream unless its owner's connections are
// being reset, and forwards both ways until either side ends.
func (p *Proxy) serve(c net.Conn) {
	owner := p.owner(c)
	f, _ := p.state(owner)
	if f.Kind == Reset {
		resetConn(c)
		return
	}
	p.mu.Lock()
	upstream := p.upstream
	p.mu.Unlock()
	s, err := net.DialTimeout("tcp", upstream, 5*time.Second)
	if err != nil {
		// As a refused connection looks to the client.
		resetConn(c)
		return
	}
	l := &link{client: c, server: s, owner: owner, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.close()
		return
	}
	p.links[l] = struct{}{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(l, c, s, true) }()
	go func() { defer wg.Done(); p.pipe(l, s, c, false) }()
	wg.Wait()
	l.close()
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// chunk is bytes read at one moment; nil data marks the end of the stream.
type chunk struct {
	data []byte
	at   time.Time
	due  time.Time // under Latency: when it is delivered
}

// pipe copies src to dst through the owner's faults: a reader feeds chunks
// to a writer that holds, delays or paces them. The queue between them is
// short, so a held direction soon stops reading and the sender's socket
// buffers fill, as they would behind a partition.
func (p *Proxy) pipe(l *link, src, dst net.Conn, up bool) {
	q := make(chan chunk, 16)
	go func() {
		defer close(q)
		for {
			buf := make([]byte, 16<<10)
			n, err := src.Read(buf)
			if n > 0 {
				select {
				case q <- chunk{data: buf[:n], at: time.Now()}:
				case <-l.done:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	var last time.Time // delivery times never go back: order is kept
	for c := range q {
		for len(c.data) > 0 {
			f, changed := p.state(l.owner)
			if f.holds(up) {
				if !l.sleep(-1, changed) {
					return
				}
				continue // the faults changed: look again
			}
			n := len(c.data)
			switch f.Kind {
			case Latency:
				if c.due.IsZero() {
					d := f.Latency
					if f.Jitter > 0 {
						d += time.Duration(rand.Int64N(int64(2*f.Jitter)+1)) - f.Jitter
					}
					c.due = c.at.Add(d)
					if c.due.Before(last) {
						c.due = last
					}
					last = c.due
				}
				if w := time.Until(c.due); w > 0 {
					if !l.sleep(w, changed) {
						return
					}
					continue
				}
			case Slow:
				// At most a tenth of a second's worth at a time, then the
				// time that takes on the link.
				n = min(n, max(1, f.BytesPerSec/10))
			}
			if _, err := dst.Write(c.data[:n]); err != nil {
				l.close()
				return
			}
			c.data = c.data[n:]
			if f.Kind == Slow && f.BytesPerSec > 0 {
				if !l.sleep(time.Duration(n)*time.Second/time.Duration(f.BytesPerSec), nil) {
					return
				}
			}
		}
	}
	// The source ended: end the whole connection once what it sent is
	// delivered.
	l.close()
}

// link is one proxied connection.
type link struct {
	client, server net.Conn
	owner          string
	once           sync.Once
	done           chan struct{}
}

// sleep waits d (forever when d < 0) or until changed closes. It returns
// false when the link closed.
func (l *link) sleep(d time.Duration, changed <-chan struct{}) bool {
	var timer <-chan time.Time
	if d >= 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-l.done:
		return false
	case <-timer:
	case <-changed:
	}
	return true
}

func (l *link) close() {
	l.once.Do(func() {
		close(l.done)
		_ = l.client.Close()
		_ = l.server.Close()
	})
}

// reset ends both sides with a TCP reset rather than an orderly close.
func (l *link) reset() {
	l.once.Do(func() {
		close(l.done)
		resetConn(l.client)
		resetConn(l.server)
	})
}

// resetConn closes c with RST: no lingering, so unsent data is dropped
// and the peer reads ECONNRESET.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
