package scheduler

import (
	"context"
	"encoding/json"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/sqlite"
	"github.com/coordd/coordd/internal/child"
	"github.com/coordd/coordd/leadership"
	"github.com/coordd/coordd/semaphore"
	"github.com/coordd/coordd/spec"
	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// This test binary is the guard of the commands the tests run, as
	// coordd's executable is the daemon's: every run goes through it.
	child.MaybeRunShim()
	exe, err := os.Executable()
	if err != nil {
		panic(err)
	}
	child.DefaultShim = exe
	// The guard lives as long as the process; so does its reaper.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/coordd/coordd/internal/child.startGuard.func1"))
}

func openStore(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), "embedded", path, backends.Options{Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

// newDef returns a definition with the spec's defaults and a shell command.
func newDef(schedule, shell string) spec.CronTask {
	return spec.CronTask{
		Schedule: schedule, Timezone: "UTC", Command: spec.Command{Shell: shell},
		KillGrace: time.Second, CatchUp: spec.CatchUpOnce, CatchUpLimit: 100, Overlap: spec.OverlapForbid,
		MaxAttempts: 1, RetryBackoff: 0, OnHostLoss: spec.HostLossRetry, HistoryLimit: 100, RunLease: 3 * time.Second,
	}
}

// put stores def as task name with next_exec = next.
func put(t *testing.T, s *sqlite.Store, name string, def spec.CronTask, next time.Time) {
	t.Helper()
	raw, err := json.Marshal(def)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutCron(t.Context(), name, raw, next, true); err != nil {
		t.Fatal(err)
	}
}

func now(t *testing.T, s *sqlite.Store) time.Time {
	t.Helper()
	n, err := s.Now(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// host is one running scheduler with its elector.
type host struct {
	store *sqlite.Store
	el    *leadership.Elector
	s     *Scheduler
	stop  func()
}

func logger(t *testing.T, name string) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Info, Output: testWriter{t}})
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// start runs a scheduler for name on its own handle of path. stop shuts it
// down gracefully; it also runs at cleanup.
func start(t *testing.T, path, name string) *host {
	t.Helper()
	// These tests use run leases of seconds: sweep and poll as often.
	return startWith(t, path, name, time.Second, time.Second)
}

// startWith is start with the scheduler's Poll and Sweep.
func startWith(t *testing.T, path, name string, poll, sweep time.Duration) *host {
	t.Helper()
	return startLogging(t, path, name, poll, sweep, logger(t, name))
}

// startLogging is startWith with the scheduler's logger.
func startLogging(t *testing.T, path, name string, poll, sweep time.Duration, log hclog.Logger, opts ...func(*Config)) *host {
	t.Helper()
	st := openStore(t, path)
	h := &host{store: st}
	el, err := leadership.New(leadership.Config{Leader: st, Host: name, Lease: 2 * time.Second, Log: logger(t, name+".leader")})
	if err != nil {
		t.Fatal(err)
	}
	h.el = el
	cfg := Config{
		Host: name, Elector: h.el,
		Backends: func() map[string]backends.Backend { return map[string]backends.Backend{"embedded": st} },
		Semaphore: func(sem string) (*semaphore.Client, backends.SemaphoreConfig, error) {
			cl, err := semaphore.New(st, name)
			if err != nil {
				return nil, backends.SemaphoreConfig{}, err
			}
			m, err := st.ObserveSemaphores(context.Background(), []string{sem})
			if err != nil || m[sem] == nil {
				return nil, backends.SemaphoreConfig{}, err
			}
			return cl, m[sem].Config, nil
		},
		Queue:  func(string) (backends.Queues, error) { return st, nil },
		Log:    log,
		Stdout: testWriter{t},
		Poll:   poll, Sweep: sweep,
	}
	for _, o := range opts {
		o(&cfg)
	}
	h.s = New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); h.el.Run(ctx) }()
	go func() { defer wg.Done(); _ = h.s.Run(ctx) }()
	var once sync.Once
	h.stop = func() {
		once.Do(func() {
			sctx, c := context.WithTimeout(context.Background(), 10*time.Second)
			defer c()
			_ = h.s.Shutdown(sctx)
			cancel()
			wg.Wait()
		})
	}
	t.Cleanup(h.stop)
	return h
}

func history(t *testing.T, s *sqlite.Store, name string) []backends.Run {
	t.Helper()
	runs, err := s.History(context.Background(), name, 0)
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(runs, func(i, j int) bool {
		if !runs[i].ScheduledAt.Equal(runs[j].ScheduledAt) {
			return runs[i].ScheduledAt.Before(runs[j].ScheduledAt)
		}
		return runs[i].Attempt < runs[j].Attempt
	})
	return runs
}

// waitRuns polls the history until cond holds.
func waitRuns(t *testing.T, s *sqlite.Store, name string, d time.Duration, cond func([]backends.Run) bool) []backends.Run {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		runs := history(t, s, name)
		if cond(runs) {
			return runs
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: condition not met within %v; history:\n%s", name, d, dump(runs))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func dump(runs []backends.Run) string {
	var b strings.Builder
	for _, r := range runs {
		b.WriteString(r.ScheduledAt.UTC().Format(time.RFC3339Nano) + " attempt " + itoa(r.Attempt) + " " + r.Status + " " + r.Error + " manual=" + boolStr(r.Manual) + "\n")
	}
	return b.String()
}

func itoa(i int) string { return strconv.Itoa(i) }
func boolStr(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

func finished(runs []backends.Run) int {
	n := 0
	for _, r := range runs {
		if r.Status != backends.RunRunning {
			n++
		}
	}
	return n
}

func lines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Fields(strings.ReplaceAll(string(b), " ", "_"))
}
