package notify

import (
	"context"
	"encoding/json"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/sqlite"
	"github.com/coordd/coordd/spec"
)

// store opens a handle on the SQLite file path, migrated.
func store(t *testing.T, path string) backends.Backend {
	t.Helper()
	st, err := sqlite.Open(t.Context(), "db", path, backends.Options{Version: "0.1.0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return st
}

// fail records one failed run of task at a new scheduled time.
func fail(t *testing.T, b backends.Backend, task *spec.CronTask, at time.Time) {
	t.Helper()
	c := b.Crons()
	def, _ := json.Marshal(task)
	if err := c.PutCron(t.Context(), task.Name, def, at, true); err != nil {
		t.Fatal(err)
	}
	occ, err := c.ClaimOccurrence(t.Context(), backends.ClaimRequest{Task: task.Name, ScheduledAt: at, Next: at.Add(time.Hour), Attempt: 1, Owner: "o-" + at.String(), Host: "h", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := backends.FinishOne(t.Context(), c, occ, backends.RunResult{Status: backends.RunFailed, ExitCode: 1, Error: "exit status 1"}); err != nil {
		t.Fatal(err)
	}
}

// recorder is a Deliver that counts deliveries by event id; block, when
// set, makes a delivery wait for its context to end (a leader that dies
// mid-delivery).
type recorder struct {
	mu    sync.Mutex
	got   map[string]int
	block bool
}

func (r *recorder) deliver(ctx context.Context, _ *spec.Hook, ev Event) error {
	r.mu.Lock()
	r.got[ev.ID]++
	block := r.block
	r.mu.Unlock()
	if block {
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func (r *recorder) counts() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for k, v := range r.got {
		out[k] = v
	}
	return out
}

func newNotifier(b backends.Backend, task *spec.CronTask, r *recorder) *Notifier {
	return New(Config{
		Host: "h", Notices: b.Cluster(), Leading: func() bool { return true }, Deliver: r.deliver,
		Objects: func() []Object { return []Object{{Task: task, Backend: b}} },
	})
}

// TestNotifierOncePerEventAcrossLeaders: the event a leader delivered is
// marked, and the next leader (another handle, another process's memory)
// does not deliver it again; an event whose delivery was cut (its leader
// died) is delivered by the next one. Failures from before the hook was
// declared are never delivered.
func TestNotifierOncePerEventAcrossLeaders(t *testing.T) {
	path := filepath.Join(t.TempDir(), "coordd.db")
	a, b := store(t, path), store(t, path)
	task := &spec.CronTask{Name: "report", MaxAttempts: 1, HistoryLimit: 10, OnFailure: &spec.Hook{Webhook: &spec.Webhook{URL: "http://127.0.0.1:1/"}}}
	base := time.Now().UTC().Truncate(time.Second).Add(-time.Hour)

	fail(t, a, task, base) // before the hook is declared
	time.Sleep(5 * time.Millisecond)
	ra, rb := &recorder{got: map[string]int{}}, &recorder{got: map[string]int{}}
	na, nb := newNotifier(a, task, ra), newNotifier(b, task, rb)
	na.Look(t.Context()) // declares the hook: since now
	na.Wait(t.Context())
	if len(ra.counts()) != 0 {
		t.Fatalf("a failure from before the hook was declared was delivered: %v", ra.counts())
	}

	fail(t, a, task, base.Add(time.Minute))
	na.Look(t.Context())
	na.Wait(t.Context())
	first := "cron/report/" + micros(base.Add(time.Minute)) + "/1"
	if got := ra.counts(); len(got) != 1 || got[first] != 1 {
		t.Fatalf("leader a delivered %v, want %s once", got, first)
	}
	na.Look(t.Context())
	na.Wait(t.Context())
	nb.Look(t.Context())
	nb.Wait(t.Context())
	if ra.counts()[first] != 1 || len(rb.counts()) != 0 {
		t.Fatalf("delivered again: a %v, b %v", ra.counts(), rb.counts())
	}

	// Leader a dies in the middle of the next delivery: no mark.
	ra.block = true
	fail(t, a, task, base.Add(2*time.Minute))
	second := "cron/report/" + micros(base.Add(2*time.Minute)) + "/1"
	na.Look(t.Context())
	cut, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	na.Wait(cut)
	cancel()
	nb.Look(t.Context())
	nb.Wait(t.Context())
	if ra.counts()[second] != 1 || rb.counts()[second] != 1 || rb.counts()[first] != 0 {
		t.Fatalf("after a cut delivery: a %v, b %v; want %s once by each and %s by a only", ra.counts(), rb.counts(), second, first)
	}
}

// TestNotifierDeliversEveryEventOfALook: with fewer delivery slots than
// events, one look still delivers every event it found, the oldest first,
// so that a task failing faster than the hooks run never starves its own
// older events or another object's.
func TestNotifierDeliversEveryEventOfALook(t *testing.T) {
	path := filepath.Join(t.TempDir(), "coordd.db")
	st := store(t, path)
	hook := &spec.Hook{Command: &spec.Command{Shell: "true"}}
	a := &spec.CronTask{Name: "a", MaxAttempts: 1, HistoryLimit: 20, OnFailure: hook}
	b := &spec.CronTask{Name: "b", MaxAttempts: 1, HistoryLimit: 20, OnFailure: hook}
	var mu sync.Mutex
	var order []string
	n := New(Config{
		Host: "h", Notices: st.Cluster(), Leading: func() bool { return true }, Parallel: 1,
		Objects: func() []Object { return []Object{{Task: a, Backend: st}, {Task: b, Backend: st}} },
		Deliver: func(_ context.Context, _ *spec.Hook, ev Event) error {
			mu.Lock()
			order = append(order, ev.ID)
			mu.Unlock()
			return nil
		},
	})
	n.Look(t.Context()) // declares both hooks
	n.Wait(t.Context())
	base := time.Now().UTC().Truncate(time.Second).Add(-time.Hour)
	for i := range 6 {
		fail(t, st, a, base.Add(time.Duration(i)*time.Minute))
	}
	fail(t, st, b, base)
	n.Look(t.Context())
	n.Wait(t.Context())
	if len(order) != 7 {
		t.Fatalf("one look with one slot delivered %d of 7 events: %v", len(order), order)
	}
	if order[0] != "cron/a/"+micros(base)+"/1" {
		t.Fatalf("the oldest event of a did not go first: %v", order)
	}
}
