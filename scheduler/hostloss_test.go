package scheduler

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// TestRetryable is the retry rule of on_host_loss: a lost attempt gets
// one attempt beyond max_attempts under on_host_loss retry, a failed or
// timed-out one none.
func TestRetryable(t *testing.T) {
	cases := []struct {
		max     int
		loss    string
		status  string
		attempt int
		want    bool
	}{
		{1, spec.HostLossRetry, backends.RunLost, 1, true}, // the default survives a host loss
		{1, spec.HostLossRetry, backends.RunLost, 2, false},
		{1, spec.HostLossRetry, backends.RunFailed, 1, false},
		{1, spec.HostLossRetry, backends.RunTimedOut, 1, false},
		{1, spec.HostLossFail, backends.RunLost, 1, false},
		{3, spec.HostLossRetry, backends.RunFailed, 2, true},
		{3, spec.HostLossRetry, backends.RunFailed, 3, false},
		{3, spec.HostLossRetry, backends.RunLost, 3, true},
		{3, spec.HostLossRetry, backends.RunLost, 4, false},
		{3, spec.HostLossFail, backends.RunLost, 1, false},
	}
	for _, c := range cases {
		tk := &task{def: spec.CronTask{MaxAttempts: c.max, OnHostLoss: c.loss}}
		r := backends.Run{Occurrence: backends.Occurrence{Attempt: c.attempt}, RunResult: backends.RunResult{Status: c.status}}
		if got := tk.retryable(r); got != c.want {
			t.Errorf("max_attempts %d, on_host_loss %s, attempt %d %s: retryable %v, want %v", c.max, c.loss, c.attempt, c.status, got, c.want)
		}
	}
}

// TestHostLossDefaultMaxAttempts: with the defaults (max_attempts 1,
// on_host_loss retry) an attempt whose host died runs again as attempt 2.
func TestHostLossDefaultMaxAttempts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.db")
	st := openStore(t, path)
	def := newDef("@every 1h", "true")
	at := now(t, st).Truncate(time.Hour)
	put(t, st, "job", def, at)
	if _, err := st.ClaimOccurrence(t.Context(), backends.ClaimRequest{Task: "job", ScheduledAt: at, Next: at.Add(time.Hour),
		Attempt: 1, Owner: "dead", Host: "dead-host", Lease: time.Second}); err != nil {
		t.Fatal(err)
	}
	start(t, path, "a")
	runs := waitRuns(t, st, "job", 20*time.Second, func(r []backends.Run) bool { return finished(r) == 2 })
	if runs[0].Status != backends.RunLost || runs[1].Attempt != 2 || runs[1].Status != backends.RunSucceeded || runs[1].Host != "a" {
		t.Fatalf("history:\n%s", dump(runs))
	}
}

// TestHostLossRetryBounded: attempts 1 and 2 were both lost (a command
// that kills its host every time); with max_attempts 1 there is no
// attempt 3.
func TestHostLossRetryBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.db")
	st := openStore(t, path)
	at := now(t, st).Truncate(time.Hour)
	put(t, st, "job", newDef("@every 1h", "true"), at)
	claim := func(attempt int, lease time.Duration) {
		t.Helper()
		if _, err := st.ClaimOccurrence(t.Context(), backends.ClaimRequest{Task: "job", ScheduledAt: at, Next: at.Add(time.Hour),
			Attempt: attempt, Owner: fmt.Sprint("dead", attempt), Host: "dead-host", Lease: lease}); err != nil {
			t.Fatal(err)
		}
	}
	claim(1, time.Millisecond)
	deadline := time.Now().Add(10 * time.Second)
	for {
		exp, err := st.ExpiredOccurrences(t.Context(), 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(exp) == 1 {
			if err := st.ReapOccurrence(t.Context(), exp[0]); err != nil {
				t.Fatal(err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("attempt 1 never expired")
		}
		time.Sleep(10 * time.Millisecond)
	}
	claim(2, time.Second)
	start(t, path, "a")
	waitRuns(t, st, "job", 20*time.Second, func(r []backends.Run) bool { return len(r) == 2 && r[1].Status == backends.RunLost })
	// Several sweeps (every second here) find nothing to retry.
	time.Sleep(3 * time.Second)
	if runs := history(t, st, "job"); len(runs) != 2 {
		t.Fatalf("retried past max_attempts+1:\n%s", dump(runs))
	}
}

// TestSemaphoreMaxHoldStopsCron: a task holding a semaphore with max_hold
// and no timeout of its own is stopped after max_hold, as a `sem run`
// holder is, instead of renewing the slot for as long as it hangs.
func TestSemaphoreMaxHoldStopsCron(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.db")
	st := openStore(t, path)
	if err := st.PutSemaphore(t.Context(), backends.SemaphoreConfig{Name: "one", Limit: 1, Lease: 5 * time.Second,
		Mode: spec.ModeLease, MaxWaiting: -1, MaxHold: time.Second}); err != nil {
		t.Fatal(err)
	}
	def := newDef("@every 1h", "sleep 120")
	def.Semaphore, def.KillGrace = "one", 200*time.Millisecond
	put(t, st, "hung", def, now(t, st).Truncate(time.Hour))
	start(t, path, "a")
	runs := waitRuns(t, st, "hung", 30*time.Second, func(r []backends.Run) bool { return finished(r) == 1 })
	if runs[0].Status != backends.RunTimedOut || !strings.Contains(runs[0].Error, "max_hold") {
		t.Fatalf("history:\n%s", dump(runs))
	}
}
