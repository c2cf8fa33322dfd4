package dashboard_test

import (
	"fmt"
	"testing"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/dashboard"
	"github.com/coordd/coordd/internal/browsertest"
)

// TestDashboardQueueBrowser: in Chromium, on every backend, a queue's page
// has a tab per state with its count and lists the ready, delayed and
// running jobs with links to each job's page; a job's page shows its state
// and the time that matters for it, and offers only what its state allows:
// cancel (confirmed) on a ready or delayed job, run now on a delayed one.
// Each action changes the store as it says, and the stored values stay
// text.
func TestDashboardQueueBrowser(t *testing.T) {
	browser := browsertest.Start(t)
	for _, bc := range backendsUnderTest {
		t.Run(bc.name, func(t *testing.T) {
			f := newFixture(t, bc.header(t), dashboard.Options{Actions: true, TokenFile: tokenFile(t, "alice:"+aliceSecret)})
			q := f.src.e.Backends[f.src.s.Cluster.Backend].Queues()
			page := func(state string) []backends.PartialJob {
				t.Helper()
				js, err := q.JobsPage(f.ctx, "thumbnails", backends.JobPage{State: state, Limit: 10, Cut: 100})
				if err != nil {
					t.Fatal(err)
				}
				return js
			}
			ready, delayed := page(backends.JobReady), page(backends.JobDelayed)
			if len(ready) != 2 || len(delayed) != 1 {
				t.Fatalf("fixture: %d ready, %d delayed", len(ready), len(delayed))
			}
			p := browser.NewPage(t)
			shots := bc.name == "sqlite"

			p.Navigate(f.url + "/queues/thumbnails?state=ready")
			contains(t, "ready tab", p.Text(), "ready (2)", "delayed (1)", "running (0)", "dead (1)", "Ready jobs", `{"image": 43}`, "album-7")
			if n := p.Count("table#jobs tr.job"); n != 2 {
				t.Errorf("ready tab: %d rows, want 2", n)
			}
			noMarkup(t, "ready tab", p)
			if shots {
				screenshot(t, p, "queue-ready")
			}
			p.Navigate(f.url + "/queues/thumbnails?state=delayed")
			contains(t, "delayed tab", p.Text(), "Delayed jobs", `{"image": 45}`, "due")
			p.Navigate(f.url + "/queues/thumbnails?state=running")
			contains(t, "running tab", p.Text(), "No running job.")
			p.Navigate(f.url + "/queues/thumbnails?state=lost")
			contains(t, "unknown state", p.Text(), "404")

			// Without a login: the job's page, no buttons.
			p.Navigate(fmt.Sprintf("%s/queues/thumbnails/jobs/%d", f.url, delayed[0].ID))
			contains(t, "delayed job", p.Text(), fmt.Sprintf("Delayed job %d", delayed[0].ID), "due", `{"image": 45}`)
			if n := p.Count("form.act"); n != 0 {
				t.Errorf("a job page offers %d actions before a login", n)
			}
			login(t, p, f.url, aliceSecret)
			p.Navigate(fmt.Sprintf("%s/queues/thumbnails/jobs/%d", f.url, delayed[0].ID))
			if n := p.Count("button[data-action=run-job-now]") + p.Count("button[data-action=cancel-job]"); n != 2 || p.Count("button[data-action=requeue-job]") != 0 {
				t.Fatalf("a delayed job's page: %d of run now and cancel, %d requeue", n, p.Count("button[data-action=requeue-job]"))
			}
			if shots {
				screenshot(t, p, "job-delayed")
			}
			if err := p.Submit("button[data-action=run-job-now]"); err != nil {
				t.Fatal(err)
			}
			contains(t, "run now", p.Text(), fmt.Sprintf("job %d of queue.thumbnails is ready now", delayed[0].ID))
			if st := f.queueState(); st.Delayed != 0 || st.ReadyNow() != 3 {
				t.Errorf("after run now: %d delayed, %d ready now", st.Delayed, st.ReadyNow())
			}

			p.Navigate(fmt.Sprintf("%s/queues/thumbnails/jobs/%d", f.url, ready[0].ID))
			contains(t, "ready job", p.Text(), fmt.Sprintf("Ready job %d", ready[0].ID), "ready since")
			if p.Count("button[data-action=run-job-now]") != 0 || p.Count("button[data-action=cancel-job]") != 1 {
				t.Fatalf("a ready job's page offers run now, or no cancel")
			}
			if err := p.Submit("button[data-action=cancel-job]"); err != nil {
				t.Fatal(err)
			}
			contains(t, "cancel unconfirmed", p.Text(), "Not done: tick the box")
			p.Navigate(fmt.Sprintf("%s/queues/thumbnails/jobs/%d", f.url, ready[0].ID))
			if err := p.Eval(`document.querySelector('form[action$="/cancel-job"] input[name=confirm]').checked = true`, nil); err != nil {
				t.Fatal(err)
			}
			if err := p.Submit("button[data-action=cancel-job]"); err != nil {
				t.Fatal(err)
			}
			contains(t, "cancel", p.Text(), fmt.Sprintf("canceled job %d of queue.thumbnails", ready[0].ID))
			if _, _, err := q.JobByID(f.ctx, "thumbnails", ready[0].ID, 10); err == nil {
				t.Errorf("job %d is still there after its cancel", ready[0].ID)
			}
			p.Navigate(fmt.Sprintf("%s/queues/thumbnails/jobs/%d", f.url, ready[0].ID))
			contains(t, "canceled job's page", p.Text(), "404")

			// A dead job's page in the browser's route keeps its actions.
			dead := page(backends.JobDead)
			p.Navigate(fmt.Sprintf("%s/queues/thumbnails/jobs/%d", f.url, dead[0].ID))
			contains(t, "dead job", p.Text(), fmt.Sprintf("Dead job %d", dead[0].ID), "died")
			if p.Count("button[data-action=requeue-job]") != 1 || p.Count("button[data-action=cancel-job]") != 0 {
				t.Errorf("a dead job's page: requeue %d, cancel %d", p.Count("button[data-action=requeue-job]"), p.Count("button[data-action=cancel-job]"))
			}
			noMarkup(t, "dead job", p)
		})
	}
}
