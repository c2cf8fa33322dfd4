package spec_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/coordd/coordd/spec"
)

// TestJitterSpreadsTasksOverTheInterval: the offset of a name is fixed,
// in [0, jitter), whole seconds from a minute of jitter; a thousand
// @hourly tasks with jitter 1h spread over the hour instead of all
// starting at :00.
func TestJitterSpreadsTasksOverTheInterval(t *testing.T) {
	if a, b := spec.JitterOffset("nightly-report", time.Hour), spec.JitterOffset("nightly-report", time.Hour); a != b {
		t.Fatalf("the offset of one name changed: %s, then %s", a, b)
	}
	if spec.JitterOffset("x", 0) != 0 {
		t.Errorf("no jitter gave an offset")
	}
	seen := map[time.Duration]bool{}
	lo, hi := time.Hour, time.Duration(0)
	for i := range 1000 {
		o := spec.JitterOffset(fmt.Sprintf("task-%d", i), time.Hour)
		if o < 0 || o >= time.Hour || o%time.Second != 0 {
			t.Fatalf("offset %s out of [0, 1h) or not whole seconds", o)
		}
		seen[o] = true
		lo, hi = min(lo, o), max(hi, o)
	}
	if len(seen) < 800 || hi-lo < 55*time.Minute {
		t.Errorf("1000 tasks got %d distinct offsets in [%s, %s]; want them spread over the hour", len(seen), lo, hi)
	}
	if o := spec.JitterOffset("fast", 10*time.Second); o%time.Millisecond != 0 || o >= 10*time.Second {
		t.Errorf("offset %s for a 10s jitter", o)
	}
}

// TestJitterMovesEveryOccurrence: a loaded task's schedule, and an applied
// definition read back (spec.TaskSchedule, as the scheduler does), run at
// each scheduled time plus the task's offset.
func TestJitterMovesEveryOccurrence(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a.yaml")
	if err := os.WriteFile(p, []byte("cron:\n  report: {schedule: \"@hourly\", jitter: 30m, command: \"true\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := spec.Load(p, spec.LoadOptions{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	task := s.Cron["report"]
	off := spec.JitterOffset("report", 30*time.Minute)
	from := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	applied, err := spec.TaskSchedule(task)
	if err != nil {
		t.Fatal(err)
	}
	first := from.Add(off)
	if off == 0 {
		first = from.Add(time.Hour)
	}
	for _, sched := range []spec.Schedule{task.Sched, applied} {
		n := sched.Next(from)
		for i := range 3 {
			if want := first.Add(time.Duration(i) * time.Hour); !n.Equal(want) {
				t.Fatalf("occurrence %d after %s: %s, want %s (the hour plus %s)", i+1, from, n, want, off)
			}
			n = sched.Next(n)
		}
	}
}
