package notify

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

func run(at time.Time, attempt int, status, why string) backends.Run {
	r := backends.Run{FinishedAt: at.Add(time.Second)}
	r.ScheduledAt, r.Attempt, r.Status, r.Error = at, attempt, status, why
	r.ExitCode = 3
	return r
}

// TestCronEventsAreFinalFailures: an event is the last attempt of a time
// that failed, timed out or was lost with no attempt to follow, or a time
// skipped as missed; never a success, a policy skip, or an attempt that a
// retry follows (or will follow).
func TestCronEventsAreFinalFailures(t *testing.T) {
	task := &spec.CronTask{Name: "report", MaxAttempts: 2, OnHostLoss: spec.HostLossRetry}
	t0 := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
	t1, t2, t3, t4, t5 := t0.Add(time.Hour), t0.Add(2*time.Hour), t0.Add(3*time.Hour), t0.Add(4*time.Hour), t0.Add(5*time.Hour)
	runs := []backends.Run{ // newest first
		run(t5, 1, backends.RunFailed, "exit status 3"),            // attempt 2 to come: no event yet
		run(t4, 3, backends.RunLost, ""),                           // lost past max_attempts+0: final
		run(t3, 1, backends.RunSkipped, "overlap forbid: skipped"), // policy
		run(t2, 2, backends.RunTimedOut, "timed out"),              // final
		run(t2, 1, backends.RunFailed, "exit status 3"),            // retried
		run(t1, 1, backends.RunSkipped, "missed: starting_deadline 1m passed (2m late)"),
		run(t0, 1, backends.RunSucceeded, ""),
	}
	evs := cronEvents(task, runs)
	var got []string
	for _, e := range evs {
		got = append(got, e.Kind+" "+e.ID)
	}
	want := []string{
		KindCronLost + " cron/report/" + micros(t4) + "/3",
		KindCronTimeout + " cron/report/" + micros(t2) + "/2",
		KindCronMissed + " cron/report/" + micros(t1) + "/missed",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if evs[1].ExitCode == nil || *evs[1].ExitCode != 3 || evs[1].Error != "timed out" || evs[1].Object != "cron.report" {
		t.Fatalf("the timeout's facts are wrong: %+v", evs[1])
	}
}

// TestOverdueTimeIsOneEvent: a next time not started missed_after after it
// is a missed event whose id is the time's, the same id as the skip that
// may record it later; before missed_after it is none.
func TestOverdueTimeIsOneEvent(t *testing.T) {
	task := &spec.CronTask{Name: "report", OnFailure: &spec.Hook{MissedAfter: time.Minute}}
	next := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
	st := &backends.CronState{Name: "report", NextExec: next}
	if _, ok := overdueEvent(task, st, next.Add(59*time.Second)); ok {
		t.Fatal("a time 59s late is overdue with missed_after 1m")
	}
	ev, ok := overdueEvent(task, st, next.Add(2*time.Minute))
	if !ok || ev.Kind != KindCronMissed || !ev.At.Equal(next.Add(time.Minute)) {
		t.Fatalf("overdue event = %+v, %v", ev, ok)
	}
	skip := cronEvents(task, []backends.Run{run(next, 1, backends.RunSkipped, "catch_up once: skipped 1 missed")})
	if len(skip) != 1 || skip[0].ID != ev.ID {
		t.Fatalf("the skip of the overdue time is another event: %+v vs %s", skip, ev.ID)
	}
}

// TestTailIsBoundedUTF8: an event carries at most OutputLimit bytes of
// output, valid UTF-8 even when the cut falls inside a rune.
func TestTailIsBoundedUTF8(t *testing.T) {
	out := []byte(strings.Repeat("é", OutputLimit) + "\xff end")
	got := tail(out)
	if len(got) > OutputLimit+3 || !utf8.ValidString(got) || !strings.HasSuffix(got, "\uFFFD end") {
		t.Fatalf("tail: %d bytes, valid %v, ends %q", len(got), utf8.ValidString(got), got[len(got)-8:])
	}
}
