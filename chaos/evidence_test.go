package chaos

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/proctest"
)

var t0 = time.Date(2026, 11, 24, 6, 0, 0, 0, time.UTC)

func at(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }

func start(sched float64, attempt int, host string, fencing int64, when float64) CronEvent {
	return CronEvent{Kind: "start", Task: "tick", ScheduledAt: at(sched), Attempt: attempt, Host: host, Fencing: fencing, At: at(when)}
}

func end(sched float64, attempt int, host string, fencing int64, when float64) CronEvent {
	e := start(sched, attempt, host, fencing, when)
	e.Kind = "end"
	return e
}

// TestCheckCron feeds the cron check logs that break each rule, and one
// that keeps them all.
func TestCheckCron(t *testing.T) {
	kill := func(host string, when float64) Fault {
		return Fault{Kind: DaemonKill, Target: host, At: at(when), End: at(when)}
	}
	cases := []struct {
		name   string
		events []CronEvent
		faults []Fault
		check  func(CronReport) bool
		forbid bool
	}{
		{"clean", []CronEvent{start(0, 1, "h1", 1, 0.1), start(2, 1, "h2", 2, 2.1), start(4, 1, "h1", 3, 4.1)}, nil,
			func(r CronReport) bool { return len(r.Problems) == 0 && r.Occurrences == 3 }, false},
		{"attempt started twice", []CronEvent{start(0, 1, "h1", 1, 0.1), start(0, 1, "h2", 2, 0.2), start(2, 1, "h1", 3, 2.1), start(4, 1, "h1", 4, 4.1)}, nil,
			func(r CronReport) bool { return r.DuplicateStarts == 1 }, false},
		{"a scheduled time missing", []CronEvent{start(0, 1, "h1", 1, 0.1), start(4, 1, "h1", 2, 4.1)}, nil,
			func(r CronReport) bool { return r.Misses == 1 }, false},
		{"a time missing at the end", []CronEvent{start(0, 1, "h1", 1, 0.1), start(2, 1, "h1", 2, 2.1)}, nil,
			func(r CronReport) bool { return r.Misses == 1 }, false}, // until is 4
		{"retry with no fault", []CronEvent{start(0, 1, "h1", 1, 0.1), start(0, 2, "h2", 2, 3.5), start(2, 1, "h2", 3, 2.1), start(4, 1, "h2", 4, 4.1)}, nil,
			func(r CronReport) bool { return r.Retries == 1 && r.UnexplainedRetries == 1 }, false},
		{"retry after another host's loss", []CronEvent{start(0, 1, "h1", 1, 0.1), start(0, 2, "h2", 2, 3.5), start(2, 1, "h2", 3, 2.1), start(4, 1, "h2", 4, 4.1)}, []Fault{kill("h3", 1)},
			func(r CronReport) bool { return r.UnexplainedRetries == 1 }, false},
		{"retry after its host's loss", []CronEvent{start(0, 1, "h1", 1, 0.1), start(0, 2, "h2", 2, 3.5), start(2, 1, "h2", 3, 2.1), start(4, 1, "h2", 4, 4.1)}, []Fault{kill("h1", 1)},
			func(r CronReport) bool { return r.Retries == 1 && len(r.Problems) == 0 }, false},
		{"retry after a loss before the first attempt ran", []CronEvent{start(0, 1, "h1", 1, 0.1), start(0, 2, "h2", 2, 3.5), start(2, 1, "h2", 3, 2.1), start(4, 1, "h2", 4, 4.1)}, []Fault{kill("h1", 0.05)},
			func(r CronReport) bool { return r.UnexplainedRetries == 1 }, false},
		{"retry after an outage that hung the first claim", []CronEvent{start(0, 1, "h1", 1, 2.5), start(0, 2, "h1", 2, 3), start(2, 1, "h2", 3, 2.1), start(4, 1, "h2", 4, 4.1)}, []Fault{{Kind: BackendRestart, At: at(0.5), End: at(2.4)}},
			func(r CronReport) bool { return r.Retries == 1 && len(r.Problems) == 0 }, false},
		{"an outage more than a lease before the first attempt explains nothing", []CronEvent{start(0, 1, "h1", 1, 6), start(0, 2, "h1", 2, 7), start(2, 1, "h2", 3, 2.1), start(4, 1, "h2", 4, 4.1)}, []Fault{{Kind: BackendRestart, At: at(1), End: at(2)}},
			func(r CronReport) bool { return r.UnexplainedRetries == 1 }, false},
		{"only a retry of a scheduled time started", []CronEvent{start(0, 1, "h1", 1, 0.1), start(2, 2, "h2", 3, 4.5), start(4, 1, "h2", 4, 4.1)}, []Fault{kill("h1", 2.05)},
			func(r CronReport) bool { return r.Misses == 0 && r.Retries == 1 && len(r.Problems) == 0 }, false},
		{"fencing token reused", []CronEvent{start(0, 1, "h1", 7, 0.1), start(2, 1, "h2", 7, 2.1), start(4, 1, "h1", 8, 4.1)}, nil,
			func(r CronReport) bool { return r.FencingReused == 1 }, false},
		{"retry after its host was cut off the backend", []CronEvent{start(0, 1, "h1", 1, 0.1), start(0, 2, "h2", 2, 3.5), start(2, 1, "h2", 3, 2.1), start(4, 1, "h2", 4, 4.1)}, []Fault{{Kind: NetBlackhole, Target: "h1", At: at(0.5), End: at(3)}},
			func(r CronReport) bool { return r.Retries == 1 && len(r.Problems) == 0 }, false},
		{"another host cut off explains nothing", []CronEvent{start(0, 1, "h1", 1, 0.1), start(0, 2, "h2", 2, 3.5), start(2, 1, "h2", 3, 2.1), start(4, 1, "h2", 4, 4.1)}, []Fault{{Kind: NetOneWay, Target: "h3", At: at(0.5), End: at(3)}},
			func(r CronReport) bool { return r.UnexplainedRetries == 1 }, false},
		{"a retry while the first attempt still ran", []CronEvent{start(0, 1, "h1", 1, 0.1), start(0, 2, "h2", 2, 3.5), {Kind: "end", Task: "tick", ScheduledAt: at(0), Attempt: 1, Host: "h1", Fencing: 1, At: at(3.6)}, start(2, 1, "h2", 3, 2.1), start(4, 1, "h2", 4, 4.1)}, []Fault{kill("h1", 1)},
			func(r CronReport) bool { return r.Overlaps == 1 }, false},
		{"a retry with a lower fencing token", []CronEvent{start(0, 1, "h1", 5, 0.1), start(0, 2, "h2", 2, 3.5), start(2, 1, "h2", 3, 2.1), start(4, 1, "h2", 6, 4.1)}, []Fault{kill("h1", 1)},
			func(r CronReport) bool { return r.FencingReused == 1 }, false},
		{"off the grid", []CronEvent{start(0, 1, "h1", 1, 0.1), start(2, 1, "h1", 2, 2.1), start(3, 1, "h1", 3, 3.1), start(4, 1, "h1", 4, 4.1)}, nil,
			func(r CronReport) bool { return len(r.Problems) == 1 }, false},
		{"forbid: a time skipped behind a run as long as the period", []CronEvent{start(0, 1, "h1", 1, 0.1), end(0, 1, "h1", 1, 2.3), start(4, 1, "h1", 2, 4.1)}, nil,
			func(r CronReport) bool { return r.Skips == 1 && len(r.Problems) == 0 }, true},
		{"forbid: a time skipped behind a short run", []CronEvent{start(0, 1, "h1", 1, 0.1), end(0, 1, "h1", 1, 1), start(4, 1, "h1", 2, 4.1)}, nil,
			func(r CronReport) bool { return r.Misses == 1 && r.Skips == 0 }, true},
		{"forbid: a time skipped behind a run whose host died", []CronEvent{start(0, 1, "h1", 1, 0.1), start(4, 1, "h2", 2, 4.1)}, []Fault{kill("h1", 1)},
			func(r CronReport) bool { return r.Misses == 1 }, true},
		{"forbid: a start while another time's run still ran", []CronEvent{start(0, 1, "h1", 1, 0.1), end(0, 1, "h1", 1, 2.5), start(2, 1, "h2", 2, 2.1), start(4, 1, "h2", 3, 4.1)}, nil,
			func(r CronReport) bool { return r.Overlaps == 1 }, true},
		{"allow: a start while another time's run still ran", []CronEvent{start(0, 1, "h1", 1, 0.1), end(0, 1, "h1", 1, 2.5), start(2, 1, "h2", 2, 2.1), start(4, 1, "h2", 3, 4.1)}, nil,
			func(r CronReport) bool { return len(r.Problems) == 0 }, false},
		{"forbid: a start while the run of a frozen host still ran", []CronEvent{start(0, 1, "h1", 1, 0.1), end(0, 1, "h1", 1, 2.5), start(2, 1, "h2", 2, 2.1), start(4, 1, "h2", 3, 4.1)}, []Fault{{Kind: DaemonStop, Target: "h1", At: at(0.5), End: at(3)}},
			func(r CronReport) bool { return len(r.Problems) == 0 }, true},
	}
	for _, c := range cases {
		r := CheckCron(c.events, CronCheck{Task: "tick", Step: 2 * time.Second, Until: at(4), Lease: 3 * time.Second, LostWithin: 20 * time.Second, Forbid: c.forbid}, c.faults)
		if !c.check(r) {
			t.Errorf("%s: unexpected report %+v", c.name, r)
		}
	}
}

