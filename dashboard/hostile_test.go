package dashboard_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/dashboard"
)

// The dashboard under hostile load: what one page view may cost, however
// big the payloads, long the query or large the dead set.

// get fetches url and returns its status and body.
func get(t testing.TB, u string) (int, string) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// allocated returns what fn allocated on the Go heap of this process.
// The test runs alone (no t.Parallel), so the count is the handler's,
// the store client's and the HTTP client's, and little else.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestDashboardDeadJobsReadBounded: with 64 dead jobs of 1 MiB each, a
// view of the queue's page, a search of its dead set and a view of one
// dead job each allocate less than 8 MiB in this process (the pages read
// a cut payload from the store, never the whole dead set), on SQLite,
// MariaDB, PostgreSQL and Redis; the job page shows the first 64 KiB and
// says how many bytes it leaves out.
func TestDashboardDeadJobsReadBounded(t *testing.T) {
	const (
		jobs  = 64
		size  = 1 << 20
		bound = 8 << 20
	)
	for _, bc := range backendsUnderTest {
		t.Run(bc.name, func(t *testing.T) {
			ctx := t.Context()
			s, e := applied(ctx, t, bc.header(t)+"queues:\n  big: {max_attempts: 1, max_payload: 2MiB}\n")
			q := e.Backends[s.Cluster.Backend].Queues()
			payload := []byte(strings.Repeat("p", size-3) + "END")
			for range jobs {
				if _, err := q.Push(ctx, "big", backends.PushRequest{Payload: payload}); err != nil {
					t.Fatal(err)
				}
			}
			claimed, err := q.Claim(ctx, "big", "worker", jobs)
			if err != nil || len(claimed) != jobs {
				t.Fatalf("claim: %d jobs, %v", len(claimed), err)
			}
			for _, j := range claimed {
				if err := q.Retry(ctx, j, "too big to live"); err != nil {
					t.Fatal(err)
				}
			}
			last := claimed[len(claimed)-1].ID
			claimed = nil
			d, err := dashboard.New(&source{s: s, e: e}, dashboard.Options{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(d)
			defer srv.Close()
			get(t, srv.URL+"/queues") // warm up: templates, connections

			for _, tc := range []struct {
				what, path, want string
			}{
				{"the queue page", "/queues/big", "Dead jobs 1–64 of 64"},
				{"a search of the dead set", "/queues/big?q=" + url.QueryEscape("END too big"), "No dead job matches."},
				{"a search that matches", "/queues/big?q=ppp", "64 match"},
				{"a dead job's page", fmt.Sprintf("/queues/big/dead/%d", last), "the first 64 KiB shown: 983040 bytes more"},
			} {
				var code int
				var body string
				n := allocated(func() { code, body = get(t, srv.URL+tc.path) })
				if code != http.StatusOK || !strings.Contains(body, tc.want) {
					t.Errorf("%s: %d, the page does not say %q:\n%s", tc.what, code, tc.want, body)
				}
				if n > bound {
					t.Errorf("%s allocated %d MiB for %d dead jobs of 1 MiB; want less than %d MiB", tc.what, n>>20, jobs, bound>>20)
				}
				t.Logf("%s: %d KiB allocated", tc.what, n>>10)
			}
		})
	}
}

// TestDashboardDeadJobPastTheOldest5000: a dead job's page is read by its
// id, so the newest of 5,010 dead jobs has its page like the oldest.
func TestDashboardDeadJobPastTheOldest5000(t *testing.T) {
	ctx := t.Context()
	s, e := applied(ctx, t, "queues:\n  q: {max_attempts: 1}\n")
	q := e.Backends[s.Cluster.Backend].Queues()
	const n = 5010
	for i := range n {
		if _, err := q.Push(ctx, "q", backends.PushRequest{Payload: fmt.Appendf(nil, "job %d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	var first, last int64
	for left := n; left > 0; {
		claimed, err := q.Claim(ctx, "q", "worker", min(left, 1000))
		if err != nil || len(claimed) == 0 {
			t.Fatalf("claim: %d jobs, %v", len(claimed), err)
		}
		for _, j := range claimed {
			if err := q.Retry(ctx, j, "dead"); err != nil {
				t.Fatal(err)
			}
			if first == 0 {
				first = j.ID
			}
			last = j.ID
		}
		left -= len(claimed)
	}
	d, err := dashboard.New(&source{s: s, e: e}, dashboard.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	defer srv.Close()
	for _, tc := range []struct {
		id   int64
		want string
	}{{first, "job 0"}, {last, fmt.Sprintf("job %d", n-1)}} {
		code, body := get(t, fmt.Sprintf("%s/queues/q/dead/%d", srv.URL, tc.id))
		if code != http.StatusOK || !strings.Contains(body, tc.want) {
			t.Errorf("dead job %d: %d, the page does not show %q", tc.id, code, tc.want)
		}
	}
	if code, _ := get(t, fmt.Sprintf("%s/queues/q/dead/%d", srv.URL, last+1)); code != http.StatusNotFound {
		t.Errorf("a job that is not dead: %d, want 404", code)
	}
	code, body := get(t, srv.URL+"/queues/q?at=5000")
	if code != http.StatusOK || !strings.Contains(body, "Dead jobs 5001–5010 of 5010") {
		t.Errorf("the last page of the dead set: %d\n%s", code, body)
	}
}

// TestDashboardSearchQueryBounded: a 600 KB search query is cut to its
// first 10 words of the first 200 bytes, which the page says, and the
// page stays small; the search runs with the words kept.
func TestDashboardSearchQueryBounded(t *testing.T) {
	f := newFixture(t, "", dashboard.Options{})
	query := "ONERROR " + strings.Repeat("x", 600<<10)
	code, body := get(t, f.url+"/queues/thumbnails?q="+url.QueryEscape(query))
	if code != http.StatusOK {
		t.Fatalf("a 600 KB query: %d", code)
	}
	if len(body) > 64<<10 {
		t.Errorf("a 600 KB query gave a page of %d KB", len(body)>>10)
	}
	if !strings.Contains(body, `id="query-cut"`) || strings.Count(body, `class="job"`) != 0 {
		t.Errorf("a 600 KB query: the page does not say the query was cut, or lists jobs that hold 200 x's")
	}
	// The 11th word would exclude the job: only the first 10 count.
	_, body = get(t, f.url+"/queues/thumbnails?q="+url.QueryEscape("onerror"+strings.Repeat(" img", 9)+" nosuchword"))
	if n := strings.Count(body, `class="job"`); n != 1 {
		t.Errorf("a query whose 11th word matches nothing: %d jobs listed, want 1", n)
	}
	words := "onerror " + strings.Repeat("nosuchword ", 20)
	code, body = get(t, f.url+"/queues/thumbnails?q="+url.QueryEscape(words))
	if code != http.StatusOK || !strings.Contains(body, `id="query-cut"`) {
		t.Errorf("a query of 21 words: %d, the page does not say it was cut", code)
	}
	if n := strings.Count(body, `class="job"`); n != 0 {
		t.Errorf("a query of 21 words lists %d jobs, want 0 (the first 10 words include nosuchword)", n)
	}
}

// TestDashboardStoredSpecHashEscaped: an applied spec hash and a host's
// spec hash written by a hostile host, with a newline, an ESC and markup,
// show quoted and escaped on the cluster page, never raw.
func TestDashboardStoredSpecHashEscaped(t *testing.T) {
	f := newFixture(t, "", dashboard.Options{})
	const hostile = "ab\ncd\x1b[31m<b>x</b>"
	st := f.src.e.State
	unlock, err := st.TryLockApply(f.ctx, "hostile-apply", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.CommitApply(f.ctx, "hostile-apply", backends.ApplyRecord{SpecHash: hostile, Host: "evil\x1b[2J", At: time.Now(), Summary: "sum\nmary"}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := unlock(f.ctx); err != nil {
		t.Fatal(err)
	}
	reg := f.src.e.Backends[f.src.s.Cluster.Backend].Cluster()
	if err := reg.Heartbeat(f.ctx, backends.HostRecord{Host: "web-3", RunID: "web-3/1/x", PID: 1, Version: "0.1.0", SpecHash: hostile, HeartbeatEvery: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	code, body := get(t, f.url+"/")
	if code != http.StatusOK {
		t.Fatalf("cluster page: %d", code)
	}
	if strings.Contains(body, "\x1b") || strings.Contains(body, "ab\ncd") || strings.Contains(body, "<b>x") {
		t.Errorf("a stored spec hash shows raw on the cluster page:\n%s", body)
	}
	if n := strings.Count(body, `&#34;ab\ncd\x1b[3`); n < 3 {
		t.Errorf("the hostile hash is shown quoted and escaped %d times, want 3 (applied, host row, hosts by spec):\n%s", n, body)
	}
}

// TestDashboardHostHeader: the dashboard answers to an IP address,
// localhost and the names it is given, whatever the port and case; a
// request naming another host (a page of another site that rebound its
// name to the dashboard's address) gets 421 and changes nothing, a login
// included. New refuses a name that is not a host name.
func TestDashboardHostHeader(t *testing.T) {
	f := newFixture(t, "", dashboard.Options{Actions: true, TokenFile: tokenFile(t, "alice:"+aliceSecret), Hosts: []string{"dash.example.com", "web-1"}})
	c := newClient(t, f.url)
	for _, tc := range []struct {
		host string
		code int
	}{
		{"127.0.0.1:9464", http.StatusOK},
		{"[::1]:9464", http.StatusOK},
		{"10.1.2.3", http.StatusOK},
		{"localhost:9464", http.StatusOK},
		{"LOCALHOST", http.StatusOK},
		{"dash.example.com", http.StatusOK},
		{"Dash.Example.COM.:443", http.StatusOK},
		{"web-1:9464", http.StatusOK},
		{"evil.example:9464", http.StatusMisdirectedRequest},
		{"dash.example.com.evil.example", http.StatusMisdirectedRequest},
		{"example.com", http.StatusMisdirectedRequest},
		{"web-2", http.StatusMisdirectedRequest},
		{"localhost.evil.example", http.StatusMisdirectedRequest},
	} {
		for _, path := range []string{"/", "/queues/thumbnails", "/login"} {
			code, body := c.do(http.MethodGet, path, nil, map[string]string{"Host": tc.host})
			if code != tc.code {
				t.Errorf("GET %s with Host %s: %d, want %d", path, tc.host, code, tc.code)
			}
			if code == http.StatusMisdirectedRequest && !strings.Contains(body, "--dashboard-host") {
				t.Errorf("GET %s with Host %s: the refusal does not say how to add a name:\n%s", path, tc.host, body)
			}
		}
	}
	// A login and an action through a rebound name: refused, the store
	// unchanged, no session made.
	csrf := c.login(aliceSecret)
	evil := map[string]string{"Host": "evil.example"}
	if code, _ := c.do(http.MethodPost, "/actions/queue/thumbnails/purge-dead", url.Values{"csrf": {csrf}, "confirm": {"yes"}}, evil); code != http.StatusMisdirectedRequest {
		t.Errorf("an action through another host: %d", code)
	}
	if st := f.queueState(); st.Dead != 1 {
		t.Errorf("an action through another host changed the store: dead %d", st.Dead)
	}
	d := newClient(t, f.url)
	if code, _ := d.do(http.MethodPost, "/login", url.Values{"token": {aliceSecret}}, evil); code != http.StatusMisdirectedRequest {
		t.Errorf("a login through another host: %d", code)
	}

	for _, bad := range []string{"dash.example.com:443", "http://dash.example.com", "a b", "", "-x", "x..y"} {
		if _, err := dashboard.New(f.src, dashboard.Options{Hosts: []string{bad}}, nil); err == nil {
			t.Errorf("New took the dashboard host %q", bad)
		}
	}
	if _, err := dashboard.New(f.src, dashboard.Options{Hosts: []string{"10.0.0.1", "[::1]", "dash.example.com."}}, nil); err != nil {
		t.Errorf("New refused addresses and a name with a final dot: %v", err)
	}
}
