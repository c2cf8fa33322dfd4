package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/dashboard"
	"github.com/coordd/coordd/internal/browsertest"
	"github.com/coordd/coordd/internal/proctest"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/reconcile"
	"github.com/coordd/coordd/spec"
)

// The dashboard is tested as an operator uses it: a real store (SQLite,
// and MariaDB, PostgreSQL and Redis for the read pages) filled through the
// backends' own calls, the dashboard served over HTTP, and a real headless
// Chromium loading its pages, submitting its forms and taking the
// screenshots of docs/dashboard.md.

// hostile is what a pusher or a command may write: markup, a bidi
// override, a control character. The pages must show it as text.
const (
	hostilePayload = `{"image": "<img src=x onerror=alert(1)>", "note": "evil` + "\u202e" + `txt.exe"}`
	hostileError   = "boom <script>alert('err')</script>"
	hostileOutput  = "converting 42 images\n<script>alert('out')</script>\ndone, 1 failed\n"
	// stderrLines follow the error as queue work records a command's
	// stderr: the job page keeps their line breaks.
	stderrLines = "; stderr: decoding\ncannot decode image"
)

const specBody = `
semaphores:
  image-import: {limit: 2, lease: 2m}
  reindex: {keyed: true, limit: 1, lease: 2m}
cron:
  nightly-report:
    schedule: "0 4 * * *"
    timezone: Asia/Tokyo
    command: ["/usr/local/bin/report", "--daily"]
    on_failure: {webhook: "https://hooks.example.com/services/T0/SECRET"}
  cleanup:
    schedule: "*/15 * * * *"
    command: "find /tmp/thumbs -mtime +1 -delete"
    rate_limit: webhooks
queues:
  thumbnails: {partitions: 2, max_attempts: 1}
rate_limits:
  partner-api: {rate: 10/1h, burst: 10}
  per-user-mail: {rate: 5/1h, keyed: true}
  search-api: {rate: 100/1m, burst: 5}
  webhooks: {rate: 100/1m, burst: 20}
`

// source is the dashboard's view of a daemon: the spec, an engine over the
// real store, and a leader term elected in that store.
type source struct {
	s    *spec.Spec
	e    *reconcile.Engine
	term backends.Term
}

func (s *source) Current() (*spec.Spec, *reconcile.Engine) { return s.s, s.e }
func (s *source) HostID() string                           { return "web-1" }
func (s *source) Leading() (backends.Term, bool)           { return s.term, s.term.Term != 0 }

// fixture is a filled store and a dashboard over it.
type fixture struct {
	t    testing.TB
	src  *source
	url  string
	h    http.Handler
	logs *proctest.SyncBuffer
	ctx  context.Context
}

// backendsUnderTest maps a backend to the spec header that selects it.
var backendsUnderTest = []struct {
	name   string
	header func(t *testing.T) string
}{
	{"sqlite", func(t *testing.T) string { return "" }},
	{"mysql", func(t *testing.T) string {
		return fmt.Sprintf("backends:\n  db: {type: mysql, dsn: %q}\ncluster: {backend: db}\n", testenv.MySQLDSN(t))
	}},
	{"postgres", func(t *testing.T) string {
		return fmt.Sprintf("backends:\n  db: {type: postgres, dsn: %q, schema: coordd}\ncluster: {backend: db}\n", testenv.PostgresDSN(t))
	}},
	{"redis", func(t *testing.T) string {
		u, prefix := testenv.RedisURL(t)
		return fmt.Sprintf("backends:\n  cache: {type: redis, url: %q, key_prefix: %q}\ncluster: {backend: cache}\n", u, prefix)
	}},
}

