package dashboard_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/dashboard"
)

// TestThroughputKnownBeforeAPageIsOpen: the daemon's readings
// (Dashboard.Sample, every 30 s) give the queues page a backlog trend
// before anyone opened it: the first page view shows the growth the two
// readings saw, and the jobs that died between them.
func TestThroughputKnownBeforeAPageIsOpen(t *testing.T) {
	f := newFixture(t, "", dashboard.Options{})
	d := f.h.(*dashboard.Dashboard)
	d.Sample(f.ctx)
	time.Sleep(11 * time.Second) // a trend needs two readings 10 s apart
	q := f.src.e.Backends[f.src.s.Queues["thumbnails"].Backend].Queues()
	for range 6 {
		if _, err := q.Push(f.ctx, "thumbnails", backends.PushRequest{Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	d.Sample(f.ctx)
	_, page := newClient(t, f.url).do(http.MethodGet, "/queues", nil, nil)
	contains(t, "queues page", page, "growing ")
}
