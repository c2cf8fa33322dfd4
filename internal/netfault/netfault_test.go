package netfault

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// echoServer echoes every connection and records what it received.
type echoServer struct {
	ln   net.Listener
	mu   sync.Mutex
	got  bytes.Buffer
	hits chan struct{}
}

func startEcho(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echoServer{ln: ln, hits: make(chan struct{}, 1024)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						e.mu.Lock()
						e.got.Write(buf[:n])
						e.mu.Unlock()
						e.hits <- struct{}{}
						if _, werr := c.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return e
}

func (e *echoServer) received() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.got.String()
}

// byName tags connections by the first client that dials: tests dial in
// a known order and name each dial in turn.
type namer struct {
	mu    sync.Mutex
	names []string
}

func (n *namer) owner(net.Conn) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.names) == 0 {
		return ""
	}
	s := n.names[0]
	n.names = n.names[1:]
	return s
}

func setup(t *testing.T, names ...string) (*echoServer, *Proxy) {
	t.Helper()
	e := startEcho(t)
	nm := &namer{names: names}
	p, err := Listen("127.0.0.1:0", e.ln.Addr().String(), nm.owner)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return e, p
}

func dial(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func roundTrip(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	readExactly(t, c, msg)
}

func readExactly(t *testing.T, c net.Conn, want string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	buf := make([]byte, len(want))
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatalf("read %q: %v", want, err)
	}
	if string(buf) != want {
		t.Fatalf("read %q, want %q", buf, want)
	}
}

// nothingArrives checks that no byte comes back within a moment: a
// fault that held nothing would echo at once.
func nothingArrives(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	var b [1]byte
	n, err := c.Read(b[:])
	var ne net.Error
	if n != 0 || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read %d bytes (%v) through a held link", n, err)
	}
}

func TestHealthyLinkForwards(t *testing.T) {
	_, p := setup(t, "a")
	c := dial(t, p)
	roundTrip(t, c, "hello")
	if p.Links("a") != 1 {
		t.Fatalf("links of a: %d", p.Links("a"))
	}
}

func TestBlackholeHoldsBytesUntilHealed(t *testing.T) {
	e, p := setup(t, "a", "b")
	a, b := dial(t, p), dial(t, p)
	roundTrip(t, a, "1")
	roundTrip(t, b, "1")
	p.Set("a", Fault{Kind: Blackhole})
	if _, err := a.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	nothingArrives(t, a)
	if strings.Contains(e.received(), "held") {
		t.Fatal("the server got bytes through a partition")
	}
	roundTrip(t, b, "other owners pass") // only a is cut off
	p.Set("a", Fault{})
	readExactly(t, a, "held") // delivered, in order, once healed
}

func TestLoseDownRunsTheRequestAndHoldsTheReply(t *testing.T) {
	e, p := setup(t, "a")
	a := dial(t, p)
	roundTrip(t, a, "1")
	p.Set("a", Fault{Kind: LoseDown})
	if _, err := a.Write([]byte("req")); err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(e.received(), "req") {
		<-e.hits
	}
	nothingArrives(t, a)
	p.Set("a", Fault{})
	readExactly(t, a, "req")
}

func TestLoseUpHoldsTheRequest(t *testing.T) {
	e, p := setup(t, "a")
	a := dial(t, p)
	roundTrip(t, a, "1")
	p.Set("a", Fault{Kind: LoseUp})
	if _, err := a.Write([]byte("req")); err != nil {
		t.Fatal(err)
	}
	nothingArrives(t, a)
	if strings.Contains(e.received(), "req") {
		t.Fatal("the server got a request sent into one-way loss")
	}
	p.Set("a", Fault{})
	readExactly(t, a, "req")
}

func TestResetEndsOpenAndNewConnections(t *testing.T) {
	_, p := setup(t, "a", "a")
	a := dial(t, p)
	roundTrip(t, a, "1")
	p.Set("a", Fault{Kind: Reset})
	_ = a.SetReadDeadline(time.Now().Add(30 * time.Second))
	var b [1]byte
	if _, err := a.Read(b[:]); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read on a reset connection: %v, want ECONNRESET", err)
	}
	// A new connection is refused with a reset while the fault lasts: the
	// reset may come while the client still connects, or at its first read.
	a2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("dial during the fault: %v, want ECONNRESET or a connection that is reset", err)
		}
		return
	}
	defer a2.Close()
	_ = a2.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := a2.Read(b[:]); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read on a new connection during the fault: %v, want ECONNRESET", err)
	}
}

func TestLatencyDelaysInOrder(t *testing.T) {
	_, p := setup(t, "a")
	a := dial(t, p)
	p.Set("a", Fault{Kind: Latency, Latency: 100 * time.Millisecond, Jitter: 50 * time.Millisecond})
	start := time.Now()
	var want strings.Builder
	for i := range 20 {
		m := string(rune('a' + i))
		want.WriteString(m)
		if _, err := a.Write([]byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	readExactly(t, a, want.String())
	// Both ways delayed by at least 50 ms: a lower bound, which load can
	// only make larger.
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Fatalf("round trip took %s under 100 +- 50 ms latency each way", d)
	}
}

func TestSlowLinkPacesBytes(t *testing.T) {
	_, p := setup(t, "a")
	a := dial(t, p)
	p.Set("a", Fault{Kind: Slow, BytesPerSec: 10000})
	msg := strings.Repeat("x", 5000)
	start := time.Now()
	go func() { _, _ = a.Write([]byte(msg)) }()
	readExactly(t, a, msg)
	// 5000 bytes at 10000 B/s, in chunks of a tenth of a second: the
	// last chunk leaves at least 0.4 s after the first.
	if d := time.Since(start); d < 400*time.Millisecond {
		t.Fatalf("5000 bytes took %s at 10000 B/s", d)
	}
}

func TestSetUpstreamMovesNewConnectionsOnly(t *testing.T) {
	e1, p := setup(t)
	e2 := startEcho(t)
	old := dial(t, p)
	roundTrip(t, old, "1")
	p.SetUpstream(e2.ln.Addr().String())
	moved := dial(t, p)
	roundTrip(t, moved, "to-new")
	roundTrip(t, old, "to-old")
	if !strings.Contains(e2.received(), "to-new") || strings.Contains(e2.received(), "to-old") || !strings.Contains(e1.received(), "to-old") {
		t.Fatalf("old server got %q, new one %q", e1.received(), e2.received())
	}
}

func TestSocketOwnerFindsTheDialingProcess(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if pid, ok := SocketOwner(s, []int{1, os.Getpid()}); !ok || pid != os.Getpid() {
		t.Fatalf("owner %d %v, want %d", pid, ok, os.Getpid())
	}
	if _, ok := SocketOwner(s, []int{1}); ok {
		t.Fatal("found an owner among pids that do not hold the socket")
	}
}
