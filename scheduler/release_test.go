package scheduler

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/redis"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/semaphore"
	"github.com/coordd/coordd/spec"
	"github.com/hashicorp/go-hclog"
)

// logBuf is a log sink the test reads while the scheduler writes.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// waitFor polls cond every 20 ms until it holds, failing after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lineWith is the first line of s that contains sub.
func lineWith(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}

// TestFinalWritesRetried: the end of a cron run, its semaphore release and
// the record of its result, happens while the store (a private Redis with
// an append-only file, so that it keeps its data) is down. Both are
// retried, logged with the semaphore's and the task's name, and succeed
// once it is back: the slot is free at once, not after its lease (1 m),
// and the run is recorded as succeeded rather than left running.
func TestFinalWritesRetried(t *testing.T) {
	for _, withSem := range []bool{true, false} {
		name := "finish"
		if withSem {
			name = "release"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			srv := testenv.StartRedis(t, "--appendonly", "yes", "--appendfsync", "always")
			st, err := redis.Open(ctx, "r", srv.URL(), "t:", backends.Options{Version: "test"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			semCfg := backends.SemaphoreConfig{Name: "one", Limit: 1, Lease: time.Minute, Mode: spec.ModeLease, MaxWaiting: -1}
			if err := st.PutSemaphore(ctx, semCfg); err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			started, proceed := filepath.Join(dir, "started"), filepath.Join(dir, "proceed")
			def := newDef("@every 1h", "touch "+started+"; while [ ! -e "+proceed+" ]; do sleep 0.05; done")
			def.RunLease = time.Minute
			if withSem {
				def.Semaphore = "one"
			}
			raw, err := json.Marshal(def)
			if err != nil {
				t.Fatal(err)
			}
			if err := st.PutCron(ctx, "task", raw, time.Now().Add(time.Hour), true); err != nil {
				t.Fatal(err)
			}
			var logs logBuf
			s := New(Config{
				Host: "h",
				Log:  hclog.New(&hclog.LoggerOptions{Name: "h", Level: hclog.Info, Output: &logs}),
				Semaphore: func(sem string) (*semaphore.Client, backends.SemaphoreConfig, error) {
					cl, err := semaphore.New(st, "h")
					return cl, semCfg, err
				},
			})
			type result struct {
				code int
				err  error
			}
			done := make(chan result, 1)
			go func() {
				code, err := s.RunManual(ctx, st, "task", os.Stderr, os.Stderr)
				done <- result{code, err}
			}()
			waitFor(t, 20*time.Second, "the command to start", func() bool { _, err := os.Stat(started); return err == nil })

			srv.Kill()
			if err := os.WriteFile(proceed, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			want := "recording the result failed; retrying"
			if withSem {
				want = "releasing the semaphore slot failed; retrying"
			}
			waitFor(t, 20*time.Second, "a logged retry", func() bool { return strings.Contains(logs.String(), want) })
			if line := lineWith(logs.String(), want); !strings.Contains(line, "task=task") {
				t.Errorf("the retry log does not name the task: %s", line)
			}
			srv.Start(t)

			var r result
			select {
			case r = <-done:
			case <-time.After(30 * time.Second):
				t.Fatalf("RunManual did not return\n%s", logs.String())
			}
			if r.err != nil || r.code != 0 {
				t.Fatalf("RunManual: code %d, %v; want 0\n%s", r.code, r.err, logs.String())
			}
			if line := lineWith(logs.String(), want); withSem && !strings.Contains(line, "semaphore=one") {
				t.Errorf("the retry log does not name the semaphore: %s", line)
			}
			runs, err := st.History(ctx, "task", 0)
			if err != nil || len(runs) != 1 || runs[0].Status != backends.RunSucceeded {
				t.Fatalf("history %v %s; want one succeeded run\n%s", err, dump(runs), logs.String())
			}
			cl, err := semaphore.New(st, "other")
			if err != nil {
				t.Fatal(err)
			}
			l, err := cl.Acquire(ctx, "one", semaphore.AcquireOptions{Lease: time.Minute, NoWait: true})
			if err != nil {
				t.Fatalf("the slot is still taken after the run: %v\n%s", err, logs.String())
			}
			_ = l.Release(ctx)
		})
	}
}

// TestChildEnvUnset: the command does not inherit the variables that
// Config.ChildEnvUnset names, and so cannot print them into the output
// that is stored with the run.
func TestChildEnvUnset(t *testing.T) {
	t.Setenv("COORDD_SCHED_TEST_SECRET", "pw-from-env")
	st := openStore(t, filepath.Join(t.TempDir(), "c.db"))
	put(t, st, "env", newDef("@every 1h", "env"), now(t, st).Add(time.Hour))
	for _, unset := range []bool{true, false} {
		cfg := Config{Host: "h", Log: logger(t, "h")}
		if unset {
			cfg.ChildEnvUnset = func() []string { return []string{"COORDD_SCHED_TEST_SECRET"} }
		}
		var out bytes.Buffer
		code, err := New(cfg).RunManual(t.Context(), st, "env", &out, &out)
		if err != nil || code != 0 {
			t.Fatalf("run: %d %v", code, err)
		}
		runs, err := st.History(t.Context(), "env", 1)
		if err != nil || len(runs) != 1 {
			t.Fatalf("history: %v %v", runs, err)
		}
		for what, text := range map[string]string{"stdout": out.String(), "stored output": string(runs[0].Output)} {
			if !strings.Contains(text, "COORDD_TASK=env") {
				t.Fatalf("%s is not the environment:\n%s", what, text)
			}
			if got := strings.Contains(text, "pw-from-env"); got == unset {
				t.Errorf("unset %v: the secret in the %s: %v", unset, what, got)
			}
		}
	}
}
