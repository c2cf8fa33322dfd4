package dashboard_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/dashboard"
	"github.com/coordd/coordd/internal/browsertest"
	"github.com/coordd/coordd/spec"
)

const (
	aliceSecret = "4f1c2a9be07d83e6a5b2c9d01e7f3a68"
	bobSecret   = "b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0"
)

// tokenFile writes a token file readable by its owner only.
func tokenFile(t testing.TB, lines ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "dashboard-tokens")
	if err := os.WriteFile(path, []byte("# id:secret\n"+strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// dead kills one more job of the fixture's queue (max_attempts 1).
func (f *fixture) dead() {
	f.t.Helper()
	q := f.src.e.Backends[f.src.s.Cluster.Backend].Queues()
	if _, err := q.Push(f.ctx, "thumbnails", backends.PushRequest{Payload: []byte(`{"image": 46}`), Delay: 0}); err != nil {
		f.t.Fatal(err)
	}
	for {
		jobs, err := q.Claim(f.ctx, "thumbnails", "worker-2", 1)
		if err != nil || len(jobs) != 1 {
			f.t.Fatalf("claim: %v %v", jobs, err)
		}
		if err := q.Retry(f.ctx, jobs[0], "failed again"); err != nil {
			f.t.Fatal(err)
		}
		if f.queueState().Dead > 0 {
			return
		}
	}
}

// login logs the browser page in with secret.
func login(t *testing.T, p *browsertest.Page, base, secret string) {
	t.Helper()
	p.Navigate(base + "/login")
	p.Fill("input[name=token]", secret)
	if err := p.Submit("#login"); err != nil {
		t.Fatal(err)
	}
}

// TestDashboardActions: an operator logged in with a token of the token
// file requeues, then purges, the dead jobs of a queue from its page, on
// each backend; the store changes, a destructive action without its
// confirm box ticked changes nothing, and each action is in the log with
// the token id and the time.
func TestDashboardActions(t *testing.T) {
	browser := browsertest.Start(t)
	for _, bc := range backendsUnderTest {
		t.Run(bc.name, func(t *testing.T) {
			f := newFixture(t, bc.header(t), dashboard.Options{Actions: true, TokenFile: tokenFile(t, "alice:"+aliceSecret)})
			p := browser.NewPage(t)
			p.Navigate(f.url + "/")
			contains(t, "before login", p.Text(), "Log in for actions")
			login(t, p, f.url, aliceSecret)
			contains(t, "after login", p.Text(), "alice", "Log out")

			p.Navigate(f.url + "/queues/thumbnails")
			if n := p.Count("form.act"); n != 2 {
				t.Fatalf("queue page: %d action forms, want requeue and purge", n)
			}
			if n := p.Count(`meta[http-equiv=refresh]`); n != 0 {
				t.Errorf("a page with action forms refreshes itself (%d meta refresh)", n)
			}
			if bc.name == "sqlite" {
				screenshot(t, p, "queue-actions")
			}
			if err := p.Submit("button[data-action=requeue-dead]"); err != nil {
				t.Fatal(err)
			}
			contains(t, "requeue unconfirmed", p.Text(), "Not done: tick the box")
			if st := f.queueState(); st.Dead != 1 {
				t.Fatalf("an unconfirmed requeue changed the store: dead %d", st.Dead)
			}

			before := f.queueState()
			if err := p.Eval(`document.querySelector('form[action$="/requeue-dead"] input[name=confirm]').checked = true`, nil); err != nil {
				t.Fatal(err)
			}
			if err := p.Submit("button[data-action=requeue-dead]"); err != nil {
				t.Fatal(err)
			}
			contains(t, "requeue", p.Text(), "requeued 1 dead jobs of queue.thumbnails")
			if st := f.queueState(); st.Dead != 0 || st.Ready != before.Ready+1 {
				t.Errorf("after requeue: dead %d ready %d, want 0 and %d", st.Dead, st.Ready, before.Ready+1)
			}
			if !regexp.MustCompile(`dashboard action: action=queue\.requeue-dead object=thumbnails remote=127\.0\.0\.1:\d+ forwarded_for="?"? token_id=alice at=\S+ result=`).MatchString(f.logs.String()) {
				t.Errorf("the requeue is not in the log with who and when:\n%s", f.logs.String())
			}

			f.dead()
			p.Navigate(f.url + "/queues/thumbnails")
			if err := p.Eval(`document.querySelector('form[action$="/purge-dead"] input[name=confirm]').checked = true`, nil); err != nil {
				t.Fatal(err)
			}
			if err := p.Submit("button[data-action=purge-dead]"); err != nil {
				t.Fatal(err)
			}
			contains(t, "purge", p.Text(), "purged 1 dead jobs of queue.thumbnails")
			if st := f.queueState(); st.Dead != 0 {
				t.Errorf("after purge: dead %d", st.Dead)
			}

			// One dead job, from its page: requeue the first, purge the
			// second; the other stays dead meanwhile.
			f.dead()
			f.dead()
			q := f.src.e.Backends[f.src.s.Cluster.Backend].Queues()
			dead, err := q.Dead(f.ctx, "thumbnails", 10)
			if err != nil || len(dead) != 2 {
				t.Fatalf("dead jobs: %v %v", dead, err)
			}
			p.Navigate(fmt.Sprintf("%s/queues/thumbnails/dead/%d", f.url, dead[0].ID))
			if bc.name == "sqlite" {
				screenshot(t, p, "job-actions")
			}
			if err := p.Submit("button[data-action=requeue-job]"); err != nil {
				t.Fatal(err)
			}
			contains(t, "requeue one", p.Text(), fmt.Sprintf("requeued dead job %d of queue.thumbnails", dead[0].ID))
			if left, _ := q.Dead(f.ctx, "thumbnails", 10); len(left) != 1 || left[0].ID != dead[1].ID {
				t.Errorf("after requeuing job %d the dead set is %v", dead[0].ID, left)
			}
			p.Navigate(fmt.Sprintf("%s/queues/thumbnails/dead/%d", f.url, dead[1].ID))
			if err := p.Eval(`document.querySelector('form[action$="/purge-job"] input[name=confirm]').checked = true`, nil); err != nil {
				t.Fatal(err)
			}
			if err := p.Submit("button[data-action=purge-job]"); err != nil {
				t.Fatal(err)
			}
			contains(t, "purge one", p.Text(), fmt.Sprintf("purged dead job %d of queue.thumbnails", dead[1].ID))
			if st := f.queueState(); st.Dead != 0 {
				t.Errorf("after purging job %d: dead %d", dead[1].ID, st.Dead)
			}
			if !regexp.MustCompile(`dashboard action: action=queue\.purge-job object=thumbnails .*token_id=alice at=\S+ job=` + fmt.Sprint(dead[1].ID)).MatchString(f.logs.String()) {
				t.Errorf("the purge of one job is not in the log with its id:\n%s", f.logs.String())
			}
		})
	}
}

// client is a cookie-keeping HTTP client that does not follow redirects,
// for the checks a browser would not let a page make (a forged Origin).
type client struct {
	t    testing.TB
	base string
	c    *http.Client
}

func newClient(t testing.TB, base string) *client {
	jar, _ := cookiejar.New(nil)
	return &client{t: t, base: base, c: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (c *client) do(method, path string, form url.Values, header map[string]string) (int, string) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(form.Encode()))
	if err != nil {
		c.t.Fatal(err)
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	if h := header["Host"]; h != "" {
		req.Host = h
	}
	resp, err := c.c.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var (
	nonceRE = regexp.MustCompile(`name="nonce" value="([0-9a-f]+)"`)
	csrfRE  = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)
)

// login logs the client in and returns the session's form token.
func (c *client) login(secret string) string {
	c.t.Helper()
	_, body := c.do(http.MethodGet, "/login", nil, nil)
	m := nonceRE.FindStringSubmatch(body)
	if m == nil {
		c.t.Fatalf("no login form:\n%s", body)
	}
	if code, _ := c.do(http.MethodPost, "/login", url.Values{"nonce": {m[1]}, "token": {secret}}, nil); code != http.StatusSeeOther {
		c.t.Fatalf("login: %d", code)
	}
	_, body = c.do(http.MethodGet, "/queues/thumbnails", nil, nil)
	m = csrfRE.FindStringSubmatch(body)
	if m == nil {
		c.t.Fatalf("not logged in: no form token on the page")
	}
	return m[1]
}

// TestDashboardActionsRefused: an action is refused, and changes nothing,
// when actions are disabled, without a login, after a login with a wrong
// token, from a page of another site (in Chromium: the session cookie is
// not sent), without the session's form token, with another Origin or a
// cross-site Sec-Fetch-Site, and once the token is removed from the file.
// Every refusal is logged. The same request with everything right then
// succeeds, so each refusal was that check's doing.
func TestDashboardActionsRefused(t *testing.T) {
	browser := browsertest.Start(t)
	requeue := "/actions/queue/thumbnails/requeue-dead"
	unchanged := func(t *testing.T, f *fixture, what string) {
		t.Helper()
		if st := f.queueState(); st.Dead != 1 {
			t.Fatalf("%s changed the store: dead %d, want 1", what, st.Dead)
		}
	}

	t.Run("disabled", func(t *testing.T) {
		f := newFixture(t, "", dashboard.Options{})
		p := browser.NewPage(t)
		p.Navigate(f.url + "/queues/thumbnails")
		if n := p.Count("form.act"); n != 0 {
			t.Errorf("%d action forms with actions disabled", n)
		}
		// A form the page does not offer, posted from the page itself.
		if err := p.Eval(fmt.Sprintf(`(() => { const f = document.createElement("form"); f.method = "post"; f.action = %q;
			f.innerHTML = '<input name="confirm" value="yes"><button id="forged">x</button>'; document.body.append(f) })()`, requeue), nil); err != nil {
			t.Fatal(err)
		}
		if err := p.Submit("#forged"); err != nil {
			t.Fatal(err)
		}
		contains(t, "disabled", p.Text(), "403", "Refused: dashboard actions are disabled")
		unchanged(t, f, "a POST with actions disabled")
		if code, _ := newClient(t, f.url).do(http.MethodGet, "/login", nil, nil); code != http.StatusNotFound {
			t.Errorf("GET /login with actions disabled: %d", code)
		}
		if !strings.Contains(f.logs.String(), "dashboard action refused") {
			t.Errorf("the refusal is not logged:\n%s", f.logs.String())
		}
	})

	t.Run("browser", func(t *testing.T) {
		f := newFixture(t, "", dashboard.Options{Actions: true, TokenFile: tokenFile(t, "alice:"+aliceSecret)})
		p := browser.NewPage(t)
		login(t, p, f.url, "not-the-token-at-all-0000")
		contains(t, "wrong token", p.Text(), "That token is not in the token file.")
		if n := p.Count("form.act"); n != 0 {
			t.Errorf("%d action forms after a failed login", n)
		}

		// Logged in on 127.0.0.1, the browser opens a page of another
		// site (localhost) whose form posts the action to the dashboard.
		login(t, p, f.url, aliceSecret)
		contains(t, "login", p.Text(), "alice")
		_, port, _ := net.SplitHostPort(strings.TrimPrefix(f.url, "http://"))
		evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprintf(w, `<form method="post" action="http://127.0.0.1:%s%s"><input name="csrf" value="guess"><input name="confirm" value="yes"><button id="go">win a prize</button></form>`, port, requeue)
		}))
		defer evil.Close()
		p.Navigate(strings.Replace(evil.URL, "127.0.0.1", "localhost", 1))
		if err := p.Submit("#go"); err != nil {
			t.Fatal(err)
		}
		contains(t, "cross-site", p.Text(), "Refused:")
		unchanged(t, f, "a cross-site POST")
	})

	t.Run("checks", func(t *testing.T) {
		tokens := tokenFile(t, "alice:"+aliceSecret, "bob:"+bobSecret)
		f := newFixture(t, "", dashboard.Options{Actions: true, TokenFile: tokens})
		c := newClient(t, f.url)
		same := map[string]string{"Origin": f.url}
		if code, body := c.do(http.MethodPost, requeue, url.Values{"confirm": {"yes"}}, same); code != http.StatusForbidden || !strings.Contains(body, "not logged in") {
			t.Errorf("POST without a login: %d", code)
		}
		csrf := c.login(bobSecret)
		for _, tc := range []struct {
			what   string
			form   url.Values
			header map[string]string
		}{
			{"no form token", url.Values{"confirm": {"yes"}}, same},
			{"a wrong form token", url.Values{"confirm": {"yes"}, "csrf": {strings.Repeat("0", len(csrf))}}, same},
			{"another Origin", url.Values{"confirm": {"yes"}, "csrf": {csrf}}, map[string]string{"Origin": "http://evil.example"}},
			{"Sec-Fetch-Site cross-site", url.Values{"confirm": {"yes"}, "csrf": {csrf}}, map[string]string{"Sec-Fetch-Site": "cross-site"}},
			{"GET", nil, same},
		} {
			method := http.MethodPost
			if tc.what == "GET" {
				method = http.MethodGet
			}
			code, _ := c.do(method, requeue, tc.form, tc.header)
			if code == http.StatusSeeOther || code == http.StatusOK {
				t.Errorf("%s: %d, want a refusal", tc.what, code)
			}
			unchanged(t, f, tc.what)
		}
		// Bob's line removed from the token file: his session ends.
		if err := os.WriteFile(tokens, []byte("alice:"+aliceSecret+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if code, body := c.do(http.MethodPost, requeue, url.Values{"confirm": {"yes"}, "csrf": {csrf}}, same); code != http.StatusForbidden || !strings.Contains(body, "not logged in") {
			t.Errorf("POST after the token was revoked: %d", code)
		}
		unchanged(t, f, "a revoked token")

		csrf = c.login(aliceSecret)
		// A job action without a job id, and one on a job that is not dead.
		if code, _ := c.do(http.MethodPost, "/actions/queue/thumbnails/purge-job", url.Values{"confirm": {"yes"}, "csrf": {csrf}}, same); code != http.StatusBadRequest {
			t.Errorf("purge-job without an id: %d", code)
		}
		ready, err := f.src.e.Backends[f.src.s.Cluster.Backend].Queues().Push(f.ctx, "thumbnails", backends.PushRequest{Payload: []byte("live")})
		if err != nil {
			t.Fatal(err)
		}
		if code, _ := c.do(http.MethodPost, "/actions/queue/thumbnails/purge-job", url.Values{"confirm": {"yes"}, "csrf": {csrf}, "job": {fmt.Sprint(ready.ID)}}, same); code != http.StatusSeeOther {
			t.Errorf("purge-job of a live job: %d", code)
		}
		if _, body := c.do(http.MethodGet, "/queues/thumbnails", nil, nil); !strings.Contains(body, "has no dead job") {
			t.Errorf("purge-job of a live job: no failure shown")
		}
		if st := f.queueState(); st.Ready != 4 {
			t.Errorf("purge-job of a live job: ready %d, want 4", st.Ready)
		}
		unchanged(t, f, "a job action on a live job")
		// A purge without its confirm box ticked: refused, and logged like
		// every refusal.
		if code, _ := c.do(http.MethodPost, "/actions/queue/thumbnails/purge-dead", url.Values{"csrf": {csrf}}, same); code != http.StatusSeeOther {
			t.Errorf("purge-dead without the confirm box: %d", code)
		}
		unchanged(t, f, "a purge without its confirm box")
		if !regexp.MustCompile(`dashboard action refused: action=queue\.purge-dead object=thumbnails reason="the confirm box was not ticked" remote=127\.0\.0\.1:\d+ .*token_id=alice at=\S+`).MatchString(f.logs.String()) {
			t.Errorf("the purge refused for its confirm box is not logged with who and when:\n%s", f.logs.String())
		}
		if code, _ := c.do(http.MethodPost, requeue, url.Values{"confirm": {"yes"}, "csrf": {csrf}}, same); code != http.StatusSeeOther {
			t.Fatalf("the right request: %d", code)
		}
		if st := f.queueState(); st.Dead != 0 {
			t.Errorf("the right request did not requeue: dead %d", st.Dead)
		}
		for _, why := range []string{"not logged in", "missing or wrong form token", "cross-site request"} {
			if !strings.Contains(f.logs.String(), why) {
				t.Errorf("no refusal logged for %q:\n%s", why, f.logs.String())
			}
		}
	})
}

// TestDashboardLogin: a login needs the form's nonce (bound to a cookie),
// gives a session cookie that is HttpOnly, SameSite=Strict, 12 hours long
// and Secure behind an HTTPS proxy, and after 20 failed logins in a minute
// from one address even the right token is refused from that address, and
// only from it.
func TestDashboardLogin(t *testing.T) {
	f := newFixture(t, "", dashboard.Options{Actions: true, TokenFile: tokenFile(t, "alice:"+aliceSecret)})
	c := newClient(t, f.url)
	if code, _ := c.do(http.MethodPost, "/login", url.Values{"token": {aliceSecret}}, nil); code != http.StatusSeeOther {
		t.Fatalf("login without the nonce: %d", code)
	}
	if _, body := c.do(http.MethodGet, "/queues/thumbnails", nil, nil); csrfRE.MatchString(body) {
		t.Fatal("a login without the form's nonce started a session")
	}

	_, body := c.do(http.MethodGet, "/login", nil, nil)
	nonce := nonceRE.FindStringSubmatch(body)[1]
	req, _ := http.NewRequest(http.MethodPost, f.url+"/login", strings.NewReader(url.Values{"nonce": {nonce}, "token": {aliceSecret}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Forwarded-Proto", "https")
	for _, ck := range c.c.Jar.Cookies(req.URL) {
		req.AddCookie(ck)
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var session string
	for _, h := range resp.Header.Values("Set-Cookie") {
		if strings.HasPrefix(h, "coordd_session=") {
			session = h
		}
	}
	for _, want := range []string{"HttpOnly", "SameSite=Strict", "Secure", "Max-Age=43200"} {
		if !strings.Contains(session, want) {
			t.Errorf("session cookie %q lacks %s", session, want)
		}
	}

	// 20 wrong tokens from 127.0.0.1 lock that address out, even with the
	// right token; an operator on 127.0.0.2 still logs in.
	d := newClient(t, f.url)
	for range 20 {
		_, body := d.do(http.MethodGet, "/login", nil, nil)
		d.do(http.MethodPost, "/login", url.Values{"nonce": {nonceRE.FindStringSubmatch(body)[1]}, "token": {bobSecret}}, nil)
	}
	if loc := d.loginAt(aliceSecret); loc != "/login?e=slow" {
		t.Errorf("the right token after 20 failures from its address: redirected to %q, want /login?e=slow", loc)
	}
	if !strings.Contains(f.logs.String(), "too many failed logins") {
		t.Errorf("the throttle is not logged")
	}
	other := newClientFrom(t, f.url, "127.0.0.2")
	if loc := other.loginAt(aliceSecret); loc != "/" {
		t.Errorf("the right token from another address after 20 failures from 127.0.0.1: redirected to %q, want / (logged in)", loc)
	}
}

// newClientFrom is newClient with connections from the local address ip
// (any 127/8 address is this host's on Linux).
func newClientFrom(t *testing.T, base, ip string) *client {
	c := newClient(t, base)
	c.c.Transport = &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}).DialContext}
	return c
}

// loginAt posts the login form with secret and returns where the
// response redirects.
func (c *client) loginAt(secret string) string {
	c.t.Helper()
	_, body := c.do(http.MethodGet, "/login", nil, nil)
	m := nonceRE.FindStringSubmatch(body)
	if m == nil {
		c.t.Fatalf("no login form:\n%s", body)
	}
	req, _ := http.NewRequest(http.MethodPost, c.base+"/login", strings.NewReader(url.Values{"nonce": {m[1]}, "token": {secret}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := c.c.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.Header.Get("Location")
}

// TestDashboardTokenFile: actions need a token file, one not readable by
// every user, of ID:SECRET lines with secrets of at least 16 characters.
func TestDashboardTokenFile(t *testing.T) {
	src := newFixture(t, "", dashboard.Options{}).src
	write := func(content string, mode os.FileMode) string {
		path := filepath.Join(t.TempDir(), "tokens")
		if err := os.WriteFile(path, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		return path
	}
	for _, tc := range []struct {
		what string
		opts dashboard.Options
		ok   bool
	}{
		{"actions without a token file", dashboard.Options{Actions: true}, false},
		{"a token file without actions", dashboard.Options{TokenFile: write("a:"+aliceSecret, 0o600)}, false},
		{"a missing file", dashboard.Options{Actions: true, TokenFile: filepath.Join(t.TempDir(), "none")}, false},
		{"a file every user reads", dashboard.Options{Actions: true, TokenFile: write("a:"+aliceSecret, 0o644)}, false},
		{"a short secret", dashboard.Options{Actions: true, TokenFile: write("a:short", 0o600)}, false},
		{"a line without an id", dashboard.Options{Actions: true, TokenFile: write(aliceSecret, 0o600)}, false},
		{"an id twice", dashboard.Options{Actions: true, TokenFile: write("a:"+aliceSecret+"\na:"+bobSecret, 0o600)}, false},
		{"no token", dashboard.Options{Actions: true, TokenFile: write("# nobody\n", 0o600)}, false},
		{"a good file", dashboard.Options{Actions: true, TokenFile: write("# ops\nalice:"+aliceSecret+"\n\nbob:"+bobSecret+"\n", 0o640)}, true},
	} {
		_, err := dashboard.New(src, tc.opts, nil)
		if (err == nil) != tc.ok {
			t.Errorf("%s: error %v", tc.what, err)
		}
		if err != nil && tc.opts.Actions && tc.opts.TokenFile != "" && !errors.Is(err, dashboard.ErrTokenFile) {
			t.Errorf("%s: %v is not ErrTokenFile", tc.what, err)
		}
	}
}

// TestDashboardExtraAction: an action given in Options.Extra (as pause and
// resume will be) gets its button on the pages of its kind, with a reason
// field, behind the same login; Do gets the object, the reason and the
// token id, its text is shown and the log has the reason. New refuses an
// extra action it could not show or route.
func TestDashboardExtraAction(t *testing.T) {
	type call struct{ name, reason, token string }
	calls := make(chan call, 1)
	note := dashboard.Action{Kind: spec.KindCron, Name: "note", Label: "Add a note", Reason: true,
		Do: func(_ context.Context, name string, req dashboard.ActionRequest) (string, error) {
			calls <- call{name, req.Reason, req.Actor.TokenID}
			return "noted on cron." + name, nil
		}}
	f := newFixture(t, "", dashboard.Options{Actions: true, TokenFile: tokenFile(t, "alice:"+aliceSecret), Extra: []dashboard.Action{note}})
	p := browsertest.Start(t).NewPage(t)
	login(t, p, f.url, aliceSecret)
	p.Navigate(f.url + "/cron/nightly-report")
	p.Fill(`form[action$="/note"] input[name=reason]`, "vendor outage, INC-42")
	if err := p.Submit("button[data-action=note]"); err != nil {
		t.Fatal(err)
	}
	contains(t, "extra action", p.Text(), "noted on cron.nightly-report")
	select {
	case c := <-calls:
		if c != (call{"nightly-report", "vendor outage, INC-42", "alice"}) {
			t.Errorf("Do got %+v", c)
		}
	default:
		t.Fatal("Do was not called")
	}
	if !strings.Contains(f.logs.String(), `reason="vendor outage, INC-42"`) {
		t.Errorf("the reason is not logged:\n%s", f.logs.String())
	}

	do := note.Do
	for _, a := range []dashboard.Action{
		{Kind: spec.KindSemaphore, Name: "x", Label: "X", Do: do},
		{Kind: spec.KindCron, Name: "Pause!", Label: "X", Do: do},
		{Kind: spec.KindCron, Name: "x", Label: "X"},
		{Kind: spec.KindQueue, Name: "purge-dead", Label: "X", Do: do},
	} {
		if _, err := dashboard.New(f.src, dashboard.Options{Extra: []dashboard.Action{a}}, nil); err == nil {
			t.Errorf("New took the extra action %+v", a)
		}
	}
}
