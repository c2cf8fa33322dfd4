package dashboard_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/dashboard"
	"github.com/coordd/coordd/reconcile"
	"github.com/coordd/coordd/spec"
)

// lateSource is a dashboard.Source set once the fixture made its own: the
// actions of Options.Extra are built before the dashboard is.
type lateSource struct{ src dashboard.Source }

func (l *lateSource) Current() (*spec.Spec, *reconcile.Engine) { return l.src.Current() }
func (l *lateSource) HostID() string                           { return l.src.HostID() }
func (l *lateSource) Leading() (backends.Term, bool)           { return l.src.Leading() }

// TestDashboardPauseResume: the Pause and Resume buttons of
// dashboard.PauseActions (Options.Extra) change the store as `coordd cron
// pause` and `resume` do, on a real SQLite store over HTTP: a pause without
// a reason is refused, a pause records this host and the reason (naming
// the dashboard and the token), the cron pages show it (no next run, and
// Resume in place of Pause), a resume lifts it; without a login nothing
// changes.
func TestDashboardPauseResume(t *testing.T) {
	late := &lateSource{}
	f := newFixture(t, "", dashboard.Options{Actions: true, TokenFile: tokenFile(t, "alice:"+aliceSecret), Extra: dashboard.PauseActions(late)})
	late.src = f.src
	_, e := f.src.Current()
	adm := e.Backends[f.src.s.Cron["nightly-report"].Backend].Crons()
	pause := func() *backends.CronPause {
		t.Helper()
		m, err := adm.ObserveCrons(f.ctx, []string{"nightly-report"})
		if err != nil {
			t.Fatal(err)
		}
		return m["nightly-report"].Paused
	}
	const pausePath, resumePath = "/actions/cron/nightly-report/pause", "/actions/cron/nightly-report/resume"

	// Without a login: refused, nothing changes.
	anon := newClient(t, f.url)
	if code, _ := anon.do(http.MethodPost, pausePath, url.Values{"reason": {"x"}}, nil); code != http.StatusForbidden || pause() != nil {
		t.Fatalf("pause without a login: %d, pause %+v; want 403 and no pause", code, pause())
	}

	c := newClient(t, f.url)
	csrf := c.login(aliceSecret)
	_, page := c.do(http.MethodGet, "/cron/nightly-report", nil, nil)
	// A running task offers Pause, not Resume.
	contains(t, "task page", page, `data-action="pause"`)
	if strings.Contains(page, `data-action="resume"`) {
		t.Errorf("the task page of a running task offers Resume")
	}

	// A pause needs a reason.
	if code, _ := c.do(http.MethodPost, pausePath, url.Values{"csrf": {csrf}}, nil); code != http.StatusSeeOther || pause() != nil {
		t.Fatalf("pause without a reason: %d, pause %+v; want a redirect and no pause", code, pause())
	}
	_, page = c.do(http.MethodGet, "/cron/nightly-report", nil, nil)
	contains(t, "task page after a pause without a reason", page, "a reason is required")

	if code, _ := c.do(http.MethodPost, pausePath, url.Values{"csrf": {csrf}, "reason": {"INC-42 vendor down"}}, nil); code != http.StatusSeeOther {
		t.Fatalf("pause: %d", code)
	}
	p := pause()
	if p == nil || p.Host != "web-1" || p.Reason != "INC-42 vendor down (dashboard, token alice)" || p.At.IsZero() {
		t.Fatalf("pause stored as %+v, want by web-1 with the reason, the dashboard and the token", p)
	}
	_, page = c.do(http.MethodGet, "/cron/nightly-report", nil, nil)
	// A paused task offers Resume, not Pause, and shows no next run.
	contains(t, "task page of a paused task", page, "cron.nightly-report paused by web-1", `id="paused"`, "INC-42 vendor down", `data-action="resume"`, "none while paused")
	if strings.Contains(page, `data-action="pause"`) {
		t.Errorf("the task page of a paused task offers Pause")
	}
	_, page = c.do(http.MethodGet, "/cron", nil, nil)
	contains(t, "cron page with a paused task", page, `class="b warn paused"`, "none while paused")
	row := page[strings.Index(page, `<tr id="task-nightly-report">`):]
	row = row[:strings.Index(row, "</tr>")]
	if strings.Contains(row, `data-action="pause"`) || !strings.Contains(row, `data-action="resume"`) {
		t.Errorf("the cron page's row of the paused task does not offer Resume alone:\n%s", row)
	}
	if !strings.Contains(f.logs.String(), `action=cron.pause`) || !strings.Contains(f.logs.String(), `token_id=alice`) {
		t.Errorf("the pause is not in the action log:\n%s", f.logs.String())
	}

	if code, _ := c.do(http.MethodPost, resumePath, url.Values{"csrf": {csrf}}, nil); code != http.StatusSeeOther || pause() != nil {
		t.Fatalf("resume: %d, pause %+v; want a redirect and no pause", code, pause())
	}
	_, page = c.do(http.MethodGet, "/cron/nightly-report", nil, nil)
	contains(t, "task page after the resume", page, "cron.nightly-report resumed")
	if strings.Contains(page, `id="paused"`) {
		t.Errorf("the task page still shows the pause after the resume")
	}
}

