package main

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/open"
	"github.com/coordd/coordd/metrics"
	"github.com/coordd/coordd/queue"
)

// TestQueueCountsAgree: with jobs ready, delayed (a delayed
// push, a retry in its backoff) and in flight, `coordd status` (text and
// --json), `coordd queue stats` and the metrics collector report the same
// ready, delayed and in-flight numbers, on every backend that holds
// queues. Ready means ready now: a delayed job is counted once, as delayed.
func TestQueueCountsAgree(t *testing.T) {
	for _, typ := range []string{"sqlite", "mysql", "postgres", "redis"} {
		t.Run(typ, func(t *testing.T) { queueCountsAgree(t, typ) })
	}
}

func queueCountsAgree(t *testing.T, typ string) {
	c := newCLI(t)
	const decl = "queues:\n  q: {visibility_timeout: 10m, retry_backoff: 1h}\n"
	var p string
	if typ == "sqlite" {
		p = writeSpec(t, decl)
	} else {
		p = writeSpec(t, hostsBackend(t, typ)+decl)
	}
	if code, _, errs := c.run("", false, "apply", "-f", p, "--auto-approve"); code != 0 {
		t.Fatalf("apply: %s", errs)
	}
	ctx := context.Background()
	s, ok := loadSpec(context.Background(), &cliEnv{stderr: os.Stderr}, p, false)
	if !ok {
		t.Fatal("load spec")
	}
	bname := s.Queues["q"].Backend
	b, err := open.Open(ctx, s.Backends[bname], backends.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cl, err := queue.New(b)
	if err != nil {
		t.Fatal(err)
	}
	// 4 ready and 2 delayed pushes; of the ready ones, one is claimed and
	// held (in flight) and one is claimed and retried (a backoff of 1h):
	// 2 ready, 3 delayed, 1 in flight.
	for i := range 6 {
		var delay time.Duration
		if i >= 4 {
			delay = time.Hour
		}
		if _, err := cl.Push(ctx, "q", []byte("x"), queue.PushOptions{Delay: delay}); err != nil {
			t.Fatal(err)
		}
	}
	qs := b.Queues()
	var jobs []backends.Job
	for _, owner := range []string{"held", "retried"} {
		got, err := qs.Claim(ctx, "q", owner, 1)
		if err != nil || len(got) != 1 {
			t.Fatalf("claim = %v, %v; want a job", got, err)
		}
		jobs = append(jobs, got[0])
	}
	if err := qs.Retry(ctx, jobs[1], "boom"); err != nil {
		t.Fatal(err)
	}
	const ready, delayed, inFlight = 2, 3, 1

	st := queueStatsOf(t, c, p)
	if st.Ready != ready || st.Delayed != delayed || st.InFlight != inFlight {
		t.Errorf("queue stats: ready %d, delayed %d, in flight %d; want %d, %d, %d", st.Ready, st.Delayed, st.InFlight, ready, delayed, inFlight)
	}

	code, out, errs := c.run("", false, "status", "-f", p, "--json")
	if code != 0 {
		t.Fatalf("status --json: %d %s", code, errs)
	}
	var rep statusReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	found := false
	for _, o := range rep.Objects {
		if o.Address != "queue.q" {
			continue
		}
		found = true
		if o.Ready == nil || o.Delayed == nil || o.InFlight == nil {
			t.Fatalf("status --json: queue.q without counts: %s", out)
		}
		if *o.Ready != ready || *o.Delayed != delayed || *o.InFlight != inFlight {
			t.Errorf("status --json: ready %d, delayed %d, in flight %d; want %d, %d, %d", *o.Ready, *o.Delayed, *o.InFlight, ready, delayed, inFlight)
		}
	}
	if !found {
		t.Fatalf("status --json lists no queue.q:\n%s", out)
	}

	code, out, errs = c.run("", false, "status", "-f", p)
	if code != 0 {
		t.Fatalf("status: %d %s", code, errs)
	}
	line := regexp.MustCompile(`(?m)^queue\.q\s.*\bready (\d+)\s+in flight (\d+)\s+delayed (\d+)\s`)
	if m := line.FindStringSubmatch(out); m == nil || m[1] != "2" || m[2] != "1" || m[3] != "3" {
		t.Errorf("status: queue.q line %q, want ready 2, in flight 1, delayed 3\n%s", m, out)
	}

	reg := b.Cluster()
	m := metrics.New(metricsSource{objs: []metrics.Objects{{Backend: bname, B: b, Queues: []string{"q"}}}, reg: reg})
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		for _, mt := range f.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == "queue" && l.GetValue() == "q" {
					got[f.GetName()] = mt.GetGauge().GetValue()
				}
			}
		}
	}
	for name, want := range map[string]float64{"coordd_queue_ready": ready, "coordd_queue_delayed": delayed, "coordd_queue_in_flight": inFlight} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("metrics: %s = %v (present %v), want %v", name, v, ok, want)
		}
	}
}
