package scheduler

import (
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/sqlite"
	"github.com/coordd/coordd/internal/benchutil"
	"github.com/coordd/coordd/leadership"
	"github.com/coordd/coordd/spec"
	"github.com/hashicorp/go-hclog"
)

// Benchmarks of the scheduler on the embedded store. Each iteration runs for a
// fixed wall time (about 45 s and 25 s), so run them with -benchtime 1x:
//
//	go test -run '^$' -bench . -benchtime 1x ./scheduler/
//
// Every benchmark reports rt-us, the store's raw round trip (one Now()
// query, averaged over 2,000 calls) measured on the same file in the same
// run.

// benchStore opens and migrates a store on path.
func benchStore(b *testing.B, path string) *sqlite.Store {
	b.Helper()
	st, err := sqlite.Open(context.Background(), "embedded", path, backends.Options{Version: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	return st
}

// benchDef is a task with the spec's defaults (catch_up once, overlap
// forbid, run_lease 30s) and command argv.
func benchDef(schedule string, argv ...string) spec.CronTask {
	return spec.CronTask{
		Schedule: schedule, Timezone: "UTC", Command: spec.Command{Argv: argv},
		KillGrace: 10 * time.Second, CatchUp: spec.CatchUpOnce, CatchUpLimit: 100, Overlap: spec.OverlapForbid,
		MaxAttempts: 1, RetryBackoff: 30 * time.Second, OnHostLoss: spec.HostLossRetry, HistoryLimit: 100, RunLease: 30 * time.Second,
	}
}

func benchPut(b *testing.B, st *sqlite.Store, name string, def spec.CronTask, next time.Time) {
	b.Helper()
	raw, err := json.Marshal(def)
	if err != nil {
		b.Fatal(err)
	}
	if err := st.PutCron(context.Background(), name, raw, next, true); err != nil {
		b.Fatal(err)
	}
}

// stampWriter timestamps the scheduler's "starting" log lines as they are
// written, keyed by scheduled_at.
type stampWriter struct {
	mu     sync.Mutex
	starts map[string]time.Time
}

var scheduledAtRE = regexp.MustCompile(`scheduled_at=(\S+)`)

func (w *stampWriter) Write(p []byte) (int, error) {
	now := time.Now()
	if strings.Contains(string(p), "starting") {
		if m := scheduledAtRE.FindSubmatch(p); m != nil {
			w.mu.Lock()
			w.starts[string(m[1])] = now
			w.mu.Unlock()
		}
	}
	return len(p), nil
}

// benchHost is one elector and scheduler on its own store handle.
type benchHost struct {
	st   *sqlite.Store
	el   *leadership.Elector
	s    *Scheduler
	stop func()
}

func startBenchHost(b *testing.B, path, name string, log hclog.Logger) *benchHost {
	b.Helper()
	st := benchStore(b, path)
	h := &benchHost{st: st}
	// Lease zero: the default leader_lease, 4s.
	el, err := leadership.New(leadership.Config{Leader: st, Host: name, Log: log.Named("leader")})
	if err != nil {
		b.Fatal(err)
	}
	h.el = el
	h.s = New(Config{
		Host: name, Elector: h.el,
		Backends: func() map[string]backends.Backend { return map[string]backends.Backend{"embedded": st} },
		Log:      log, Stdout: discard{},
	})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { h.el.Run(ctx) })
	wg.Go(func() { _ = h.s.Run(ctx) })
	var once sync.Once
	h.stop = func() {
		once.Do(func() {
			sctx, c := context.WithTimeout(context.Background(), 20*time.Second)
			defer c()
			_ = h.s.Shutdown(sctx)
			cancel()
			wg.Wait()
		})
	}
	b.Cleanup(h.stop)
	return h
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// BenchmarkCronLateness runs a real scheduler (leadership elector with the
// default 4s lease, one SQLite file) and an `@every 1s` task whose command is
// `date +%s%N`, run directly (no shell). Its output, kept in the run
// history, is the wall clock right after the child's exec; lateness is that
// minus the scheduled instant (COORDD_SCHEDULED_AT). start-p50/p99 are the
// part before the command: the scheduled instant to the scheduler's
// "starting" log line, written after the claim, right before the fork.
// Target: p99 <= 20 ms (docs/benchmarks.md).
func BenchmarkCronLateness(b *testing.B) {
	const occurrences = 40
	dir := b.TempDir()
	path := filepath.Join(dir, "db.sqlite")
	st := benchStore(b, path)
	rt := benchutil.RawRoundTrip(b, st)
	ctx := context.Background()
	b.ResetTimer()
	var late, claim []time.Duration
	for i := range b.N {
		task := "tick" + strconv.Itoa(i)
		sw := &stampWriter{starts: map[string]time.Time{}}
		log := hclog.New(&hclog.LoggerOptions{Name: "bench", Level: hclog.Info, Output: sw})
		now, err := st.Now(ctx)
		if err != nil {
			b.Fatal(err)
		}
		benchPut(b, st, task, benchDef("@every 1s", "date", "+%s%N"), now.Truncate(time.Second).Add(2*time.Second))
		h := startBenchHost(b, path, "h1", log)
		deadline := time.Now().Add(occurrences*time.Second + 30*time.Second)
		var runs []backends.Run
		for {
			runs, err = st.History(ctx, task, 0)
			if err != nil {
				b.Fatal(err)
			}
			done := 0
			for _, r := range runs {
				if r.Status != backends.RunRunning {
					done++
				}
			}
			if done >= occurrences {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("%d of %d occurrences within the deadline", done, occurrences)
			}
			time.Sleep(200 * time.Millisecond)
		}
		h.stop()
		for _, r := range runs {
			if r.Status == backends.RunRunning {
				continue
			}
			if r.Status != backends.RunSucceeded || r.Attempt != 1 || r.Manual {
				b.Fatalf("occurrence %s: status %s attempt %d: %s", r.ScheduledAt, r.Status, r.Attempt, r.Error)
			}
			ns, err := strconv.ParseInt(strings.TrimSpace(string(r.Output)), 10, 64)
			if err != nil {
				b.Fatalf("occurrence %s: output %q: %v", r.ScheduledAt, r.Output, err)
			}
			late = append(late, time.Unix(0, ns).Sub(r.ScheduledAt))
			key := r.ScheduledAt.UTC().Format(time.RFC3339Nano)
			sw.mu.Lock()
			at, ok := sw.starts[key]
			sw.mu.Unlock()
			if ok {
				claim = append(claim, at.Sub(r.ScheduledAt))
			}
		}
		if len(claim) != len(late) {
			b.Fatalf("%d starting log lines for %d occurrences", len(claim), len(late))
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(len(late)), "occurrences")
	b.ReportMetric(benchutil.Ms(benchutil.Pct(late, 50)), "p50-ms")
	b.ReportMetric(benchutil.Ms(benchutil.Pct(late, 99)), "p99-ms")
	b.ReportMetric(benchutil.Ms(benchutil.Pct(late, 100)), "max-ms")
	b.ReportMetric(benchutil.Ms(benchutil.Pct(claim, 50)), "start-p50-ms")
	b.ReportMetric(benchutil.Ms(benchutil.Pct(claim, 99)), "start-p99-ms")
	b.ReportMetric(float64(rt.Nanoseconds())/1e3, "rt-us")
}

// BenchmarkIdleRoundTrips runs two hosts (elector with the default 4s lease
// and scheduler each, on their own handles of one file) with one cron task
// due once a day, and counts each handle's store round trips over 20 s once
// a leader is elected: what an idle `coordd run` sends, without the spec
// watcher (no store traffic) and the leader's 30 s resync.
func BenchmarkIdleRoundTrips(b *testing.B) {
	const window = 20 * time.Second
	dir := b.TempDir()
	path := filepath.Join(dir, "db.sqlite")
	st := benchStore(b, path)
	rt := benchutil.RawRoundTrip(b, st)
	now, err := st.Now(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	benchPut(b, st, "nightly", benchDef("0 4 * * *", "true"), now.Add(20*time.Hour))
	b.ResetTimer()
	var leaderRate, followerRate float64
	for range b.N {
		log := hclog.NewNullLogger()
		hs := []*benchHost{startBenchHost(b, path, "h1", log), startBenchHost(b, path, "h2", log)}
		var leader, follower *benchHost
		deadline := time.Now().Add(15 * time.Second)
		for leader == nil {
			if time.Now().After(deadline) {
				b.Fatal("no leader within 15s")
			}
			time.Sleep(100 * time.Millisecond)
			for i, h := range hs {
				if _, ok := h.el.Leading(); ok {
					leader, follower = h, hs[1-i]
				}
			}
		}
		time.Sleep(2 * time.Second)
		l0, f0 := leader.st.RoundTrips(), follower.st.RoundTrips()
		start := time.Now()
		time.Sleep(window)
		el := time.Since(start).Seconds()
		leaderRate += float64(leader.st.RoundTrips()-l0) / el
		followerRate += float64(follower.st.RoundTrips()-f0) / el
		if _, ok := leader.el.Leading(); !ok {
			b.Fatal("leadership moved during the window")
		}
		for _, h := range hs {
			h.stop()
		}
	}
	b.StopTimer()
	b.ReportMetric(leaderRate/float64(b.N), "leader-trips/s")
	b.ReportMetric(followerRate/float64(b.N), "follower-trips/s")
	b.ReportMetric(float64(rt.Nanoseconds())/1e3, "rt-us")
}