// newFixture applies the spec on the backend header selects and fills it:
// two hosts (one on another spec), a held semaphore slot, a finished and
// a running cron run, ready, delayed and dead jobs, a queue setting
// changed outside coordd (drift), 3 permits taken of partner-api's 10, one
// of per-user-mail's for each of 3 keys, and search-api deleted outside
// coordd (not applied).
func newFixture(t testing.TB, header string, opts dashboard.Options) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	s, e := applied(ctx, t, header+specBody)
	b := e.Backends[s.Cluster.Backend]
	src := &source{s: s, e: e}
	var err error
	if src.term, err = b.Cluster().ElectLeader(ctx, "web-1/4101/a1b2c3", time.Minute); err != nil {
		t.Fatal(err)
	}
	reg := b.Cluster()
	for _, h := range []backends.HostRecord{
		{Host: "web-1", RunID: "web-1/4101/a1b2c3", PID: 4101, Version: "0.1.0", SpecHash: s.Hash(), HeartbeatEvery: 30 * time.Second},
		{Host: "web-2", RunID: "web-2/977/d4e5f6", PID: 977, Version: "0.1.0", SpecHash: strings.Repeat("9f", 32), HeartbeatEvery: 30 * time.Second},
	} {
		if err := reg.Heartbeat(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Semaphores().TryAcquire(ctx, backends.SemRef{Name: "image-import"}, backends.AcquireRequest{Owner: "owner-1", Host: "web-2", PID: 31337, Lease: 2 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Semaphores().TryAcquire(ctx, backends.SemRef{Name: "reindex", Key: "tenant-<b>7</b>"}, backends.AcquireRequest{Owner: "owner-2", Host: "web-1", PID: 4242, Lease: 2 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	// image-import full, with two waiters in line, and one waiter for the
	// keyed instance: the semaphores page lists both lines.
	if _, err := b.Semaphores().TryAcquire(ctx, backends.SemRef{Name: "image-import"}, backends.AcquireRequest{Owner: "owner-3", Host: "web-1", PID: 4101, Lease: 2 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct {
		ref backends.SemRef
		backends.AcquireRequest
	}{
		{backends.SemRef{Name: "image-import"}, backends.AcquireRequest{Host: "web-1", PID: 5120}},
		{backends.SemRef{Name: "image-import"}, backends.AcquireRequest{Host: "web-2", PID: 978}},
		{backends.SemRef{Name: "reindex", Key: "tenant-<b>7</b>"}, backends.AcquireRequest{Host: "web-2", PID: 979}},
	} {
		w.Owner, w.Lease = fmt.Sprintf("waiter-%d", w.PID), 2*time.Minute
		if err := b.Semaphores().Waiters().EnterWait(ctx, w.ref, w.AcquireRequest); err != nil {
			t.Fatal(err)
		}
	}
	cr := b.Crons()
	occ, err := cr.ClaimOccurrence(ctx, backends.ClaimRequest{Task: "nightly-report", Attempt: 1, Owner: "run-1", Host: "web-2", Lease: time.Minute, Manual: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := backends.FinishOne(ctx, cr, occ, backends.RunResult{Status: backends.RunFailed, ExitCode: 3, Error: "exit status 3", Output: []byte(hostileOutput)}); err != nil {
		t.Fatal(err)
	}
	if _, err := cr.ClaimOccurrence(ctx, backends.ClaimRequest{Task: "nightly-report", Attempt: 1, Owner: "run-1b", Host: "web-1", Manual: true, Skip: "overlap: previous run still running"}); err != nil {
		t.Fatal(err)
	}
	occ, err = cr.ClaimOccurrence(ctx, backends.ClaimRequest{Task: "cleanup", Attempt: 1, Owner: "run-2", Host: "web-1", Lease: time.Minute, Manual: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := backends.FinishOne(ctx, cr, occ, backends.RunResult{Status: backends.RunSucceeded, Output: []byte(strings.Repeat("x", 5000) + "END")}); err != nil {
		t.Fatal(err)
	}
	if _, err := cr.ClaimOccurrence(ctx, backends.ClaimRequest{Task: "cleanup", Attempt: 1, Owner: "run-3", Host: "web-1", Lease: time.Minute, Manual: true}); err != nil {
		t.Fatal(err)
	}
	q := b.Queues()
	for _, p := range []backends.PushRequest{
		{Payload: []byte(hostilePayload)},
		{Payload: []byte(`{"image": 43}`)},
		{Payload: []byte(`{"image": 44}`), Key: "album-7"},
		{Payload: []byte(`{"image": 45}`), Delay: time.Hour},
	} {
		if _, err := q.Push(ctx, "thumbnails", p); err != nil {
			t.Fatal(err)
		}
	}
	jobs, err := q.Claim(ctx, "thumbnails", "worker-1", 1)
	if err != nil || len(jobs) != 1 {
		t.Fatalf("claim: %v %v", jobs, err)
	}
	if err := q.Retry(ctx, jobs[0], hostileError+stderrLines); err != nil { // max_attempts 1: dead
		t.Fatal(err)
	}
	// Drift: the queue changed outside coordd, as an operator's manual
	// fix would; the plan on the cluster page shows it.
	st, err := b.Queues().ObserveQueues(ctx, []string{"thumbnails"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := st["thumbnails"].Config
	cfg.RetryBackoff = time.Minute
	if _, err := b.Queues().PutQueue(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	// Rate limits slow enough (one permit every 6 and 12 minutes) that
	// nothing comes back while a test reads the page.
	rl := backends.RateLimitsOf(b)
	if p, err := rl.TakePermit(ctx, "partner-api", "", 3); err != nil || p.Granted != 3 {
		t.Fatalf("take 3 permits of partner-api: %+v %v", p, err)
	}
	for _, k := range []string{"alice", "bob", "tenant-<b>7</b>"} {
		if p, err := rl.TakePermit(ctx, "per-user-mail", k, 1); err != nil || !p.Allowed {
			t.Fatalf("take a permit of per-user-mail for %s: %+v %v", k, p, err)
		}
	}
	if err := rl.DeleteRateLimit(ctx, "search-api"); err != nil {
		t.Fatal(err)
	}
	logs := &proctest.SyncBuffer{}
	d, err := dashboard.New(src, opts, hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Debug}))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	return &fixture{t: t, src: src, url: srv.URL, h: d, logs: logs, ctx: ctx}
}

// queueState reads the queue's counts from the store.
func (f *fixture) queueState() *backends.QueueState {
	f.t.Helper()
	m, err := f.src.e.Backends[f.src.s.Cluster.Backend].Queues().ObserveQueues(f.ctx, []string{"thumbnails"})
	if err != nil {
		f.t.Fatal(err)
	}
	return m["thumbnails"]
}

// contains fails the test unless text has every one of want.
func contains(t *testing.T, page, text string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Errorf("%s: the page does not show %q; it shows:\n%s", page, w, text)
		}
	}
}

// noMarkup fails unless the page has no element that hostile values would
// have made had they been pasted in as HTML.
func noMarkup(t *testing.T, page string, p *browsertest.Page) {
	t.Helper()
	for _, sel := range []string{"script", "img", "iframe", "[onerror]"} {
		if n := p.Count(sel); n != 0 {
			t.Errorf("%s: %d %s elements: a stored value became markup", page, n, sel)
		}
	}
}

// screenshotDir is where TestDashboardPages writes a PNG of each page:
// $COORDD_DASHBOARD_SCREENSHOTS, relative to the repository root (make
// screenshots: docs/dashboard); "" writes none.
func screenshotDir(t *testing.T) string {
	dir := os.Getenv("COORDD_DASHBOARD_SCREENSHOTS")
	if dir == "" || filepath.IsAbs(dir) {
		return dir
	}
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", dir)
}

func screenshot(t *testing.T, p *browsertest.Page, name string) {
	t.Helper()
	dir := screenshotDir(t)
	if dir == "" {
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), p.Screenshot(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestDashboardPages loads every page in Chromium over a filled store on
// each backend: the cluster (leader and term, hosts and their spec hashes,
// the plan), semaphores (holder host, pid, fencing), cron (next run in
// the task's timezone, the last result, history with exit code, host and
// output tail), queues (counts, the dead set and its search, one job's
// payload and error), rate limits (rate and burst as the spec writes
// them, the permits available now, the busy keys of a keyed one, one
// deleted outside coordd not applied, the cron task that takes permits of
// one). Stored values show as text, never as markup, and
// the pages refresh themselves and hold no script. With
// COORDD_DASHBOARD_SCREENSHOTS set, the sqlite run saves a PNG of each.
func TestDashboardPages(t *testing.T) {
	browser := browsertest.Start(t)
	for _, bc := range backendsUnderTest {
		t.Run(bc.name, func(t *testing.T) {
			f := newFixture(t, bc.header(t), dashboard.Options{})
			p := browser.NewPage(t)
			shots := bc.name == "sqlite"
			shot := func(name string) {
				if shots {
					screenshot(t, p, name)
				}
			}

			p.Navigate(f.url + "/")
			text := p.Text()
			contains(t, "cluster", text, "web-1/4101/a1b2c3", fmt.Sprintf("term %d", f.src.term.Term), "web-2", "not applied",
				f.src.s.Hash()[:12], "read-only")
			var drift string
			if err := p.Eval(`document.getElementById("plan").innerText`, &drift); err != nil {
				t.Fatalf("cluster: no plan table: %v", err)
			}
			contains(t, "cluster plan", drift, "queue.thumbnails", "repair", "retry_backoff 1m0s (want 10s)", "rate_limit.search-api")
			if n := p.Count(`meta[http-equiv=refresh]`); n != 1 {
				t.Errorf("cluster: %d meta refresh elements", n)
			}
			p.Navigate(f.url + "/?pause=1")
			if n := p.Count(`meta[http-equiv=refresh]`); n != 0 || !strings.Contains(p.Text(), "refresh paused") {
				t.Errorf("cluster paused: %d meta refresh elements", n)
			}
			p.Navigate(f.url + "/")
			if n := p.Count("script"); n != 0 {
				t.Errorf("cluster: %d script elements", n)
			}
			if n := p.Count("#hosts tr"); n != 3 {
				t.Errorf("cluster: %d host table rows, want a header and 2 hosts", n)
			}
			var objects string
			if err := p.Eval(`document.getElementById("objects").innerText`, &objects); err != nil || objects != "2 · 2 · 1 · 4" {
				t.Errorf("cluster: objects %q (%v), want 2 semaphores, 2 cron tasks, 1 queue, 4 rate limits", objects, err)
			}
			shot("cluster")

			p.Navigate(f.url + "/semaphores")
			text = p.Text()
			contains(t, "semaphores", text, "semaphore.image-import", "2 of limit 2 held", "web-2", "31337",
				"semaphore.reindex", "limit 1 per key", "key tenant-<b>7</b>", "4242", "Waiting in line", "5120", "978", "979")
			if n := p.Count("#sem-image-import .holders tr"); n != 3 {
				t.Errorf("semaphores: %d holder rows, want a header and 2 holders", n)
			}
			var line []string
			if err := p.Eval(`[...document.querySelectorAll("#sem-image-import table.waiters tr")].slice(1).map(r => r.cells[0].innerText + " " + r.cells[1].innerText + " " + r.cells[2].innerText)`, &line); err != nil {
				t.Fatal(err)
			}
			if strings.Join(line, ", ") != "1 web-1 5120, 2 web-2 978" {
				t.Errorf("semaphores: image-import's line %q, want web-1 5120 then web-2 978", line)
			}
			if n := p.Count("#sem-reindex table.waiters tr"); n != 2 {
				t.Errorf("semaphores: %d waiter rows of the keyed instance, want a header and 1 waiter", n)
			}
			if strings.Contains(text, "waiter-5120") {
				t.Errorf("semaphores: a waiter's owner token is shown")
			}
			if n := p.Count("#sem-reindex .holders tr"); n != 2 {
				t.Errorf("semaphores: %d holder rows of the keyed semaphore, want a header and 1 holder", n)
			}
			noMarkup(t, "semaphores", p)
			var markup bool
			if err := p.Eval(`[...document.querySelectorAll("b")].some(e => e.innerText === "7")`, &markup); err != nil || markup {
				t.Errorf("semaphores: the key tenant-<b>7</b> became markup (%v)", err)
			}
			shot("semaphores")

			p.Navigate(f.url + "/cron")
			text = p.Text()
			contains(t, "cron", text, "nightly-report", "0 4 * * *", "JST", "skipped", "cleanup", "1 running")
			shot("cron")

			p.Navigate(f.url + "/cron/nightly-report")
			text = p.Text()
			contains(t, "task", text, "Asia/Tokyo", "04:00:00 JST", "/usr/local/bin/report --daily", "failed", "web-2", "manual",
				"<script>alert('out')</script>", "converting 42 images", "skipped", "webhook https://hooks.example.com/…")
			if strings.Contains(text, "SECRET") {
				t.Error("task: the page shows the webhook's secret path")
			}
			var exits []string
			if err := p.Eval(`[...document.querySelectorAll("#history tr.run td:nth-child(4)")].map(e => e.innerText)`, &exits); err != nil {
				t.Fatal(err)
			}
			if strings.Join(exits, " ") != "- 3" { // newest first: the skipped run, then the failed one
				t.Errorf("task: exit codes %q, want a - for the skipped run and 3", exits)
			}
			noMarkup(t, "task", p)
			shot("task")

			p.Navigate(f.url + "/cron/cleanup")
			contains(t, "cleanup", p.Text(), "running", "the last 4 KiB of 5003 bytes", "xEND")
			if !strings.Contains(p.Text(), strings.Repeat("x", 4093)+"END") || strings.Contains(p.Text(), strings.Repeat("x", 4094)) {
				t.Errorf("cleanup: the output tail is not the last 4 KiB")
			}

			p.Navigate(f.url + "/queues")
			text = p.Text()
			contains(t, "queues", text, "thumbnails")
			var counts []string
			if err := p.Eval(`[...document.querySelectorAll("#queue-thumbnails td.n")].map(e => e.innerText)`, &counts); err != nil {
				t.Fatal(err)
			}
			// The fixture's retry went to the store directly, not through a
			// worker: nothing is counted as processed or failed.
			if strings.Join(counts, " ") != "2 1 0 1 0 0" {
				t.Errorf("queues: ready, delayed, in flight, dead, processed, failed = %v, want 2 1 0 1 0 0", counts)
			}
			shot("queues")

			p.Navigate(f.url + "/queues/thumbnails")
			text = p.Text()
			contains(t, "queue", text, hostileError, `"<img src=x onerror=alert(1)>"`, "Dead jobs 1–1 of 1")
			noMarkup(t, "queue", p)
			p.Fill("input[name=q]", "ONERROR")
			if err := p.Submit("form.search button"); err != nil {
				t.Fatal(err)
			}
			if n := p.Count("#dead tr.job"); n != 1 {
				t.Errorf("search ONERROR: %d dead jobs listed, want 1", n)
			}
			shot("queue")
			p.Navigate(f.url + "/queues/thumbnails?q=" + url.QueryEscape("no such words"))
			if n := p.Count("#dead tr.job"); n != 0 || !strings.Contains(p.Text(), "No dead job matches.") {
				t.Errorf("search for absent words: %d jobs listed", n)
			}

			p.Navigate(f.url + "/queues/thumbnails")
			var href string
			if err := p.Eval(`document.querySelector("#dead tr.job a").href`, &href); err != nil {
				t.Fatal(err)
			}
			p.Navigate(href)
			text = p.Text()
			var payload string
			if err := p.Eval(`document.getElementById("payload").innerText`, &payload); err != nil {
				t.Fatal(err)
			}
			// The bidi override is shown escaped, the markup as text.
			if want := strings.Replace(hostilePayload, "\u202e", `\u202e`, 1); payload != want {
				t.Errorf("job: payload shown as %q, want %q", payload, want)
			}
			contains(t, "job", text, hostileError, "attempts")
			var lastErr string
			if err := p.Eval(`document.getElementById("last-error").innerText`, &lastErr); err != nil {
				t.Fatal(err)
			}
			if want := hostileError + stderrLines; strings.TrimSpace(lastErr) != want {
				t.Errorf("job: last error shown as %q, want %q with its line break", lastErr, want)
			}
			var died string
			if err := p.Eval(`document.getElementById("died-at").innerText`, &died); err != nil {
				t.Fatal(err)
			}
			if d, err := time.Parse("2006-01-02 15:04:05Z", strings.TrimSpace(died)); err != nil || time.Since(d) > 5*time.Minute {
				t.Errorf("job: died %q (%v), want the time of death", died, err)
			}
			noMarkup(t, "job", p)
			shot("job")

			p.Navigate(f.url + "/rate-limits")
			var rows []string
			if err := p.Eval(`[...document.querySelectorAll("#rate-limits tr[id]")].map(r => r.id + ": " + [...r.cells].map(c => c.innerText.trim()).join(" | "))`, &rows); err != nil {
				t.Fatal(err)
			}
			bk := f.src.s.RateLimits["partner-api"].Backend
			want := []string{
				"rate-partner-api: partner-api | " + bk + " | 10/1h | 10 | no | available 7 of 10 | -",
				"rate-per-user-mail: per-user-mail | " + bk + " | 5/1h | 1 | keyed | busy keys 3 | -",
				"rate-search-api: search-api | " + bk + " | 100/1m | 5 | no | not applied run coordd apply | -",
				"rate-webhooks: webhooks | " + bk + " | 100/1m | 20 | no | available 20 of 20 | cron.cleanup",
			}
			if strings.Join(rows, "\n") != strings.Join(want, "\n") {
				t.Errorf("rate limits: rows\n%s\nwant\n%s", strings.Join(rows, "\n"), strings.Join(want, "\n"))
			}
			if n := p.Count("#rate-partner-api .meter .fill.w7"); n != 1 {
				t.Errorf("rate limits: partner-api's meter is not at 7 tenths (%d)", n)
			}
			if n := p.Count("header nav a.on"); n != 1 || !strings.Contains(p.Text(), "Rate limits") {
				t.Errorf("rate limits: %d navigation links marked current", n)
			}
			if n := p.Count("form"); n != 0 {
				t.Errorf("rate limits: %d forms on a read-only page", n)
			}
			noMarkup(t, "rate limits", p)
			shot("rate-limits")

			p.Navigate(f.url + "/queues/nope")
			contains(t, "unknown queue", p.Text(), "404", "No such object")
		})
	}
}

// TestDashboardHeaders: every page forbids scripts, frames and other
// sites' form targets (Content-Security-Policy), and is not cached.
func TestDashboardHeaders(t *testing.T) {
	f := newFixture(t, "", dashboard.Options{})
	resp, err := http.Get(f.url + "/queues/thumbnails")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	csp := resp.Header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "form-action 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("Content-Security-Policy %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "script-src") {
		t.Errorf("Content-Security-Policy %q allows a script", csp)
	}
	if got := resp.Header.Get("Cache-Control"); got != "no-store" {
		t.Errorf("Cache-Control %q", got)
	}
}

// TestTemplatesNeedNothingTheCSPBlocks: the Content-Security-Policy allows
// the one embedded style sheet and nothing else, so a style attribute, a
// script or an external asset in a template would be blocked (or fetched
// from elsewhere) in the browser.
func TestTemplatesNeedNothingTheCSPBlocks(t *testing.T) {
	files, err := filepath.Glob("templates/*.html")
	if err != nil || len(files) == 0 {
		t.Fatalf("templates: %v %v", files, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, bad := range []string{" style=", "<script", "<link", "<img", "http://", "https://"} {
			if strings.Contains(strings.ToLower(string(b)), bad) {
				t.Errorf("%s contains %q", f, bad)
			}
		}
		if m := regexp.MustCompile(`(?i)\son[a-z]+=`).Find(b); m != nil {
			t.Errorf("%s has an event handler attribute %q", f, m)
		}
	}
}

// TestDashboardBackendDown: with the queue's backend stopped, every page
// still renders, with the failed read in place of its section.
func TestDashboardBackendDown(t *testing.T) {
	r := testenv.StartRedis(t)
	f := newFixture(t, fmt.Sprintf("backends:\n  cache: {type: redis, url: %q}\ncluster: {backend: cache}\n", r.URL()), dashboard.Options{})
	r.Stop()
	p := browsertest.Start(t).NewPage(t)
	for _, path := range []string{"/", "/semaphores", "/cron", "/cron/nightly-report", "/queues", "/queues/thumbnails", "/rate-limits"} {
		p.Navigate(f.url + path)
		text := p.Text()
		if !strings.Contains(text, "connect") && !strings.Contains(text, "refused") {
			t.Errorf("%s does not show the failed read:\n%s", path, text)
		}
		if !strings.Contains(text, "this page runs no script") {
			t.Errorf("%s did not render whole:\n%s", path, text)
		}
	}
}

// TestDashboardDeadSetPages: a queue's page lists 100 dead jobs at a
// time, oldest first, with links to the next and the previous page; a
// search lists its first 100 matches and goes on from where it stopped.
func TestDashboardDeadSetPages(t *testing.T) {
	f := newFixture(t, "", dashboard.Options{})
	for range 200 {
		f.dead()
	}
	p := browsertest.Start(t).NewPage(t)
	p.Navigate(f.url + "/queues/thumbnails?pause=1")
	var first []string
	for i, want := range []struct {
		n     int
		text  string
		links string
	}{
		{100, "Dead jobs 1–100 of 201, oldest first", "next"},
		{100, "Dead jobs 101–200 of 201", "prev next"},
		{1, "Dead jobs 201–201 of 201", "prev"},
	} {
		if n := p.Count("#dead tr.job"); n != want.n {
			t.Errorf("page %d: %d dead jobs listed, want %d", i+1, n, want.n)
		}
		contains(t, fmt.Sprintf("page %d", i+1), p.Text(), want.text)
		links := strings.TrimSpace(strings.Join([]string{map[bool]string{true: "prev"}[p.Count("#dead-prev") == 1], map[bool]string{true: "next"}[p.Count("#dead-next") == 1]}, " "))
		if links != want.links {
			t.Errorf("page %d: links %q, want %q", i+1, links, want.links)
		}
		var ids []string
		if err := p.Eval(`[...document.querySelectorAll("#dead tr.job td:first-child")].map(e => e.innerText)`, &ids); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = ids
		}
		if want.links != "prev" {
			var next string
			if err := p.Eval(`document.getElementById("dead-next").href`, &next); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(next, "pause=1") {
				t.Errorf("page %d: the next link %q drops the refresh pause", i+1, next)
			}
			p.Navigate(next)
		}
	}
	var prev string
	if err := p.Eval(`document.getElementById("dead-prev").href`, &prev); err != nil {
		t.Fatal(err)
	}
	p.Navigate(prev)
	var ids []string
	if err := p.Eval(`[...document.querySelectorAll("#dead tr.job td:first-child")].map(e => e.innerText)`, &ids); err != nil {
		t.Fatal(err)
	}
	contains(t, "previous page", p.Text(), "Dead jobs 101–200 of 201")
	if len(ids) != 100 || ids[0] == first[0] {
		t.Errorf("the previous page of the last lists %d jobs from %v", len(ids), ids[:1])
	}

	// 200 of the 201 dead jobs match (all but the fixture's first): the
	// first 100 are listed, and the search goes on after the 100th match.
	p.Navigate(f.url + "/queues/thumbnails?pause=1&q=" + url.QueryEscape("FAILED again"))
	if n := p.Count("#dead tr.job"); n != 100 {
		t.Errorf("search: %d dead jobs listed, want 100", n)
	}
	contains(t, "search", p.Text(), "Searched dead jobs 1–101 of 201", "100 match, the first 100 are listed")
	var next string
	if err := p.Eval(`document.getElementById("dead-next").href`, &next); err != nil {
		t.Fatal(err)
	}
	p.Navigate(next)
	if n := p.Count("#dead tr.job"); n != 100 || p.Count("#dead-next") != 0 {
		t.Errorf("search on: %d dead jobs listed, want the other 100 and no next link", n)
	}
	contains(t, "search on", p.Text(), "Searched dead jobs 102–201 of 201", "100 match")
}