// TestCheckQueue does the same for the queue check.
func TestCheckQueue(t *testing.T) {
	ev := func(kind, p, id string, attempt int, worker string, when float64) JobEvent {
		return JobEvent{Kind: kind, Payload: p, JobID: id, Attempt: attempt, Worker: worker, At: at(when)}
	}
	redelivered := []JobEvent{ev("start", "j1", "1", 1, "w1-1", 0), ev("done", "j1", "1", 1, "w1-1", 1), ev("start", "j1", "1", 2, "w2-1", 5), ev("done", "j1", "1", 2, "w2-1", 6)}
	cases := []struct {
		name      string
		events    []JobEvent
		pushed    []string
		ambiguous map[string]bool
		faults    []Fault
		check     func(QueueReport) bool
	}{
		{"clean", []JobEvent{ev("start", "j1", "1", 1, "w1-1", 0), ev("done", "j1", "1", 1, "w1-1", 1)}, []string{"j1"}, nil, nil,
			func(r QueueReport) bool { return len(r.Problems) == 0 && r.Pushed == 1 }},
		{"lost", []JobEvent{ev("start", "j1", "1", 1, "w1-1", 0)}, []string{"j1", "j2"}, nil, nil,
			func(r QueueReport) bool { return r.Lost == 2 }},
		{"redelivered without cause", redelivered, []string{"j1"}, nil, nil,
			func(r QueueReport) bool { return r.Redeliveries == 1 && r.UnexplainedRedeliveries == 1 }},
		{"redelivered after its worker was killed", redelivered, []string{"j1"}, nil, []Fault{{Kind: WorkerKill, Target: "w1-1", At: at(1.5), End: at(1.5)}},
			func(r QueueReport) bool { return r.Redeliveries == 1 && len(r.Problems) == 0 }},
		{"redelivered after its worker was cut off the backend", redelivered, []string{"j1"}, nil, []Fault{{Kind: NetReset, Target: "w1", At: at(0.5), End: at(1.5)}},
			func(r QueueReport) bool { return r.Redeliveries == 1 && len(r.Problems) == 0 }},
		{"another worker cut off explains nothing", redelivered, []string{"j1"}, nil, []Fault{{Kind: NetBlackhole, Target: "w2", At: at(0.5), End: at(1.5)}},
			func(r QueueReport) bool { return r.UnexplainedRedeliveries == 1 }},
		{"another worker killed explains nothing", redelivered, []string{"j1"}, nil, []Fault{{Kind: WorkerKill, Target: "w2-1", At: at(1.5), End: at(1.5)}},
			func(r QueueReport) bool { return r.UnexplainedRedeliveries == 1 }},
		{"a retried push explains a second job", []JobEvent{ev("start", "j1", "1", 1, "w1-1", 0), ev("done", "j1", "1", 1, "w1-1", 1), ev("start", "j1", "2", 1, "w1-1", 2), ev("done", "j1", "2", 1, "w1-1", 3)}, []string{"j1"}, map[string]bool{"j1": true}, nil,
			func(r QueueReport) bool { return len(r.Problems) == 0 }},
		{"redelivered after an outage that hung its claim", []JobEvent{ev("start", "j1", "1", 1, "w1-1", 2.5), ev("start", "j1", "1", 2, "w1-1", 3), ev("done", "j1", "1", 2, "w1-1", 4)}, []string{"j1"}, nil, []Fault{{Kind: BackendRestart, At: at(0.5), End: at(2.4)}},
			func(r QueueReport) bool { return r.Redeliveries == 1 && len(r.Problems) == 0 }},
		{"an outage long before explains nothing", []JobEvent{ev("start", "j1", "1", 1, "w1-1", 6), ev("start", "j1", "1", 2, "w1-1", 7), ev("done", "j1", "1", 2, "w1-1", 8)}, []string{"j1"}, nil, []Fault{{Kind: BackendRestart, At: at(1), End: at(2)}},
			func(r QueueReport) bool { return r.UnexplainedRedeliveries == 1 }},
		{"one attempt started twice", []JobEvent{ev("start", "j1", "1", 1, "w1-1", 0), ev("start", "j1", "1", 1, "w2-1", 0.5), ev("done", "j1", "1", 1, "w1-1", 1)}, []string{"j1"}, nil, []Fault{{Kind: BackendRestart, At: at(0.2), End: at(0.4)}},
			func(r QueueReport) bool { return r.DuplicateAttempts == 1 }},
		{"a postgres crash lost the claim: the attempt runs again", []JobEvent{ev("start", "j1", "1", 1, "w1-1", 0.2), ev("start", "j1", "1", 1, "w2-1", 2.5), ev("done", "j1", "1", 1, "w2-1", 3)}, []string{"j1"}, nil, []Fault{{Kind: BackendRestart, Target: "postgres", At: at(0), End: at(1.5)}},
			func(r QueueReport) bool {
				return r.DuplicateAttempts == 0 && r.RerunAfterLostWrite == 1 && len(r.Problems) == 0
			}},
		{"a mysql crash explains no repeated attempt", []JobEvent{ev("start", "j1", "1", 1, "w1-1", 0.2), ev("start", "j1", "1", 1, "w2-1", 2.5), ev("done", "j1", "1", 1, "w2-1", 3)}, []string{"j1"}, nil, []Fault{{Kind: BackendRestart, Target: "mysql", At: at(0), End: at(1.5)}},
			func(r QueueReport) bool { return r.DuplicateAttempts == 1 }},
		{"a postgres crash long after the claim explains nothing", []JobEvent{ev("start", "j1", "1", 1, "w1-1", 0), ev("start", "j1", "1", 1, "w2-1", 5), ev("done", "j1", "1", 1, "w2-1", 6)}, []string{"j1"}, nil, []Fault{{Kind: BackendRestart, Target: "postgres", At: at(3), End: at(4)}},
			func(r QueueReport) bool { return r.DuplicateAttempts == 1 }},
	}
	for _, c := range cases {
		var pushed []Pushed
		for _, p := range c.pushed {
			pushed = append(pushed, Pushed{p, at(-1), at(-0.9)})
		}
		r := CheckQueue(c.events, pushed, c.ambiguous, c.faults, 3*time.Second)
		if !c.check(r) {
			t.Errorf("%s: unexpected report %+v", c.name, r)
		}
	}
}

