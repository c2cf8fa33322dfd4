// Package browsertest drives a real headless Chromium from Go tests, so
// that what a person sees in a browser is what the tests check: pages are
// loaded, forms submitted and screenshots taken by Chromium itself.
//
// It speaks the DevTools protocol over --remote-debugging-pipe (file
// descriptors 3 and 4, one JSON message per NUL-terminated frame) rather
// than a WebSocket, which keeps it a page of code with no dependency.
// Chromium is Debian's package (`apt-get install chromium`;
// scripts/test-services.sh installs it): a test fails, never skips, when it
// is missing.
package browsertest

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// Timeout bounds every command and page load.
const Timeout = 30 * time.Second

// Flags are the flags Chromium is started with: headless, and nothing that
// reaches out (a closed network refuses background connections, and they
// would slow every start).
var Flags = []string{
	"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
	"--disable-background-networking", "--disable-component-update", "--disable-sync",
	"--disable-default-apps", "--disable-extensions", "--mute-audio", "--hide-scrollbars",
	"--remote-debugging-pipe",
}

// Binary finds Chromium, or fails the test with how to install it.
func Binary(t testing.TB) string {
	t.Helper()
	for _, n := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	t.Fatal("Chromium is needed to test the dashboard in a real browser: apt-get install chromium (scripts/test-services.sh installs it)")
	return ""
}

// Browser is one Chromium process with a fresh profile.
type Browser struct {
	cmd  *exec.Cmd
	in   *os.File // our end of Chromium's fd 3
	out  *bufio.Reader
	done chan struct{}

	mu      sync.Mutex
	next    int64
	replies map[int64]chan message
	// events get every event of a session; set by Page.
	events map[string]chan message
	err    error
}

type message struct {
	ID        int64                     `json:"id,omitempty"`
	Method    string                    `json:"method,omitempty"`
	Params    json.RawMessage           `json:"params,omitempty"`
	Result    json.RawMessage           `json:"result,omitempty"`
	Error     *struct{ Message string } `json:"error,omitempty"`
	SessionID string                    `json:"sessionId,omitempty"`
}

// Start starts Chromium; it is stopped when the test ends.
func Start(t testing.TB) *Browser {
	t.Helper()
	bin := Binary(t)
	cmdR, cmdW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	resR, resW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	args := append(append([]string{}, Flags...), "--user-data-dir="+t.TempDir(), "about:blank")
	cmd := exec.Command(bin, args...)
	cmd.ExtraFiles = []*os.File{cmdR, resW} // fd 3: commands in, fd 4: replies out
	var stderr strings.Builder
	cmd.Stderr = &limited{b: &stderr, n: 64 << 10}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	cmdR.Close()
	resW.Close()
	b := &Browser{cmd: cmd, in: cmdW, out: bufio.NewReader(resR), done: make(chan struct{}),
		replies: map[int64]chan message{}, events: map[string]chan message{}}
	go b.read()
	t.Cleanup(func() {
		_, _ = b.call("", "Browser.close", nil)
		select {
		case <-b.done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
		}
		_ = cmd.Wait()
		cmdW.Close()
		resR.Close()
		if t.Failed() {
			t.Logf("--- chromium stderr (without its D-Bus complaints: a container has no bus) ---\n%s", withoutDBus(stderr.String()))
		}
	})
	return b
}

// withoutDBus drops the lines about a missing D-Bus, which Chromium logs
// by the dozen in a container and which never explain a failure.
func withoutDBus(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.Contains(l, "dbus/") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// limited keeps the first n bytes written to it.
type limited struct {
	mu sync.Mutex
	b  *strings.Builder
	n  int
}

func (l *limited) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if rest := l.n - l.b.Len(); rest > 0 {
		l.b.Write(p[:min(len(p), rest)])
	}
	return len(p), nil
}

