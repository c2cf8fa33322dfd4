package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/proctest"
)

// TestQueueKeyOrderProcesses: jobs pushed with `queue push
// --key user-7`, among jobs of other keys and jobs without one, and worked
// by two real `coordd queue work --concurrency 4` processes, run one at a
// time and in push order, while the other jobs run beside them. The
// commands append start and end lines to one file (O_APPEND: the file's
// line order is the order of the events), which the test reads.
func TestQueueKeyOrderProcesses(t *testing.T) {
	for _, typ := range []string{"sqlite", "mysql", "postgres", "redis"} {
		t.Run(typ, func(t *testing.T) { queueKeyOrderProcesses(t, typ) })
	}
}

func queueKeyOrderProcesses(t *testing.T, typ string) {
	c := newCLI(t)
	const decl = "queues:\n  q: {partitions: 4, visibility_timeout: 30s}\n"
	var p string
	if typ == "sqlite" {
		p = writeSpec(t, decl)
	} else {
		p = writeSpec(t, hostsBackend(t, typ)+decl)
	}
	if code, _, errs := c.run("", false, "apply", "-f", p, "--auto-approve"); code != 0 {
		t.Fatalf("apply: %s", errs)
	}
	const keyed = 6
	var want []string // user-7's payloads in push order
	push := func(payload string, args ...string) {
		t.Helper()
		args = append([]string{"queue", "push", "q", "-f", p}, args...)
		if code, _, errs := c.run("", false, append(args, payload)...); code != 0 {
			t.Fatalf("push %s: %s", payload, errs)
		}
	}
	for i := range keyed {
		pl := fmt.Sprintf("user-7.%d", i)
		push(pl, "--key", "user-7")
		want = append(want, pl)
		push(fmt.Sprintf("other-%d.0", i), "--key", fmt.Sprintf("other-%d", i))
		push(fmt.Sprintf("free.%d", i))
	}

	log := filepath.Join(t.TempDir(), "events.log")
	// user-7's jobs take longer, so that other jobs visibly run beside them.
	script := `read -r p; echo "start $p" >> ` + log + `; case $p in user-7.*) sleep 0.5;; *) sleep 0.1;; esac; echo "end $p" >> ` + log
	const workers = 2
	done := make([]chan error, workers)
	stderrs := make([]*proctest.SyncBuffer, workers)
	cmds := make([]*exec.Cmd, workers)
	for i := range workers {
		w := exec.Command(proctest.Binary(t), "queue", "work", "q", "-f", p, "--concurrency", "4", "--drain", "--", "sh", "-c", script)
		w.Env = append(os.Environ(), "COORDD_DATA_DIR="+c.dataDir)
		stderrs[i] = &proctest.SyncBuffer{}
		w.Stderr = stderrs[i]
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[i], done[i] = w, make(chan error, 1)
		go func() { done[i] <- w.Wait() }()
	}
	for i := range workers {
		select {
		case err := <-done[i]:
			if err != nil {
				t.Fatalf("worker %d: %v\n%s", i, err, stderrs[i])
			}
		case <-time.After(2 * time.Minute):
			for _, w := range cmds {
				_ = w.Process.Kill()
			}
			t.Fatalf("worker %d did not drain within 2m\n%s", i, stderrs[i])
		}
	}

	raw, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	var keyEvents []string // user-7's events in file order
	running := 0           // user-7 jobs running at this point of the file
	beside := 0            // other jobs started while a user-7 job ran
	for _, l := range lines {
		ev, pl, _ := strings.Cut(l, " ")
		if strings.HasPrefix(pl, "user-7.") {
			keyEvents = append(keyEvents, l)
			if ev == "start" {
				running++
			} else {
				running--
			}
			continue
		}
		if ev == "start" && running > 0 {
			beside++
		}
	}
	var wantEvents []string
	for _, pl := range want {
		wantEvents = append(wantEvents, "start "+pl, "end "+pl)
	}
	if strings.Join(keyEvents, "\n") != strings.Join(wantEvents, "\n") {
		t.Errorf("user-7's jobs ran as\n%s\nwant one at a time in push order:\n%s", strings.Join(keyEvents, "\n"), strings.Join(wantEvents, "\n"))
	}
	if beside == 0 {
		t.Errorf("no other job started while a user-7 job ran:\n%s", raw)
	}
	if got := strings.Count(string(raw), "start "); got != 3*keyed {
		t.Errorf("%d jobs started, want %d (each once):\n%s", got, 3*keyed, raw)
	}
	if st := queueStatsOf(t, c, p); st.Ready+st.InFlight+st.Delayed+st.Dead != 0 {
		t.Errorf("queue not empty: %+v", st)
	}
}

// TestQueuePushPriorityProcesses: jobs pushed with `queue push
// --priority` are worked by a `queue work --concurrency 1` process
// highest priority first, in push order within one priority; `queue jobs`
// shows each job's priority; a priority out of range is refused with exit
// 1 before anything is pushed. On every queue backend.
func TestQueuePushPriorityProcesses(t *testing.T) {
	for _, typ := range []string{"sqlite", "mysql", "postgres", "redis"} {
		t.Run(typ, func(t *testing.T) { queuePushPriorityProcesses(t, typ) })
	}
}

func queuePushPriorityProcesses(t *testing.T, typ string) {
	c := newCLI(t)
	const decl = "queues:\n  q: {partitions: 4}\n"
	p := writeSpec(t, decl)
	if typ != "sqlite" {
		p = writeSpec(t, hostsBackend(t, typ)+decl)
	}
	if code, _, errs := c.run("", false, "apply", "-f", p, "--auto-approve"); code != 0 {
		t.Fatalf("apply: %s", errs)
	}
	for _, bad := range []string{"101", "-101", "x"} {
		if code, _, errs := c.run("", false, "queue", "push", "q", "-f", p, "--priority", bad, "never"); code == 0 || !strings.Contains(errs, "priority") {
			t.Fatalf("push --priority %s: exit %d, stderr %q; want a refusal naming the priority", bad, code, errs)
		}
	}
	pushed := []struct {
		payload  string
		priority string
	}{{"low-1", "-5"}, {"normal-1", "0"}, {"urgent-1", "50"}, {"normal-2", "0"}, {"urgent-2", "50"}, {"low-2", "-5"}, {"high-1", "10"}}
	for _, j := range pushed {
		if code, _, errs := c.run("", false, "queue", "push", "q", "-f", p, "--priority", j.priority, j.payload); code != 0 {
			t.Fatalf("push %s: %s", j.payload, errs)
		}
	}
	code, out, errs := c.run("", false, "queue", "jobs", "q", "-f", p)
	if code != 0 || !strings.Contains(out, "PRIORITY") || !strings.Contains(out, " 50 ") || !strings.Contains(out, " -5 ") {
		t.Fatalf("queue jobs: exit %d\n%s%s", code, out, errs)
	}

	log := filepath.Join(t.TempDir(), "order")
	w := exec.Command(proctest.Binary(t), "queue", "work", "q", "-f", p, "--concurrency", "1", "--drain", "--", "sh", "-c", "cat >> "+log+"; echo >> "+log)
	w.Env = append(os.Environ(), "COORDD_DATA_DIR="+c.dataDir)
	if out, err := w.CombinedOutput(); err != nil {
		t.Fatalf("queue work: %v\n%s", err, out)
	}
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Fields(string(data))
	want := []string{"urgent-1", "urgent-2", "high-1", "normal-1", "normal-2", "low-1", "low-2"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("worked %v, want %v", got, want)
	}
}