// TestWitnessCounts runs the holder script without coordd: three holders
// at once must read 3, and a holder killed inside must stop counting.
func TestWitnessCounts(t *testing.T) {
	if _, err := exec.LookPath("flock"); err != nil {
		t.Fatal("flock(1) is needed by the witness: install util-linux")
	}
	w := &world{t: t, dir: t.TempDir()}
	w.writeScripts()
	run := func(n int) []*exec.Cmd {
		var cmds []*exec.Cmd
		for i := range n {
			c := exec.Command("/bin/sh", w.path("hold.sh"))
			c.Env = append(os.Environ(), fmt.Sprintf("COORDD_CHAOS_CLIENT=t%d", i), fmt.Sprintf("COORDD_SLOT=%d", i), fmt.Sprintf("COORDD_FENCING_TOKEN=%d", 10+i))
			c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			cmds = append(cmds, c)
		}
		return cmds
	}
	first := run(3)
	proctest.Eventually(t, 10*time.Second, "three entries", func() bool {
		n, _, _ := ReadPeaks(w.path("peaks"))
		return n == 3
	})
	// Kill the whole group of the first holder (its sleep too), as coordd
	// does to a holder whose sem run died.
	_ = syscall.Kill(-first[0].Process.Pid, syscall.SIGKILL)
	_ = first[0].Wait()
	for _, c := range first[1:] {
		_ = c.Wait()
	}
	if n, peak, err := ReadPeaks(w.path("peaks")); err != nil || peak != 3 {
		t.Fatalf("three holders at once: %d entries, peak %d, %v", n, peak, err)
	}
	// One holder now; the killed one's pid file is left but dead.
	if err := os.WriteFile(w.path("peaks"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(w.path("holders"), "*")); len(left) != 1 {
		t.Fatalf("want the killed holder's pid file left behind, have %v", left)
	}
	for _, c := range run(1) {
		_ = c.Wait()
	}
	if _, peak, _ := ReadPeaks(w.path("peaks")); peak != 1 {
		t.Fatalf("a dead holder still counted: peak %d", peak)
	}
}

// TestWitnessFencing runs the holder script as holders of one slot would:
// growing tokens pass, a token the resource saw already, or a lower one,
// is reported, and so is a holder still running when a newer token of its
// slot arrived.
func TestWitnessFencing(t *testing.T) {
	if _, err := exec.LookPath("flock"); err != nil {
		t.Fatal("flock(1) is needed by the witness: install util-linux")
	}
	w := &world{t: t, dir: t.TempDir()}
	w.writeScripts()
	hold := func(slot int, token int64) *exec.Cmd {
		c := exec.Command("/bin/sh", w.path("hold.sh"))
		c.Env = append(os.Environ(), "COORDD_CHAOS_CLIENT=t", fmt.Sprintf("COORDD_SLOT=%d", slot), fmt.Sprintf("COORDD_FENCING_TOKEN=%d", token))
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		return c
	}
	check := func(want int) {
		t.Helper()
		ev, err := ReadFencing(w.path("fencing"))
		if err != nil {
			t.Fatal(err)
		}
		if n, problems := CheckFencing(ev); n != want {
			t.Fatalf("%d stale holders, want %d: %v", n, want, problems)
		}
	}
	for _, tok := range []int64{1795825944521642, 1795825944521643} {
		_ = hold(0, tok).Wait()
	}
	_ = hold(1, 7).Wait() // another slot has its own sequence
	check(0)
	_ = hold(0, 1795825944521643).Wait() // the same token again
	check(1)
	_ = hold(0, 5).Wait() // a lower one
	check(2)
	// A holder of slot 1 still running when a newer token of slot 1
	// reaches the resource: its end is a violation. It is frozen inside
	// while the newer token arrives (tried again if it left too soon).
	for try := 0; ; try++ {
		before, _ := ReadFencing(w.path("fencing"))
		tok := int64(100 + 10*try)
		old := hold(1, tok)
		proctest.Eventually(t, 10*time.Second, "the older holder inside", func() bool {
			ev, _ := ReadFencing(w.path("fencing"))
			return len(ev) > len(before)
		})
		_ = syscall.Kill(old.Process.Pid, syscall.SIGSTOP)
		ev, _ := ReadFencing(w.path("fencing"))
		if len(ev) == len(before)+1 {
			if err := os.WriteFile(filepath.Join(w.path("fence"), "1"), []byte(fmt.Sprintln(tok+1)), 0o644); err != nil {
				t.Fatal(err)
			}
			_ = syscall.Kill(old.Process.Pid, syscall.SIGCONT)
			_ = old.Wait()
			break
		}
		_ = syscall.Kill(old.Process.Pid, syscall.SIGCONT)
		_ = old.Wait()
		if try == 5 {
			t.Fatal("the holder never stayed inside long enough to be frozen")
		}
	}
	check(3)
}

// TestLostWritesOfAFailoverToAStaleReplica: a push acknowledged, or a cron
// claim made, between the cut of replication and the promotion may be
// lost; the same outside that window is a violation.
func TestLostWritesOfAFailoverToAStaleReplica(t *testing.T) {
	failover := []Fault{{Kind: RedisFailover, Target: "redis", At: at(10), End: at(12)}}
	q := CheckQueue(nil, []Pushed{{"j1", at(10.5), at(10.6)}, {"j2", at(5), at(5.1)}, {"j3", at(12.5), at(12.6)}}, nil, failover, 3*time.Second)
	if q.LostToFailover != 1 || q.Lost != 2 {
		t.Errorf("queue: %+v, want j1 lost to the failover and j2, j3 lost", q)
	}
	twice := []JobEvent{
		{Kind: "start", Payload: "j1", JobID: "1", Attempt: 2, Worker: "w1-1", At: at(10.5)},
		{Kind: "start", Payload: "j1", JobID: "1", Attempt: 2, Worker: "w2-1", At: at(12.5)},
		{Kind: "done", Payload: "j1", JobID: "1", Attempt: 2, Worker: "w2-1", At: at(13)},
	}
	if q := CheckQueue(twice, []Pushed{{"j1", at(1), at(1.1)}}, nil, failover, 3*time.Second); q.RerunAfterLostWrite != 1 || len(q.Problems) != 0 {
		t.Errorf("queue: %+v, want the attempt claimed in the window started again, no problem", q)
	}
	if q := CheckQueue(twice, []Pushed{{"j1", at(1), at(1.1)}}, nil, nil, 3*time.Second); q.DuplicateAttempts != 1 {
		t.Errorf("queue without a failover: %+v, want a duplicate attempt", q)
	}
	rerun := []CronEvent{start(10, 1, "h1", 1, 10.1), start(10, 1, "h2", 2, 12.5), start(12, 1, "h2", 3, 12.6)}
	c := CheckCron(rerun, CronCheck{Task: "tick", Step: 2 * time.Second, Until: at(12), Lease: 3 * time.Second, LostWithin: 20 * time.Second}, failover)
	if c.RerunAfterLostWrite != 1 || len(c.Problems) != 0 {
		t.Errorf("cron: %+v, want one rerun after the failover and no problem", c)
	}
	c = CheckCron(rerun, CronCheck{Task: "tick", Step: 2 * time.Second, Until: at(12), Lease: 3 * time.Second, LostWithin: 20 * time.Second}, nil)
	if c.DuplicateStarts != 1 {
		t.Errorf("cron without a failover: %+v, want a duplicate start", c)
	}
}
