package dashboard_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/dashboard"
	"github.com/coordd/coordd/internal/browsertest"
	"github.com/coordd/coordd/queue"
)

// TestDashboardQueueCountsAndAttemptErrors: in Chromium, on every backend,
// after a worker processed one job and failed another (to the dead set), the
// queues page and the queue's page show 1 processed and 1 failed in the
// last hour, the queue's page draws a bar per minute with a failed part,
// and the dead job's page lists its failed attempt with the error's lines,
// the worker and the time; the fixture's hostile error stays text.
func TestDashboardQueueCountsAndAttemptErrors(t *testing.T) {
	browser := browsertest.Start(t)
	for _, bc := range backendsUnderTest {
		t.Run(bc.name, func(t *testing.T) {
			f := newFixture(t, bc.header(t), dashboard.Options{})
			b := f.src.e.Backends[f.src.s.Cluster.Backend]
			cl, err := queue.New(b)
			if err != nil {
				t.Fatal(err)
			}
			var failed int64
			err = cl.Work(f.ctx, "thumbnails", queue.WorkerOptions{Drain: true, ReadyOnly: true, Owner: "web-1:77"},
				func(_ context.Context, j backends.Job) error {
					if strings.Contains(string(j.Payload), "43") {
						failed = j.ID
						return errors.New("exit status 3\ncannot decode image 43")
					}
					return nil
				})
			if err != nil || failed == 0 {
				t.Fatalf("work: %v (failed job %d)", err, failed)
			}
			p := browser.NewPage(t)
			shots := bc.name == "sqlite"

			p.Navigate(f.url + "/queues")
			var cells []string
			if err := p.Eval(`[...document.querySelectorAll("#queue-thumbnails td.processed, #queue-thumbnails td.failed")].map(e => e.innerText)`, &cells); err != nil {
				t.Fatal(err)
			}
			if strings.Join(cells, ",") != "1,1" {
				t.Errorf("queues page: processed, failed = %v; want 1, 1", cells)
			}
			p.Navigate(f.url + "/queues/thumbnails")
			contains(t, "queue page", p.Text(), "Processed 1, failed attempts 1 in the last hour")
			if n := p.Count("#minute-chart .bar"); n != 60 {
				t.Errorf("queue page: %d minute bars, want 60", n)
			}
			if n := p.Count("#minute-chart .bar .f"); n < 1 {
				t.Errorf("queue page: no failed part in the chart")
			}
			if shots {
				screenshot(t, p, "queue-counts")
			}

			p.Navigate(fmt.Sprintf("%s/queues/thumbnails/jobs/%d", f.url, failed))
			contains(t, "failed job", p.Text(), "Failed attempts", "web-1:77", "cannot decode image 43")
			var lines string
			if err := p.Eval(`document.querySelector("#attempt-errors pre").innerText`, &lines); err != nil {
				t.Fatal(err)
			}
			if lines != "exit status 3\ncannot decode image 43" {
				t.Errorf("failed attempt's error shown as %q, want its two lines", lines)
			}
			if n := p.Count("#attempt-errors tr"); n != 2 {
				t.Errorf("%d rows in the failed attempts table, want a header and 1", n)
			}
			if shots {
				screenshot(t, p, "job-attempts")
			}
			noMarkup(t, "failed job", p)
		})
	}
}