// read dispatches replies to their callers and events to their session.
func (b *Browser) read() {
	defer close(b.done)
	for {
		frame, err := b.out.ReadBytes(0)
		if err != nil {
			b.fail(fmt.Errorf("chromium closed the pipe: %w", err))
			return
		}
		var m message
		if err := json.Unmarshal(frame[:len(frame)-1], &m); err != nil {
			b.fail(fmt.Errorf("bad frame from chromium: %w", err))
			return
		}
		b.mu.Lock()
		if m.ID != 0 {
			if c := b.replies[m.ID]; c != nil {
				delete(b.replies, m.ID)
				c <- m
			}
		} else if c := b.events[m.SessionID]; c != nil {
			select {
			case c <- m:
			default: // a page nobody waits on: drop
			}
		}
		b.mu.Unlock()
	}
}

func (b *Browser) fail(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.err = err
	for id, c := range b.replies {
		delete(b.replies, id)
		close(c)
	}
}

// call sends one command and waits for its reply.
func (b *Browser) call(session, method string, params any) (json.RawMessage, error) {
	b.mu.Lock()
	if b.err != nil {
		b.mu.Unlock()
		return nil, b.err
	}
	b.next++
	id := b.next
	c := make(chan message, 1)
	b.replies[id] = c
	b.mu.Unlock()
	raw, err := json.Marshal(params)
	if err != nil {
		return nil, err
	}
	if params == nil {
		raw = []byte("{}")
	}
	frame, _ := json.Marshal(message{ID: id, Method: method, Params: raw, SessionID: session})
	if _, err := b.in.Write(append(frame, 0)); err != nil {
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	select {
	case m, ok := <-c:
		switch {
		case !ok:
			return nil, fmt.Errorf("%s: %w", method, b.err)
		case m.Error != nil:
			return nil, fmt.Errorf("%s: %s", method, m.Error.Message)
		}
		return m.Result, nil
	case <-time.After(Timeout):
		return nil, fmt.Errorf("%s: no reply within %s", method, Timeout)
	}
}

// Page is one tab.
type Page struct {
	t       testing.TB
	b       *Browser
	session string
	events  chan message
}

// NewPage opens a tab 1280 pixels wide.
func (b *Browser) NewPage(t testing.TB) *Page {
	t.Helper()
	var target struct{ TargetID string }
	res, err := b.call("", "Target.createTarget", map[string]any{"url": "about:blank"})
	if err == nil {
		err = json.Unmarshal(res, &target)
	}
	if err != nil {
		t.Fatal(err)
	}
	var att struct{ SessionID string }
	res, err = b.call("", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true})
	if err == nil {
		err = json.Unmarshal(res, &att)
	}
	if err != nil {
		t.Fatal(err)
	}
	p := &Page{t: t, b: b, session: att.SessionID, events: make(chan message, 256)}
	b.mu.Lock()
	b.events[p.session] = p.events
	b.mu.Unlock()
	for _, c := range []struct {
		m string
		p any
	}{
		{"Page.enable", nil},
		{"Runtime.enable", nil},
		{"Emulation.setDeviceMetricsOverride", map[string]any{"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": false}},
	} {
		if _, err := b.call(p.session, c.m, c.p); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// Call sends a DevTools command to the page.
func (p *Page) Call(method string, params any) (json.RawMessage, error) {
	return p.b.call(p.session, method, params)
}

// drain forgets the events received so far.
func (p *Page) drain() {
	for {
		select {
		case <-p.events:
		default:
			return
		}
	}
}

// loaded runs trigger and waits for the page it causes to load.
func (p *Page) loaded(what string, trigger func() error) error {
	p.drain()
	if err := trigger(); err != nil {
		return err
	}
	deadline := time.After(Timeout)
	for {
		select {
		case m := <-p.events:
			if m.Method == "Page.loadEventFired" {
				return nil
			}
		case <-deadline:
			return fmt.Errorf("%s: no page load within %s", what, Timeout)
		}
	}
}

// Navigate loads url and waits for it.
func (p *Page) Navigate(url string) {
	p.t.Helper()
	err := p.loaded("navigate "+url, func() error {
		res, err := p.Call("Page.navigate", map[string]any{"url": url})
		if err != nil {
			return err
		}
		var r struct{ ErrorText string }
		_ = json.Unmarshal(res, &r)
		if r.ErrorText != "" {
			return fmt.Errorf("navigate %s: %s", url, r.ErrorText)
		}
		return nil
	})
	if err != nil {
		p.t.Fatal(err)
	}
}

// Eval evaluates a JavaScript expression in the page and decodes its
// (JSON-serializable) value into out, which may be nil.
func (p *Page) Eval(expr string, out any) error {
	res, err := p.Call("Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true})
	if err != nil {
		return err
	}
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string
			Exception *struct{ Description string }
		} `json:"exceptionDetails"`
	}
	if err := json.Unmarshal(res, &r); err != nil {
		return err
	}
	if e := r.ExceptionDetails; e != nil {
		msg := e.Text
		if e.Exception != nil {
			msg += " " + e.Exception.Description
		}
		return fmt.Errorf("eval %q: %s", expr, msg)
	}
	if out == nil || len(r.Result.Value) == 0 {
		return nil
	}
	return json.Unmarshal(r.Result.Value, out)
}

// Text is the page's visible text (document.body.innerText).
func (p *Page) Text() string {
	p.t.Helper()
	var s string
	if err := p.Eval("document.body ? document.body.innerText : ''", &s); err != nil {
		p.t.Fatal(err)
	}
	return s
}

// HTML is the page's serialized DOM.
func (p *Page) HTML() string {
	p.t.Helper()
	var s string
	if err := p.Eval("document.documentElement.outerHTML", &s); err != nil {
		p.t.Fatal(err)
	}
	return s
}

// URL is the page's address.
func (p *Page) URL() string {
	p.t.Helper()
	var s string
	if err := p.Eval("location.href", &s); err != nil {
		p.t.Fatal(err)
	}
	return s
}

// Count is the number of elements matching a CSS selector.
func (p *Page) Count(selector string) int {
	p.t.Helper()
	var n int
	if err := p.Eval(fmt.Sprintf("document.querySelectorAll(%s).length", jsString(selector)), &n); err != nil {
		p.t.Fatal(err)
	}
	return n
}

// Submit submits the form that holds the submit button matching selector,
// as a click on it would (the button's name and value are sent), and
// waits for the page the answer loads. It returns an error when no
// element matches.
func (p *Page) Submit(selector string) error {
	return p.loaded("submit "+selector, func() error {
		var found bool
		err := p.Eval(fmt.Sprintf(`(() => { const b = document.querySelector(%s); if (!b) return false; b.form.requestSubmit(b); return true })()`, jsString(selector)), &found)
		if err == nil && !found {
			err = fmt.Errorf("no element matches %s", selector)
		}
		return err
	})
}

// Fill sets the value of the input matching selector.
func (p *Page) Fill(selector, value string) {
	p.t.Helper()
	var found bool
	if err := p.Eval(fmt.Sprintf(`(() => { const e = document.querySelector(%s); if (!e) return false; e.value = %s; return true })()`, jsString(selector), jsString(value)), &found); err != nil || !found {
		p.t.Fatalf("fill %s: %v (found %v)", selector, err, found)
	}
}

// Screenshot returns a PNG of the whole page, as tall as its content.
func (p *Page) Screenshot() []byte {
	p.t.Helper()
	var h float64
	if err := p.Eval("Math.max(document.documentElement.scrollHeight, document.body ? document.body.scrollHeight : 0)", &h); err != nil {
		p.t.Fatal(err)
	}
	res, err := p.Call("Page.captureScreenshot", map[string]any{
		"format": "png", "captureBeyondViewport": true,
		"clip": map[string]any{"x": 0, "y": 0, "width": 1280, "height": max(h, 200), "scale": 1},
	})
	if err != nil {
		p.t.Fatal(err)
	}
	var r struct{ Data string }
	if err := json.Unmarshal(res, &r); err != nil {
		p.t.Fatal(err)
	}
	png, err := base64.StdEncoding.DecodeString(r.Data)
	if err != nil {
		p.t.Fatal(err)
	}
	if !strings.HasPrefix(string(png), "\x89PNG") {
		p.t.Fatal(errors.New("screenshot is not a PNG"))
	}
	return png
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
