package dashboard_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/coordd/coordd/dashboard"
)

// The fuzzers send what a browser, a script or an attacker may send to
// the dashboard: any path and query string to its pages, any value in the
// fields of its login and action forms. Their seeds run with every `go
// test`; `go test -fuzz FuzzDashboardPages ./dashboard/` searches further.

// serve runs one request through the fixture's handler, as sent to its
// address.
func (f *fixture) serve(r *http.Request) *httptest.ResponseRecorder {
	r.Host = "127.0.0.1:9464"
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, r)
	return w
}

// in is the fixture for one fuzz input: its failures go to t.
func (f *fixture) in(t *testing.T) *fixture {
	g := *f
	g.t = t
	return &g
}

// markup returns the first element or attribute in page that a stored or
// sent value would make had it been pasted in as HTML: a script, an
// image, a frame, an object, or an event handler attribute. It reads the
// page's tags as a browser would, quoted attribute values included.
func markup(page string) string {
	for i := 0; i < len(page); i++ {
		if page[i] != '<' || i+1 >= len(page) || !isLetter(page[i+1]) {
			continue
		}
		j := i + 1
		for j < len(page) && (isLetter(page[j]) || page[j] >= '0' && page[j] <= '9') {
			j++
		}
		switch tag := strings.ToLower(page[i+1 : j]); tag {
		case "script", "img", "iframe", "frame", "svg", "object", "embed", "base", "link":
			return "<" + tag
		}
		for j < len(page) && page[j] != '>' { // attributes
			for j < len(page) && (page[j] == ' ' || page[j] == '\t' || page[j] == '\n' || page[j] == '/') {
				j++
			}
			k := j
			for j < len(page) && !strings.ContainsRune(" \t\n=>/", rune(page[j])) {
				j++
			}
			if name := strings.ToLower(page[k:j]); strings.HasPrefix(name, "on") || name == "style" || name == "srcdoc" {
				return name + "="
			}
			if j < len(page) && page[j] == '=' {
				j++
				if j < len(page) && (page[j] == '"' || page[j] == '\'') {
					q := page[j]
					end := strings.IndexByte(page[j+1:], q)
					if end < 0 {
						return "an attribute value that never ends"
					}
					j += end + 2
				} else {
					for j < len(page) && !strings.ContainsRune(" \t\n>", rune(page[j])) {
						j++
					}
				}
			} else if j == k {
				j++
			}
		}
		i = j
	}
	return ""
}

