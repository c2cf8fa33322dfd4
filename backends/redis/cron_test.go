package redis

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/internal/testenv"
)

var cronTestDef = json.RawMessage(`{"schedule":"* * * * *","command":{"argv":["true"]}}`)

// cronPutAt stores task with a next_exec of the server's now + offset.
func cronPutAt(t *testing.T, s *Store, task string, def json.RawMessage, offset time.Duration) time.Time {
	t.Helper()
	now, err := s.Now(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	at := now.Add(offset)
	if err := s.PutCron(t.Context(), task, def, at, true); err != nil {
		t.Fatal(err)
	}
	return at
}

func cronManual(task, owner string) backends.ClaimRequest {
	return backends.ClaimRequest{Task: task, Attempt: 1, Owner: owner, Host: "h", Lease: time.Minute, Manual: true}
}

// TestCronFencingCounterLoss: a task's fencing counter lost (alone, or
// with everything, as after a flush) is recreated at the server's TIME, so
// the next fencing number is above every earlier one.
func TestCronFencingCounterLoss(t *testing.T) {
	s := openStateStores(t, 1, backends.Options{})[0]
	ctx := t.Context()
	cronPutAt(t, s, "job", cronTestDef, time.Hour)
	var top int64
	claim := func(what string) {
		t.Helper()
		occ, err := s.ClaimOccurrence(ctx, cronManual("job", "o"))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if occ.Fencing <= top {
			t.Fatalf("%s: fencing %d, not above every earlier one (%d)", what, occ.Fencing, top)
		}
		top = occ.Fencing
	}
	claim("first claim")
	claim("second claim")
	if err := s.Client().Del(ctx, s.keys.cronFencing()).Err(); err != nil {
		t.Fatal(err)
	}
	claim("claim after losing the counters")
	if _, err := testenv.DeleteRedisPrefix(ctx, s.Client(), s.Prefix()); err != nil {
		t.Fatal(err)
	}
	cronPutAt(t, s, "job", cronTestDef, time.Hour)
	claim("claim after a flush")
}

// TestCronClaimRaceTwoStores: two Store handles (two hosts) race the claim
// of one due time, round after round: exactly one wins each round, the
// others get ErrConflict, and next_exec moves once.
func TestCronClaimRaceTwoStores(t *testing.T) {
	ss := openStateStores(t, 2, backends.Options{})
	ctx := t.Context()
	at := cronPutAt(t, ss[0], "race", cronTestDef, -time.Hour)
	for round := range 30 {
		next := at.Add(time.Second)
		var mu sync.Mutex
		var won []backends.Occurrence
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range 6 {
			s := ss[i%2]
			wg.Go(func() {
				<-start
				occ, err := s.ClaimOccurrence(ctx, backends.ClaimRequest{Task: "race", ScheduledAt: at, Next: next, Attempt: 1,
					Owner: fmt.Sprintf("o-%d-%d", round, i), Host: fmt.Sprintf("host-%d", i%2), Lease: time.Minute})
				switch {
				case err == nil:
					mu.Lock()
					won = append(won, occ)
					mu.Unlock()
				case !errors.Is(err, backends.ErrConflict):
					t.Errorf("round %d racer %d: %v, want ErrConflict", round, i, err)
				}
			})
		}
		close(start)
		wg.Wait()
		if len(won) != 1 {
			t.Fatalf("round %d: %d claims won, want exactly 1", round, len(won))
		}
		m, err := ss[1].ObserveCrons(ctx, []string{"race"})
		if err != nil || m["race"] == nil || !m["race"].NextExec.Equal(next) || m["race"].Running != round+1 {
			t.Fatalf("round %d: observed %+v, %v; want next_exec %v and %d running", round, m["race"], err, next, round+1)
		}
		at = next
	}
}

// TestCronHistoryLimit reads history_limit from the definition as the SQL
// stores do: an integer, clamped at 0; anything else is the default.
func TestCronHistoryLimit(t *testing.T) {
	for def, want := range map[string]int64{
		`{"history_limit":2}`:                    2,
		`{"history_limit":0}`:                    0,
		`{"history_limit":-3}`:                   0,
		`{"history_limit":2.0}`:                  100,
		`{"history_limit":"5"}`:                  100,
		`{"history_limit":null}`:                 100,
		`{"history_limit":99999999999999999999}`: 100,
		`{"schedule":"* * * * *"}`:               100,
		`[1]`:                                    100,
	} {
		if got := cronHistoryLimit(json.RawMessage(def)); got != want {
			t.Errorf("history limit of %s: %d, want %d", def, got, want)
		}
	}
}

// TestCronPendingRetryTrimmed: a failed run trimmed away by history_limit
// is no longer a pending retry, and its retry is refused.
func TestCronPendingRetryTrimmed(t *testing.T) {
	s := openStateStores(t, 1, backends.Options{})[0]
	ctx := t.Context()
	cronPutAt(t, s, "short", json.RawMessage(`{"history_limit":1}`), time.Hour)
	failed, err := s.ClaimOccurrence(ctx, cronManual("short", "a"))
	if err != nil {
		t.Fatal(err)
	}
	if err := backends.FinishOne(ctx, s, failed, backends.RunResult{Status: backends.RunFailed, ExitCode: 2, Output: []byte("boom")}); err != nil {
		t.Fatal(err)
	}
	if p, err := s.PendingRetries(ctx, 0); err != nil || len(p) != 1 || p[0].RunID != failed.RunID || p[0].Output != nil {
		t.Fatalf("pending: %+v, %v; want the failed run without output", p, err)
	}
	if h, err := s.History(ctx, "short", 0); err != nil || len(h) != 1 || string(h[0].Output) != "boom" {
		t.Fatalf("history: %+v, %v; want the failed run with its output", h, err)
	}
	ok, err := s.ClaimOccurrence(ctx, cronManual("short", "b"))
	if err != nil {
		t.Fatal(err)
	}
	if err := backends.FinishOne(ctx, s, ok, backends.RunResult{Status: backends.RunSucceeded}); err != nil {
		t.Fatal(err)
	}
	if p, err := s.PendingRetries(ctx, 0); err != nil || len(p) != 0 {
		t.Fatalf("pending after the failed run was trimmed: %+v, %v", p, err)
	}
	retry := backends.ClaimRequest{Task: "short", ScheduledAt: failed.ScheduledAt, Attempt: 2, Owner: "c", Lease: time.Minute, Manual: true}
	if _, err := s.ClaimOccurrence(ctx, retry); !errors.Is(err, backends.ErrConflict) {
		t.Fatalf("retry of a trimmed run: %v, want ErrConflict", err)
	}
	if n, err := s.Client().HLen(ctx, s.keys.cronTask("short", "out")).Result(); err != nil || n != 0 {
		t.Fatalf("outputs left after the trim: %d, %v", n, err)
	}
}

// TestCronNamesAreData: task names that look like key syntax get keys of
// their own and come back as they were written.
func TestCronNamesAreData(t *testing.T) {
	s := openStateStores(t, 1, backends.Options{})[0]
	ctx := t.Context()
	names := []string{"plain", "{x}:*", "plain:run", `"quoted"`}
	for _, n := range names {
		cronPutAt(t, s, n, cronTestDef, -time.Minute)
	}
	due, _, err := s.DueTasks(ctx, 0)
	if err != nil || len(due) != len(names) {
		t.Fatalf("due: %+v, %v", due, err)
	}
	for _, d := range due {
		occ, err := s.ClaimOccurrence(ctx, backends.ClaimRequest{Task: d.Name, ScheduledAt: d.NextExec, Next: d.NextExec.Add(time.Hour),
			Attempt: 1, Owner: "o", Host: "h", Lease: time.Minute})
		if err != nil {
			t.Fatalf("claim %q: %v", d.Name, err)
		}
		run, err := s.Running(ctx, d.Name)
		if err != nil || len(run) != 1 || run[0].Task != d.Name || run[0].RunID != occ.RunID {
			t.Fatalf("running %q: %+v, %v", d.Name, run, err)
		}
	}
}

// TestCronHistoryLimitLowered: lowering history_limit trims every run
// beyond it at the next finish, with their outputs and pending retries.
func TestCronHistoryLimitLowered(t *testing.T) {
	s := openStateStores(t, 1, backends.Options{})[0]
	ctx := t.Context()
	cronPutAt(t, s, "job", json.RawMessage(`{"history_limit":10}`), time.Hour)
	for i := range 6 {
		occ, err := s.ClaimOccurrence(ctx, cronManual("job", "o"))
		if err != nil {
			t.Fatal(err)
		}
		status := backends.RunFailed
		if i%2 == 1 {
			status = backends.RunSucceeded
		}
		if err := backends.FinishOne(ctx, s, occ, backends.RunResult{Status: status, Output: []byte("out")}); err != nil {
			t.Fatal(err)
		}
	}
	if p, err := s.PendingRetries(ctx, 0); err != nil || len(p) != 3 {
		t.Fatalf("pending: %d runs, %v; want 3", len(p), err)
	}
	if err := s.PutCron(ctx, "job", json.RawMessage(`{"history_limit":1}`), time.Time{}, false); err != nil {
		t.Fatal(err)
	}
	last, err := s.ClaimOccurrence(ctx, cronManual("job", "o"))
	if err != nil {
		t.Fatal(err)
	}
	if err := backends.FinishOne(ctx, s, last, backends.RunResult{Status: backends.RunSucceeded}); err != nil {
		t.Fatal(err)
	}
	if h, err := s.History(ctx, "job", 0); err != nil || len(h) != 1 || h[0].RunID != last.RunID {
		t.Fatalf("history: %+v, %v; want only the last run", h, err)
	}
	if p, err := s.PendingRetries(ctx, 0); err != nil || len(p) != 0 {
		t.Fatalf("pending after the trim: %+v, %v", p, err)
	}
	if n, err := s.Client().HLen(ctx, s.keys.cronTask("job", "out")).Result(); err != nil || n != 0 {
		t.Fatalf("outputs left after the trim: %d, %v", n, err)
	}
}
