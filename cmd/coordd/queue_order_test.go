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