func isLetter(b byte) bool { return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' }

// FuzzDashboardPages: any path under the dashboard's pages with any query
// string (the search, the page offset, the history limit, the refresh
// pause) gives a page, a 404 or a redirect of the path, never an error or
// a page of unbounded size, with the security headers, and what was sent
// never becomes markup.
func FuzzDashboardPages(f *testing.F) {
	fx := newFixture(f, "", dashboard.Options{})
	for _, seed := range []struct{ path, query string }{
		{"/", ""},
		{"/", "pause=1"},
		{"/semaphores", "pause=1"},
		{"/cron", ""},
		{"/cron/nightly-report", "limit=3"},
		{"/cron/nightly-report", "limit=-1&pause=1"},
		{"/cron/nightly-report", "limit=99999999999999999999"},
		{"/cron/<script>", ""},
		{"/queues", ""},
		{"/queues/thumbnails", "q=onerror"},
		{"/queues/thumbnails", "q=" + url.QueryEscape("<img src=x onerror=alert(1)>")},
		{"/queues/thumbnails", "q=" + strings.Repeat("a+", 300)},
		{"/queues/thumbnails", "at=100&q=x&pause=1"},
		{"/queues/thumbnails", "at=-5"},
		{"/queues/thumbnails", "at=9223372036854775807"},
		{"/queues/thumbnails", "q=%ff%fe&at=1e9"},
		{"/queues/thumbnails/dead/1", ""},
		{"/queues/thumbnails/dead/-1", ""},
		{"/queues/thumbnails/dead/99999999999999999999", ""},
		{"/queues/nope/dead/1", ""},
		{"/rate-limits", ""},
		{"/rate-limits", "pause=1"},
		{"/rate-limits/partner-api", ""},
		{"/login", "e=slow"},
		{"/login", "e=<b>"},
		{"/nothing/here", "pause=1"},
	} {
		f.Add(seed.path, seed.query)
	}
	f.Fuzz(func(t *testing.T, path, query string) {
		if !strings.HasPrefix(path, "/") {
			path = "/" + path
		}
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.URL = &url.URL{Path: path, RawQuery: query}
		r.RequestURI = r.URL.RequestURI()
		w := fx.serve(r)
		switch w.Code {
		case http.StatusOK, http.StatusNotFound, http.StatusMovedPermanently, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		default:
			t.Fatalf("GET %s?%s: %d\n%s", path, query, w.Code, w.Body)
		}
		if w.Code >= 300 && w.Code < 400 {
			return
		}
		if w.Header().Get("Content-Security-Policy") == "" || w.Header().Get("X-Frame-Options") != "DENY" {
			t.Fatalf("GET %s?%s: no security headers", path, query)
		}
		body := w.Body.String()
		if len(body) > 1<<20 {
			t.Fatalf("GET %s?%s: a page of %d bytes", path, query, len(body))
		}
		if m := markup(body); m != "" {
			t.Fatalf("GET %s?%s: the page holds markup %q", path, query, m)
		}
	})
}

// actionLog matches one action log line (done, failed or refused); a
// value of several lines continues on lines that start with "  |".
var actionLog = regexp.MustCompile(`(?m)^\S+ \[(INFO|WARN|ERROR)\] +dashboard action`)

// FuzzDashboardActionForm: any action path and any form fields, with the
// session's form token or without it, from a logged-in session: never an
// error, never a change without the right form token, never a destructive
// change without its confirm box, and exactly one log line for each
// request, whatever its outcome.
func FuzzDashboardActionForm(f *testing.F) {
	fx := newFixture(f, "", dashboard.Options{Actions: true, TokenFile: tokenFile(f, "alice:"+aliceSecret)})
	c := newClient(f, fx.url)
	csrf := c.login(aliceSecret)
	cookies := c.c.Jar.Cookies(mustURL(f, fx.url))
	for _, seed := range []struct {
		kind, name, action string
		rightToken         bool
		csrf, confirm, job string
		origin             string
	}{
		{"queue", "thumbnails", "purge-dead", true, "", "", "", ""},
		{"queue", "thumbnails", "purge-dead", false, "guess", "yes", "", ""},
		{"queue", "thumbnails", "requeue-dead", true, "", "no", "", "http://evil.example"},
		{"queue", "thumbnails", "purge-job", true, "", "", "1", ""},
		{"queue", "thumbnails", "requeue-job", true, "", "", "-1", ""},
		{"queue", "thumbnails", "requeue-job", true, "", "", "99999999999999999999", ""},
		{"queue", "nope", "requeue-job", true, "", "", "1", ""},
		{"cron", "nightly-report", "run", true, "", "", "", ""},
		{"semaphore", "image-import", "purge-dead", true, "", "yes", "", ""},
		{"queue", "thumbnails\x1b[2J", "purge-dead\n", true, "", "yes", "", "null"},
	} {
		f.Add(seed.kind, seed.name, seed.action, seed.rightToken, seed.csrf, seed.confirm, seed.job, seed.origin)
	}
	f.Fuzz(func(t *testing.T, kind, name, action string, rightToken bool, token, confirm, job, origin string) {
		fx := fx.in(t)
		for _, seg := range []string{kind, name, action} {
			if seg == "" || seg == "." || seg == ".." {
				return // not an action route: the pages' 404
			}
		}
		if rightToken {
			token = csrf
		}
		if fx.queueState().Dead == 0 {
			fx.dead()
		}
		before := fx.queueState()
		logged := len(fx.logs.String())
		form := url.Values{"csrf": {token}, "confirm": {confirm}, "job": {job}, "reason": {name}}
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(form.Encode()))
		r.URL = &url.URL{Path: "/actions/" + kind + "/" + name + "/" + action, RawPath: "/actions/" + url.PathEscape(kind) + "/" + url.PathEscape(name) + "/" + url.PathEscape(action)}
		r.RequestURI = r.URL.RequestURI()
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if origin != "" {
			r.Header.Set("Origin", origin)
		}
		for _, ck := range cookies {
			r.AddCookie(ck)
		}
		w := fx.serve(r)
		switch w.Code {
		case http.StatusSeeOther, http.StatusBadRequest, http.StatusForbidden, http.StatusNotFound:
		default:
			t.Fatalf("POST %s: %d\n%s", r.URL.Path, w.Code, w.Body)
		}
		if lines := fx.logs.String()[logged:]; len(actionLog.FindAllString(lines, -1)) != 1 {
			t.Fatalf("POST %s: want one action log line, got:\n%s", r.URL.Path, lines)
		}
		after := fx.queueState()
		changed := after.Dead != before.Dead || after.Ready != before.Ready
		switch {
		case changed && token != csrf:
			t.Fatalf("POST %s without the form token changed the store: dead %d -> %d", r.URL.Path, before.Dead, after.Dead)
		case changed && confirm != "yes" && action != "requeue-job":
			t.Fatalf("POST %s without its confirm box changed the store: dead %d -> %d", r.URL.Path, before.Dead, after.Dead)
		}
	})
}

