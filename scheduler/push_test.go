package scheduler

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// TestCronPushOncePerScheduledTime: a task that pushes a job pushes one per
// scheduled time, with its placeholders written out; a time whose push
// was made already (a retry after a crash between the push and its
// record) pushes nothing and records the run succeeded, naming that job.
func TestCronPushOncePerScheduledTime(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.db")
	st := openStore(t, path)
	ctx := context.Background()
	if _, err := st.PutQueue(ctx, backends.QueueConfig{Name: "q", Partitions: 1, VisibilityTimeout: time.Minute, MaxAttempts: 3, Unique: spec.UniqueNone, Claim: spec.ClaimPartition}); err != nil {
		t.Fatal(err)
	}
	def := newDef("@every 1s", "")
	def.Command = spec.Command{}
	def.Push = &spec.CronPush{Queue: "q", Payload: "{task} at {scheduled_at}"}
	first := now(t, st).Add(300 * time.Millisecond)
	put(t, st, "job", def, first)
	// The first time's push was made already, by an attempt that died.
	pre, pushed, err := st.PushOnce(ctx, "q", PushOnceKey("job", first), backends.PushRequest{Payload: []byte("made before")})
	if err != nil || !pushed {
		t.Fatalf("push once: %v %v", pushed, err)
	}
	h := start(t, path, "a")
	runs := waitRuns(t, st, "job", 30*time.Second, func(r []backends.Run) bool { return finished(r) >= 3 })
	h.stop()
	for _, r := range runs[:3] {
		if r.Status != backends.RunSucceeded {
			t.Fatalf("a push run did not succeed:\n%s", dump(runs))
		}
	}
	if !runs[0].ScheduledAt.Equal(first) || !strings.Contains(string(runs[0].Output), "stands for this time") {
		t.Fatalf("the first time's run: %s %q; want the job pushed before named", runs[0].ScheduledAt, runs[0].Output)
	}
	jobs, err := st.Claim(ctx, "q", "w", 100)
	if err != nil {
		t.Fatal(err)
	}
	byPayload := map[string]int{}
	for _, j := range jobs {
		byPayload[string(j.Payload)]++
	}
	if byPayload["made before"] != 1 || jobs[0].ID != pre.ID {
		t.Fatalf("jobs %v: want the one made before, once", byPayload)
	}
	for _, r := range runs[1:3] {
		want := "job at " + r.ScheduledAt.UTC().Format(spec.ScheduledAtLayout)
		if byPayload[want] != 1 {
			t.Fatalf("no single job %q for the run at %s; jobs %v", want, r.ScheduledAt, byPayload)
		}
	}
}
