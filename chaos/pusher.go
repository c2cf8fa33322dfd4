package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// pusher pushes job j00001, j00002, ... every pushEvery. A push that fails
// is retried with the same payload; such a payload is ambiguous (the failed
// push may have enqueued it), which explains a second delivery.
func (w *world) pusher() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for n := 1; ; n++ {
			p := fmt.Sprintf("j%05d", n)
			for {
				if ctx.Err() != nil {
					return
				}
				from := time.Now()
				_, err := w.coordd(15*time.Second, "queue", "push", "jobs", "-f", w.spec, p)
				w.pushMu.Lock()
				if err == nil {
					w.pushed = append(w.pushed, Pushed{p, from, time.Now()})
				} else {
					w.ambiguous[p] = true
				}
				w.pushMu.Unlock()
				if err == nil {
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(pushEvery):
			}
		}
	}()
	return func() { cancel(); <-done }
}

// queueSettled reports whether every pushed payload is done and the queue
// holds nothing.
func (w *world) queueSettled() bool {
	jobs, err := ReadJobs(w.path("queue.log"))
	if err != nil {
		return false
	}
	done := map[string]bool{}
	for _, e := range jobs {
		if e.Kind == "done" {
			done[e.Payload] = true
		}
	}
	w.pushMu.Lock()
	for _, p := range w.pushed {
		if !done[p.Payload] && !lostWrite(w.faults, p.From, p.To) {
			w.pushMu.Unlock()
			return false
		}
	}
	w.pushMu.Unlock()
	out, err := w.coordd(10*time.Second, "queue", "stats", "jobs", "-f", w.spec, "--json")
	if err != nil {
		return false
	}
	var st []struct {
		Ready    int `json:"ready"`
		InFlight int `json:"in_flight"`
		Delayed  int `json:"delayed"`
	}
	if json.Unmarshal(out, &st) != nil || len(st) != 1 {
		return false
	}
	return st[0].Ready == 0 && st[0].InFlight == 0 && st[0].Delayed == 0
}