// FuzzDashboardLoginForm: any token and nonce, with the nonce cookie or
// without it, from any address: a redirect every time, and a session only
// for the right token with the form's own nonce.
func FuzzDashboardLoginForm(f *testing.F) {
	fx := newFixture(f, "", dashboard.Options{Actions: true, TokenFile: tokenFile(f, "alice:"+aliceSecret)})
	f.Add(aliceSecret, true, true, byte(1))
	f.Add(" "+aliceSecret+"\n", true, true, byte(2))
	f.Add(aliceSecret, false, true, byte(3))
	f.Add(aliceSecret, true, false, byte(4))
	f.Add("", true, true, byte(5))
	f.Add(strings.Repeat("x", 20<<10), true, true, byte(6))
	f.Add("alice:"+aliceSecret, true, true, byte(7))
	f.Fuzz(func(t *testing.T, token string, rightNonce, cookie bool, from byte) {
		get := httptest.NewRequest(http.MethodGet, "/login", nil)
		w := fx.serve(get)
		m := nonceRE.FindStringSubmatch(w.Body.String())
		if m == nil {
			t.Fatalf("no login form:\n%s", w.Body)
		}
		nonce := m[1]
		if !rightNonce {
			nonce = strings.Repeat("0", len(nonce))
		}
		r := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(url.Values{"nonce": {nonce}, "token": {token}}.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.RemoteAddr = "192.0.2." + string(rune('0'+from%10)) + ":4000"
		if cookie {
			for _, ck := range w.Result().Cookies() {
				r.AddCookie(ck)
			}
		}
		w = fx.serve(r)
		if w.Code != http.StatusSeeOther {
			t.Fatalf("POST /login: %d", w.Code)
		}
		if w.Header().Get("Location") == "/" && (strings.TrimSpace(token) != aliceSecret || !rightNonce || !cookie) {
			t.Fatalf("a login with token %q, right nonce %v, cookie %v started a session", token, rightNonce, cookie)
		}
	})
}

func mustURL(t testing.TB, s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestMarkupFinder: the fuzzers' markup check finds what it looks for,
// inside or outside quoted values, and takes the dashboard's own tags.
func TestMarkupFinder(t *testing.T) {
	for page, want := range map[string]string{
		`<p class="x">a &lt;img src=x onerror=y&gt;</p>`:     "",
		`<input value="&lt;img src=x onerror=alert(1)&gt;">`: "",
		`<input value="a onerror=x">`:                        "",
		`<td><img src=x onerror=alert(1)></td>`:              "<img",
		`<p class="x" onclick="y">`:                          "onclick=",
		`<input value="" onfocus=alert(1) x="">`:             "onfocus=",
		`<a href='/x' OnMouseOver='y'>`:                      "onmouseover=",
		`<SCRIPT>alert(1)</SCRIPT>`:                          "<script",
		`<p title="unterminated>`:                            "an attribute value that never ends",
		`<meta http-equiv="refresh" content="10">`:           "",
	} {
		if got := markup(page); got != want {
			t.Errorf("markup(%q) = %q, want %q", page, got, want)
		}
	}
}