// TestDashboardQueuePauseResume: the queue's Pause and Resume buttons
// change the store as `coordd queue pause` and `resume` do, over HTTP on a
// real SQLite store: a pause needs a reason and records this host and the
// reason (naming the dashboard and the token); the queue pages show it
// (a notice, a badge in the list) and offer Resume in place of Pause; a
// resume lifts it.
func TestDashboardQueuePauseResume(t *testing.T) {
	late := &lateSource{}
	f := newFixture(t, "", dashboard.Options{Actions: true, TokenFile: tokenFile(t, "alice:"+aliceSecret), Extra: dashboard.PauseActions(late)})
	late.src = f.src
	q := f.src.e.Backends[f.src.s.Queues["thumbnails"].Backend].Queues()
	paused := func() *backends.Pause {
		t.Helper()
		p, err := q.QueuePaused(f.ctx, "thumbnails")
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	const pausePath, resumePath = "/actions/queue/thumbnails/pause-queue", "/actions/queue/thumbnails/resume-queue"
	c := newClient(t, f.url)
	csrf := c.login(aliceSecret)
	_, page := c.do(http.MethodGet, "/queues/thumbnails", nil, nil)
	contains(t, "queue page", page, `data-action="pause-queue"`)
	if strings.Contains(page, `data-action="resume-queue"`) {
		t.Errorf("the page of a running queue offers Resume")
	}
	if code, _ := c.do(http.MethodPost, pausePath, url.Values{"csrf": {csrf}}, nil); code != http.StatusSeeOther || paused() != nil {
		t.Fatalf("pause without a reason: %d, pause %+v", code, paused())
	}
	if code, _ := c.do(http.MethodPost, pausePath, url.Values{"csrf": {csrf}, "reason": {"INC-7 <b>image</b> service down"}}, nil); code != http.StatusSeeOther {
		t.Fatalf("pause: %d", code)
	}
	p := paused()
	if p == nil || p.Host != "web-1" || p.Reason != "INC-7 <b>image</b> service down (dashboard, token alice)" {
		t.Fatalf("pause recorded: %+v", p)
	}
	_, page = c.do(http.MethodGet, "/queues/thumbnails", nil, nil)
	contains(t, "paused queue page", page, `id="queue-paused"`, "Paused by web-1", "INC-7 &lt;b&gt;image&lt;/b&gt; service down", `data-action="resume-queue"`)
	if strings.Contains(page, `data-action="pause-queue"`) {
		t.Errorf("the page of a paused queue offers Pause")
	}
	_, page = c.do(http.MethodGet, "/queues", nil, nil)
	contains(t, "queues list", page, ">paused</span>")
	if code, _ := c.do(http.MethodPost, resumePath, url.Values{"csrf": {csrf}}, nil); code != http.StatusSeeOther || paused() != nil {
		t.Fatalf("resume: %d, pause %+v", code, paused())
	}
	_, page = c.do(http.MethodGet, "/queues/thumbnails", nil, nil)
	contains(t, "queue page after resume", page, "resumed (it was paused by web-1")
}
