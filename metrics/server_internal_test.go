package metrics

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// serve runs serveHandler on a loopback listener capped at max until the
// test ends, and returns the limiter and the address.
func serve(t *testing.T, max int, h http.Handler, lim serverLimits) (*connLimit, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := newConnLimit(ln, max)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serveHandler(ctx, cl, h, lim) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return cl, ln.Addr().String()
}

// keepAlive opens a connection and makes one keep-alive request on it,
// reading the whole response; the connection then sits idle.
func keepAlive(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if err := c.SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("a keep-alive request: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return c
}

// closedByServer reads c until the server closes it (EOF or a reset), or
// fails the test after a minute.
func closedByServer(t *testing.T, c net.Conn, what string) {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	_, err := io.Copy(io.Discard, c) // nil at EOF
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Errorf("%s: the server did not close the connection (%v)", what, err)
	}
}

var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok\n") })

// TestConnLimitMakesRoom: with the cap reached by idle keep-alive
// connections, a new connection is served at once, the connection idle
// longest is closed to make room, and the listener never holds more than
// its cap.
func TestConnLimitMakesRoom(t *testing.T) {
	const limit = 4
	cl, addr := serve(t, limit, ok, defaultLimits)
	var conns []net.Conn
	for range 3 * limit {
		conns = append(conns, keepAlive(t, addr))
		if n := cl.open(); n > limit {
			t.Fatalf("%d connections held, cap %d", n, limit)
		}
	}
	for i, c := range conns[:2*limit] {
		closedByServer(t, c, fmt.Sprintf("idle connection %d", i))
	}
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("a new request with the cap reached by idle connections: %v", err)
	}
	resp.Body.Close()
	if n := cl.open(); n > limit {
		t.Errorf("%d connections held, cap %d", n, limit)
	}
}

// TestConnLimitWaitsForABusyConnection: with every connection serving a
// request, a new one waits, and is served once a request ends; the
// handlers never see more than the cap.
func TestConnLimitWaitsForABusyConnection(t *testing.T) {
	const limit = 2
	release := make(chan struct{})
	var mu sync.Mutex
	busy, peak := 0, 0
	started := make(chan struct{}, 8)
	var cl *connLimit
	var addr string
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		busy++
		peak = max(peak, busy, cl.open())
		mu.Unlock()
		started <- struct{}{}
		if r.URL.Path == "/slow" {
			<-release
		}
		mu.Lock()
		busy--
		mu.Unlock()
		_, _ = io.WriteString(w, "ok\n")
	})
	cl, addr = serve(t, limit, h, defaultLimits)
	errs := make(chan error, limit+1)
	for range limit {
		go func() {
			resp, err := http.Get("http://" + addr + "/slow")
			if err == nil {
				resp.Body.Close()
			}
			errs <- err
		}()
		<-started
	}
	fast := make(chan error, 1)
	go func() {
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := c.Get("http://" + addr + "/fast")
		if err == nil {
			resp.Body.Close()
		}
		fast <- err
	}()
	close(release)
	for range limit {
		if err := <-errs; err != nil {
			t.Errorf("a slow request: %v", err)
		}
	}
	if err := <-fast; err != nil {
		t.Errorf("the request that waited for room: %v", err)
	}
	if peak > limit {
		t.Errorf("%d connections at once, cap %d", peak, limit)
	}
}

// TestServerTimeouts: a connection that sends a request header too
// slowly, a request body too slowly, or stays idle after a response is
// closed by the server.
func TestServerTimeouts(t *testing.T) {
	lim := serverLimits{ReadHeader: 200 * time.Millisecond, Read: 300 * time.Millisecond, Write: time.Second, Idle: 200 * time.Millisecond, MaxHeaderBytes: 4 << 10}
	_, addr := serve(t, 16, ok, lim)
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	slowHeader := dial()
	_, _ = io.WriteString(slowHeader, "GET /healthz HTTP/1.1\r\nHost: x\r\n")
	closedByServer(t, slowHeader, "a header never finished")

	slowBody := dial()
	_, _ = io.WriteString(slowBody, "POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc")
	closedByServer(t, slowBody, "a body never finished")

	closedByServer(t, keepAlive(t, addr), "an idle keep-alive connection")

	big := dial()
	_, _ = io.WriteString(big, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: "+strings.Repeat("a", 8<<10)+"\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(big), nil)
	if err != nil || resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("a header over MaxHeaderBytes: %v %v", resp, err)
	}
}

// TestConnCap: the cap is an eighth of the descriptor limit, within its
// bounds.
func TestConnCap(t *testing.T) {
	n := ConnCap()
	if n < minConns || n > maxConns {
		t.Errorf("ConnCap %d, want %d to %d", n, minConns, maxConns)
	}
}
