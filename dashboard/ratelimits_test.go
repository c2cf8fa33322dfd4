package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/dashboard"
	"github.com/coordd/coordd/internal/browsertest"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/spec"
)

// hostileRateName is a rate limit name no spec would load (names are
// [a-z0-9_.-]), given to the page as a Source could: markup, a quote and
// a bidi override.
const hostileRateName = "<svg onload=alert(1)>\"x\u202eevil"

// TestDashboardRateLimits: in Chromium, over SQLite and Redis beside
// memcached, the rate limits page shows a limit on Redis whose permits
// are all taken (available 0 of 3, an empty meter) with the cron task and
// the queue that take its permits, a keyed limit on SQLite whose config
// was changed outside coordd (the backend's rate and burst shown as
// drift), a limit on memcached as not applied (it holds no rate limits),
// one on a backend this host has not open as unreadable, and a hostile
// name as text, never markup.
func TestDashboardRateLimits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	redisURL, redisPrefix := testenv.RedisURL(t)
	mcAddr, mcPrefix := testenv.MemcachedAddr(t)
	s, e := applied(ctx, t, fmt.Sprintf(`backends:
  local: {type: sqlite}
  cache: {type: redis, url: %q, key_prefix: %q}
  mc: {type: memcached, servers: [%q], key_prefix: %q}
cluster: {backend: local}
rate_limits:
  api: {backend: cache, rate: 3/90s, burst: 3}
  tenants: {backend: local, rate: 1/1h, keyed: true}
cron:
  sync: {schedule: "0 * * * *", command: "true", rate_limit: api}
queues:
  jobs: {backend: cache, rate_limit: api}
`, redisURL, redisPrefix, mcAddr, mcPrefix))
	api := backends.RateLimitsOf(e.Backends["cache"])
	if p, err := api.TakePermit(ctx, "api", "", 5); err != nil || p.Granted != 3 {
		t.Fatalf("take the 3 permits of api: %+v %v", p, err)
	}
	local := backends.RateLimitsOf(e.Backends["local"])
	if _, err := local.TakePermit(ctx, "tenants", "t-1", 1); err != nil {
		t.Fatal(err)
	}
	if err := local.PutRateLimit(ctx, backends.RateLimitConfig{Name: "tenants", Count: 2, Per: time.Hour, Burst: 4, Keyed: true}); err != nil {
		t.Fatal(err)
	}
	// Objects no loaded spec holds, as a Source may still give them.
	if err := local.PutRateLimit(ctx, backends.RateLimitConfig{Name: hostileRateName, Count: 1, Per: time.Hour, Burst: 2}); err != nil {
		t.Fatal(err)
	}
	s.RateLimits[hostileRateName] = &spec.RateLimit{Name: hostileRateName, Backend: "local", Count: 1, Per: time.Hour, Burst: 2}
	s.RateLimits["on-mc"] = &spec.RateLimit{Name: "on-mc", Backend: "mc", Count: 10, Per: time.Second, Burst: 1}
	s.RateLimits["elsewhere"] = &spec.RateLimit{Name: "elsewhere", Backend: "gone", Count: 10, Per: time.Minute, Burst: 1}

	d, err := dashboard.New(&source{s: s, e: e}, dashboard.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	defer srv.Close()
	p := browsertest.Start(t).NewPage(t)
	p.Navigate(srv.URL + "/rate-limits")
	var rows []string
	if err := p.Eval(`[...document.querySelectorAll("#rate-limits tr[id]")].map(r => [...r.cells].map(c => c.innerText.trim()).join(" | "))`, &rows); err != nil {
		t.Fatal(err)
	}
	want := []string{
		hostileRateName + " | local | 1/1h | 2 | no | available 2 of 2 | -",
		"api | cache | 3/1m30s | 3 | no | available 0 of 3 | cron.sync, queue.jobs",
		`elsewhere | gone | 10/1m | 1 | no | unreadable backend "gone" is not open on this host | -`,
		"on-mc | mc | 10/1s | 1 | no | not applied this backend holds no rate limits | -",
		"tenants | local | 1/1h | 1 | keyed | busy keys 1\ndrift the backend enforces 2/1h, burst 4 until coordd apply | -",
	}
	if strings.Join(rows, "\n") != strings.Join(want, "\n") {
		t.Errorf("rate limits: rows\n%s\nwant\n%s", strings.Join(rows, "\n"), strings.Join(want, "\n"))
	}
	if n := p.Count("#rate-api .meter .fill.w0"); n != 1 {
		t.Errorf("rate limits: api's meter is not empty (%d)", n)
	}
	noMarkup(t, "rate limits", p)
	if n := p.Count("svg"); n != 0 {
		t.Errorf("rate limits: the hostile name became %d svg elements", n)
	}
	if code, body := get(t, srv.URL+"/rate-limits"); code != http.StatusOK || markup(body) != "" {
		t.Errorf("GET /rate-limits: %d, markup %q", code, markup(body))
	}
}
